#include "strategies/pipeline/stages.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <sstream>
#include <thread>

#include <time.h>

#include "planning/traits.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "datasets/dataset.h"
#include "base/config.h"
#include "base/log.h"
#include "harness/training.h"
#include "strategies/device_workers.h"

#ifdef DDPBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddpbench {
namespace {


// --split, checked against devices x virtual_stages stages.
std::vector<int> GivenSplit(const RunConfig& config, const std::vector<std::string>& names, int devices,
                            int virtual_stages);

}  // namespace

namespace {

// The input a unit is timed on: the sample for the first, else the
// previous unit's output as a leaf that takes a gradient.
torch::Tensor UnitInput(const torch::Tensor& x, size_t u) { return u == 0 ? x : x.detach().requires_grad_(); }

void KeepMinima(size_t u, double forward_ms, double total_ms, UnitTimes* best) {
  if (!best) return;
  best->total_ms[u] = std::min(best->total_ms[u], total_ms);
  best->forward_ms[u] = std::min(best->forward_ms[u], forward_ms);
}

#ifdef DDPBENCH_WITH_CUDA
// TimeUnitsOnce on a GPU. A step launches its kernels ahead of the GPU, so
// a unit costs the GPU's time alone; a host clock with a wait after each
// unit also pays its launches and the autograd thread's hand-off (on an
// H100, ResNet-50's small bf16 blocks took 0.7 ms backward at any batch,
// and the units summed to 1.2x the step). So: a spin kernel queued first
// holds the GPU while the unit's launches run ahead, and events on the
// stream time the unit's forward and its backward.
void TimeUnitsOnceOnGpu(ResNetImpl& model, const torch::Tensor& sample, UnitTimes* best) {
  constexpr int64_t kHeadStartCycles = 20'000'000;  // ~10 ms at an H100's clock
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(sample.device().index());
  torch::Tensor x = sample;
  size_t u = 0;
  for (auto& unit : *model.units()) {
    torch::Tensor in = UnitInput(x, u);
    stream.synchronize();
    at::cuda::sleep(kHeadStartCycles);
    at::cuda::CUDAEvent start(cudaEventDefault), forwarded(cudaEventDefault), end(cudaEventDefault);
    start.record(stream);
    torch::Tensor y = unit.forward(in);
    forwarded.record(stream);
    y.backward(torch::ones_like(y));
    end.record(stream);
    end.synchronize();
    KeepMinima(u, start.elapsed_time(forwarded), start.elapsed_time(end), best);
    x = y.detach();
    ++u;
  }
}
#endif

// This thread's CPU time in ms (what it computed, not what it waited for a core).
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Where ranks or threads outnumber the cores, a unit shorter than the
// scheduler's time slice is mostly timed while its thread holds a core, so
// the minimum of a few repeats is the unit's time alone, while in the run
// the thread gets its share of a core. On one intra-op thread each unit is
// timed by this thread's CPU time, and the whole measurement's wall time over
// its CPU time (the cores' sharing while every rank measures, as every rank
// computes in the run) scales the minima.
struct CoreShare {
  bool by_cpu = false;
  double wall_ms = 0, cpu_ms = 0;
  double Factor() const { return by_cpu && cpu_ms > 0 ? std::max(1.0, wall_ms / cpu_ms) : 1.0; }
};

// One round of MeasureUnitTimes on one sample: each unit's forward, then its
// backward, on the previous unit's detached output; `best` keeps the minima.
void TimeUnitsOnce(ResNetImpl& model, const torch::Tensor& sample, UnitTimes* best, CoreShare* share) {
#ifdef DDPBENCH_WITH_CUDA
  if (sample.is_cuda()) return TimeUnitsOnceOnGpu(model, sample, best);
#endif
  auto since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  torch::Tensor x = sample;
  size_t u = 0;
  for (auto& unit : *model.units()) {
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = ThreadCpuMs();
    torch::Tensor y = unit.forward(UnitInput(x, u));
    const double forward = since(t0), forward_cpu = ThreadCpuMs() - c0;
    y.backward(torch::ones_like(y));
    const double total = since(t0), total_cpu = ThreadCpuMs() - c0;
    if (best) share->wall_ms += total, share->cpu_ms += total_cpu;
    if (share->by_cpu)
      KeepMinima(u, forward_cpu, total_cpu, best);
    else
      KeepMinima(u, forward, total, best);
    x = y.detach();
    ++u;
  }
}

// MeasureUnitTimes on a clone made beforehand.
std::vector<UnitTimes> MeasureClone(ResNetImpl& copy, const std::vector<torch::Tensor>& samples, int repeats) {
  copy.train();
  const size_t n = copy.unit_names().size();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<UnitTimes> best(samples.size(), UnitTimes{std::vector<double>(n, kInf), std::vector<double>(n, kInf)});
  CoreShare share;
  share.by_cpu = at::get_num_threads() == 1;
  for (int round = 0; round <= repeats; ++round)  // round 0 warms up
    for (size_t s = 0; s < samples.size(); ++s)
      TimeUnitsOnce(copy, samples[s], round > 0 ? &best[s] : nullptr, &share);
  const double factor = share.Factor();
  for (UnitTimes& b : best)
    for (size_t u = 0; u < n; ++u) b.total_ms[u] *= factor, b.forward_ms[u] *= factor;
  if (factor > 1.05)
    LogInfo("unit times x{:.2f}: the timing thread had {:.0f}% of a core (the cores are shared, as in the run)",
            factor, 100.0 / factor);
  return best;
}

// A clone of `model` to time. Made in the calling thread: a ResNet's clone
// undoes its draws from the global RNG by saving and restoring its state,
// which two clones made at once would interleave.
std::shared_ptr<ResNetImpl> CloneToTime(const ResNet& model) {
  return std::dynamic_pointer_cast<ResNetImpl>(model->clone());
}

}  // namespace

