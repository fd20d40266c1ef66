// See kineto_profile.h.
#include "harness/kineto_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <fmt/format.h>

#include <chrono>
#include <set>
#include <thread>
#include <stdexcept>

namespace ddpbench::kineto {
namespace {

using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

bool running = false;
constexpr int kSettleMs = 200;

}  // namespace

void Start(bool cuda) {
  if (running) throw std::logic_error("--profile: a profile is already running");
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running = true;
}

std::string Finish(const std::string& path) {
  if (!running) return "";
  running = false;
  // A collective's thread (Gloo's workers) closes its recorded range after
  // the collective's future completes; finalising the trace while one is
  // still doing so crashed in libkineto (GenericTraceActivity::metadataJson,
  // seen on a loaded 2-core machine). Give those threads time to finish.
  std::this_thread::sleep_for(std::chrono::milliseconds(kSettleMs));
  auto result = torch::autograd::profiler::disableProfiler();
  if (!result) throw std::runtime_error("--profile: the profiler returned no result");
  result->save(path);
  return path;
}

}  // namespace ddpbench::kineto
