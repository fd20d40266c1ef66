#include "harness/phase.h"

#include <nvtx3/nvToolsExt.h>

#include "harness/cuda_support.h"
#include "harness/flight_recorder.h"
#include "harness/inject.h"
#include "harness/trace.h"

namespace ddpbench {
namespace {
nvtxDomainHandle_t Domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA("ddpbench");
  return domain;
}
}  // namespace

const char* PhaseName(Phase phase) {
  static const char* kNames[kNumPhases] = {"step", "data", "forward", "backward", "optimizer",
                                           "communication"};
  return kNames[static_cast<int>(phase)];
}

NvtxRange::NvtxRange(const char* name) : traced_(trace::Enabled()) {
  if (traced_) trace::Begin(name);
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = name;
  nvtxDomainRangePushEx(Domain(), &attr);
}
NvtxRange::~NvtxRange() {
  nvtxDomainRangePop(Domain());
  if (traced_) trace::End();
}

PhaseTimer::PhaseTimer(torch::Device device) : device_(device) {}
PhaseTimer::~PhaseTimer() = default;

PhaseTimer::Scope::Scope(PhaseTimer* timer, Phase phase, torch::Device device)
    : timer_(timer), phase_(phase), range_(std::make_unique<NvtxRange>(PhaseName(phase))) {
  if (device.is_cuda()) {
    events_ = std::make_shared<CudaEventPair>(device.index());
    events_->RecordStart();
  } else {
    start_ = std::chrono::steady_clock::now();
  }
  flight_start_ = flight::PhaseBegin(phase);
  InjectInPhase(phase);  // --inject's delay, timed as the phase's own
}

PhaseTimer::Scope::Scope(Scope&& other) noexcept
    : timer_(other.timer_), phase_(other.phase_), start_(other.start_),
      flight_start_(other.flight_start_), events_(std::move(other.events_)), range_(std::move(other.range_)) {
  other.timer_ = nullptr;
}

PhaseTimer::Scope::~Scope() {
  if (!timer_) return;
  flight::PhaseEnd(phase_, flight_start_);
  if (events_) {
    events_->RecordEnd();
    timer_->AddCuda(phase_, events_);
  } else {
    auto end = std::chrono::steady_clock::now();
    timer_->AddCpu(phase_, std::chrono::duration<double, std::milli>(end - start_).count());
  }
}

void PhaseTimer::AddCpu(Phase phase, double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  cpu_ms_[static_cast<int>(phase)] += ms;
}

void PhaseTimer::AddCuda(Phase phase, std::shared_ptr<CudaEventPair> events) {
  std::lock_guard<std::mutex> lock(mutex_);
  cuda_events_.emplace_back(phase, std::move(events));
}

void PhaseTimer::AddDeferred(Phase phase, std::function<double()> ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  deferred_.emplace_back(phase, std::move(ms));
}

void PhaseTimer::StartStep() {
  std::lock_guard<std::mutex> lock(mutex_);
  cpu_ms_.fill(0);
  cuda_events_.clear();
  deferred_.clear();
}

void PhaseTimer::EndStep(bool counted) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (counted) {
    for (int p = 0; p < kNumPhases; ++p) totals_[p] += cpu_ms_[p];
    for (auto& e : cuda_events_) pending_.push_back(std::move(e));
    for (auto& d : deferred_) deferred_pending_.push_back(std::move(d));
  }
  cpu_ms_.fill(0);
  cuda_events_.clear();
  deferred_.clear();
}

std::array<double, kNumPhases> PhaseTimer::Totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [phase, events] : pending_) totals_[static_cast<int>(phase)] += events->ElapsedMs();
  pending_.clear();
  for (auto& [phase, ms] : deferred_pending_) totals_[static_cast<int>(phase)] += ms();
  deferred_pending_.clear();
  return totals_;
}

}  // namespace ddpbench