std::vector<UnitTimes> MeasureUnitTimes(const ResNet& model, const std::vector<torch::Tensor>& samples,
                                        int repeats) {
  return MeasureClone(*CloneToTime(model), samples, repeats);
}


namespace {
std::vector<int> GivenSplit(const RunConfig& config, const std::vector<std::string>& names, int devices,
                            int virtual_stages) {
  const std::string from = virtual_stages > 1
      ? fmt::format("--gpus={} x --virtual-stages={}", devices, virtual_stages) : "";
  return ParseSplit(config.split, devices * virtual_stages, names, from);
}
}  // namespace

namespace {

// MeasureUnitTimes on `threads` threads at once (each its own clone, at the
// calling thread's intra-op thread count), each unit's time the mean over
// the threads: logical CPU devices share the machine's memory bandwidth and
// caches, and a pipeline runs them at the same time.
std::vector<UnitTimes> MeasureConcurrently(const ResNet& model, const std::vector<torch::Tensor>& samples,
                                           int repeats, int threads, const std::string& amp) {
  std::vector<std::vector<UnitTimes>> each(threads);
  std::vector<std::exception_ptr> failed(threads);
  std::vector<std::shared_ptr<ResNetImpl>> copies;
  for (int t = 0; t < threads; ++t) copies.push_back(CloneToTime(model));
  const int intra_op = at::get_num_threads();
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t)
    others.emplace_back([&, t] {
      try {
        at::set_num_threads(intra_op);
        at::init_num_threads();
        const AutocastGuard autocast(amp, samples.front().device());  // autocast is per thread
        each[t] = MeasureClone(*copies[t], samples, repeats);
      } catch (...) {
        failed[t] = std::current_exception();
      }
    });
  try {
    each[0] = MeasureClone(*copies[0], samples, repeats);
  } catch (...) {
    failed[0] = std::current_exception();
  }
  for (auto& t : others) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
  std::vector<UnitTimes> mean = each[0];
  for (size_t s = 0; s < mean.size(); ++s)
    for (size_t u = 0; u < mean[s].total_ms.size(); ++u) {
      double total = 0, forward = 0;
      for (const auto& times : each) total += times[s].total_ms[u], forward += times[s].forward_ms[u];
      mean[s].total_ms[u] = total / threads;
      mean[s].forward_ms[u] = forward / threads;
    }
  return mean;
}

}  // namespace

std::vector<UnitTimes> MeasureUnits(const RunConfig& config, const ResNet& model,
                                    const std::vector<int64_t>& sample_batches, int concurrent) {
  const torch::Device device = model->parameters().front().device();
  const int64_t size = RunImageSize(config);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(config.seed);
  std::vector<torch::Tensor> samples;
  for (int64_t batch : sample_batches)
    samples.push_back(torch::randn({batch, model->options().in_channels, size, size}, generator)
                          .to(device, model->options().dtype));
  constexpr int kRepeats = 3;
  const AutocastGuard autocast(config.amp, device);  // timed in the run's precision
  std::vector<UnitTimes> times = device.is_cpu() && concurrent > 1
                                     ? MeasureConcurrently(model, samples, kRepeats, concurrent, config.amp)
                                     : MeasureUnitTimes(model, samples, kRepeats);
  for (size_t s = 0; s < times.size(); ++s) {
    std::vector<std::string> shown;
    for (double ms : times[s].total_ms) shown.push_back(fmt::format("{:.2f}", ms));
    LogInfo("unit forward+backward ms on a batch of {}: {}", sample_batches[s], fmt::join(shown, " "));
  }
  return times;
}

StagePlan PlanStages(const RunConfig& config, const ResNet& model, int devices, int virtual_stages,
                     const UnitTimes& measured) {
  const auto& names = model->unit_names();
  CheckStageCount(config.strategy, devices, names, virtual_stages);
  const int stages = devices * virtual_stages;
  std::vector<int> counts;
  if (!config.split.empty()) {
    counts = GivenSplit(config, names, devices, virtual_stages);
  } else if (config.balance == "time") {
    counts = BalanceSplit(measured.total_ms, stages);
  } else {
    auto unit_params = model->UnitParameterCounts();
    counts = BalanceSplit(std::vector<double>(unit_params.begin(), unit_params.end()), stages);
  }
  return PlanOfSplit(counts, measured);
}


void LogStagePlan(const RunConfig& config, const ResNet& model, const StagePlan& plan) {
  const char* how = !config.split.empty()       ? "--split"
                    : config.balance == "time" && FindTraits(config.strategy)->micro_batches
                        ? "shortest simulated step on measured times"
                    : config.balance == "time" ? "balanced by measured time"
                                               : "balanced by parameter count";
  const std::vector<int64_t> params = model->UnitParameterCounts();
  std::vector<int64_t> per_stage;
  size_t first = 0;
  for (int c : plan.counts) {
    per_stage.push_back(0);
    for (int i = 0; i < c; ++i) per_stage.back() += params[first + i];
    first += c;
  }
  std::vector<std::string> ms;
  for (double t : plan.stage_ms) ms.push_back(fmt::format("{:.2f}", t));
  LogInfo("{} split ({}): {} = {} units, {} parameters, {} ms forward+backward", config.strategy, how,
          DescribeSplit(plan.counts, model->unit_names()), SplitCounts(plan.counts), fmt::join(per_stage, "/"),
          fmt::join(ms, "/"));
}

StagePlan ChooseSplit(const RunConfig& config, const ResNet& model, int devices, int virtual_stages,
                      int64_t sample_batch) {
  CheckStageCount(config.strategy, devices, model->unit_names(), virtual_stages);
  if (!config.split.empty()) GivenSplit(config, model->unit_names(), devices, virtual_stages);  // before measuring
  const UnitTimes measured = MeasureUnits(config, model, {sample_batch}).front();
  StagePlan plan = PlanStages(config, model, devices, virtual_stages, measured);
  LogStagePlan(config, model, plan);
  return plan;
}

// The image height/width of the run's batches (the runner's rule: synthetic
// data is 224 px unless --image-size says otherwise; real data its own size).
int64_t RunImageSize(const RunConfig& config) {
  if (config.image_size > 0) return config.image_size;
  if (config.dataset == "synthetic") return 224;
  DataSpec spec;
  spec.name = config.dataset;
  spec.data_dir = config.data_dir;
  spec.seed = config.seed;
  spec.prefetch = 0;
  return DescribeDataset(spec).height;
}

}  // namespace ddpbench
