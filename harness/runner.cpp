// The harness loop. Everything a row reports is measured here, the same way
// for every strategy: warm-up excluded, device-synchronised step times,
// per-phase times, memory per device, accuracy on the test set, parity.
#include "harness/runner.h"

#include <ATen/Parallel.h>
#include "harness/log.h"
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sys/stat.h>
#include <optional>
#include <sched.h>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "harness/context.h"
#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "harness/memory.h"
#include "harness/parity.h"
#include "harness/phase.h"
#include "strategies/registry.h"

namespace ddpbench {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

bool FindBaselineThroughput(const std::vector<Row>& rows, const Row& row, double* throughput) {
  static const char* kMatch[] = {"model", "dataset", "per_device_batch", "device", "threads_per_device",
                                 "image_size", "amp", "width", "small_input", "norm", "device_name"};
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    const Row& r = *it;
    auto get = [&](const Row& x, const char* k) {
      auto f = x.find(k);
      return f == x.end() ? std::string() : f->second;
    };
    if (get(r, "strategy") != "single" || get(r, "gpus") != "1") continue;
    bool same = true;
    for (const char* k : kMatch) same = same && get(r, k) == get(row, k);
    if (!same || get(r, "throughput_img_s").empty()) continue;
    *throughput = std::stod(get(r, "throughput_img_s"));
    return *throughput > 0;
  }
  return false;
}

namespace {

std::string Num(double v, int digits = 3) { return fmt::format("{:.{}f}", v, digits); }
std::string JoinNums(const std::vector<double>& v, int digits = 1) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "/" : "") + Num(v[i], digits);
  return s;
}

// The devices this process drives, and whether that oversubscribes hardware.
std::vector<torch::Device> ResolveDevices(const RunConfig& c, const StrategyInfo& info,
                                          const DistContext& dist, bool* oversubscribed) {
  const bool cuda = c.device == "cuda";
  int per_process = (info.parallelism == Parallelism::kDataInProcess ||
                     info.parallelism == Parallelism::kModel) ? c.gpus : 1;
  if (info.parallelism == Parallelism::kNone && c.gpus != 1)
    throw ConfigError(fmt::format("--gpus={}: the '{}' strategy uses exactly one device; use --gpus=1 "
                                  "or a multi-device strategy (dp|ddp|mp|pmp|zero1|zero2|zero3)", c.gpus, c.strategy));
  std::vector<torch::Device> devices;
  if (cuda) {
    int count = CudaDeviceCount();
    int needed = info.parallelism == Parallelism::kDataMultiProcess ? dist.local_world : per_process;
    *oversubscribed = needed > count;
    if (*oversubscribed && !c.oversubscribe)
      throw ConfigError(fmt::format("--gpus={}: this machine has {} CUDA device(s); pass --oversubscribe "
                                    "to share them (the row will say so)", c.gpus, count));
    int first = info.parallelism == Parallelism::kDataMultiProcess ? dist.local_rank : 0;
    for (int i = 0; i < per_process; ++i)
      devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>((first + i) % count));
  } else {
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    int threads = c.threads_per_device *
                  (info.parallelism == Parallelism::kDataMultiProcess ? dist.local_world : per_process);
    *oversubscribed = cores > 0 && threads > cores;
    if (*oversubscribed && !c.oversubscribe)
      throw ConfigError(fmt::format(
          "--gpus={} x --threads-per-device={}: {} threads but this machine has {} cores; pass "
          "--oversubscribe to run anyway (the row will say so)", c.gpus, c.threads_per_device, threads, cores));
    for (int i = 0; i < per_process; ++i) devices.emplace_back(torch::kCPU);
  }
  return devices;
}

struct Progress {
  bool on;
  void Update(int64_t step, int64_t total, bool warmup, double img_s, double loss) {
    if (!on) return;
    fmt::print(stderr, "\r{} {:>5}/{:<5} {:>9.1f} img/s  loss {:.4f}   ", warmup ? "warm-up" : "step   ",
               step, total, img_s, loss);
    if (step == total) fmt::print(stderr, "\n");
  }
};

}  // namespace

namespace {

// What a run needs before anything is built: resolved device, the devices of
// this process, the data and model shapes. Every check that can fail on a bad
// flag or bad data happens here, so a spawning parent can run it once before
// it starts any rank (one message, not one per rank).
struct PreparedRun {
  RunConfig config;
  std::vector<torch::Device> devices;
  bool oversubscribed = false;
  DataSpec spec;
  DatasetInfo info;
  ResNetOptions model;
  int64_t replicas = 1, process_batch = 0, global_batch = 0;
};

PreparedRun PrepareRun(const RunConfig& config_in, const StrategyEntry& entry, const DistContext& dist) {
  PreparedRun run;
  RunConfig& config = run.config;
  config = config_in;
  if (config.device == "auto") config.device = CudaAvailable() ? "cuda" : "cpu";
  if (config.device == "cuda" && !CudaAvailable())
    throw ConfigError("--device=cuda: no CUDA device is available here; accepted: --device=cpu or auto");
  run.devices = ResolveDevices(config, entry.info, dist, &run.oversubscribed);

  DataSpec& spec = run.spec;
  spec.name = config.dataset;
  spec.data_dir = config.data_dir;
  spec.image_size = config.image_size == 0 && config.dataset == "synthetic" ? 224 : config.image_size;
  spec.seed = config.seed;
  spec.augment = config.augment;
  spec.prefetch = config.prefetch;
  spec.device = run.devices.front();
  spec.synthetic_classes = config.num_classes > 0 ? config.num_classes : 1000;
  run.replicas = entry.info.parallelism == Parallelism::kDataInProcess      ? config.gpus
                 : entry.info.parallelism == Parallelism::kDataMultiProcess ? dist.world
                                                                            : 1;
  run.process_batch =
      config.batch_size * (entry.info.parallelism == Parallelism::kDataInProcess ? config.gpus : 1);
  spec.batch_size = run.process_batch;
  run.global_batch = config.batch_size * run.replicas;
  {
    // Host-side data (the dataset cache) is not device memory.
    CpuDeviceScope host(-1);
    run.info = DescribeDataset(spec);
  }
  ResNetOptions& model = run.model;
  model.depth = config.Depth();
  model.num_classes = run.info.num_classes;
  model.in_channels = run.info.channels;
  model.small_input = config.small_input;
  model.width = config.width;
  model.norm = ParseNormKind(config.norm);
  ValidateResNetOptions(model);
  return run;
}

// Ranks share the machine's cores: rank r of a CPU run gets its own
// threads_per_device cores (unless oversubscribed), as a GPU rank gets its GPU.
void PinRankToCores(int local_rank, int threads) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  if (static_cast<int>(cores.size()) < (local_rank + 1) * threads) return;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = 0; i < threads; ++i) CPU_SET(cores[local_rank * threads + i], &mine);
  if (sched_setaffinity(0, sizeof(mine), &mine) != 0)
    LogWarn("could not pin rank {} to its cores: {}", local_rank, std::strerror(errno));
}

}  // namespace

void PreflightCheck(const RunConfig& config, int world) {
  DistContext dist;
  dist.world = dist.local_world = world;
  PrepareRun(config, FindStrategy(config.strategy), dist);
}

int RunBenchmark(const RunConfig& config_in, DistContext& dist) {
  const StrategyEntry& entry = FindStrategy(config_in.strategy);
  PreparedRun run = PrepareRun(config_in, entry, dist);
  RunConfig& config = run.config;
  const bool cuda = config.device == "cuda";
  const bool oversubscribed = run.oversubscribed;
  const std::vector<torch::Device>& devices = run.devices;
  dist.device = cuda ? devices.front() : torch::Device(torch::kCPU);

  // A logical CPU device is threads_per_device intra-op threads.
  if (!cuda) {
    if (entry.info.parallelism == Parallelism::kDataMultiProcess && dist.world > 1 && !oversubscribed)
      PinRankToCores(dist.local_rank, config.threads_per_device);
    at::set_num_threads(config.threads_per_device);
    InstallCpuMemoryTracker();
  }
  if (entry.info.parallelism == Parallelism::kDataMultiProcess) dist.Connect(config.timeout_s, cuda);
  CpuDeviceScope main_device(0);

  const DataSpec& spec = run.spec;
  const DatasetInfo& info = run.info;
  const ResNetOptions& model = run.model;
  const int64_t replicas = run.replicas, process_batch = run.process_batch, global_batch = run.global_batch;

  double lr = config.lr;
  if (config.lr_scaling == "linear") lr *= static_cast<double>(replicas);
  if (config.lr_scaling == "sqrt") lr *= std::sqrt(static_cast<double>(replicas));

  PhaseTimer timer(devices.front());
  RunContext ctx;
  ctx.config = &config;
  ctx.dist = &dist;
  ctx.devices = devices;
  ctx.model = model;
  ctx.lr = lr;
  ctx.timer = &timer;

  std::unique_ptr<BatchSource> train;
  {
    CpuDeviceScope host(-1);
    train = MakeTrainSource(spec, dist.rank, dist.world);
  }
  int64_t total_steps, timed_steps;
  if (config.epochs > 0) {
    total_steps = std::llround(config.epochs * train->BatchesPerEpoch());
    timed_steps = total_steps - config.warmup;
    if (timed_steps < 1)
      throw ConfigError(fmt::format("--epochs={}: gives {} steps ({} per epoch), not more than --warmup={}",
                                    config.epochs, total_steps, train->BatchesPerEpoch(), config.warmup));
  } else {
    timed_steps = config.steps;
    total_steps = config.warmup + timed_steps;
  }

  // Correctness before timing.
  ParityResult parity;
  if (config.verify) {
    LogInfo("verifying {} against single for {} steps", config.strategy, config.verify_steps);
    parity = RunParityCheck(entry, ctx, spec);
    if (dist.is_root())
      LogInfo("parity: max |param diff| = {:.3e} ({})", parity.max_abs_diff, parity.model);
  }

  auto strategy = entry.make();
  strategy->Setup(ctx);

  Progress progress{dist.is_root() &&
                    (config.progress == "on" || (config.progress == "auto" && isatty(STDERR_FILENO)))};
  std::vector<double> step_ms, losses;
  std::array<double, kNumPhases> phase_total{};
  double timed_wall_ms = 0;
  auto sync = [&] {
    if (cuda)
      for (const auto& d : devices) CudaSynchronize(d.index());
  };
  for (int64_t s = 0; s < total_steps; ++s) {
    const bool warm = s < config.warmup;
    if (s == config.warmup) {
      sync();
      dist.Barrier();
      ResetPeakMemory(devices);
    }
    timer.StartStep();
    auto t0 = std::chrono::steady_clock::now();
    StepResult result;
    {
      NvtxRange range("step");
      Batch batch;
      {
        auto scope = timer.Measure(Phase::kData);
        batch = train->Next();
      }
      result = strategy->Step(batch);
    }
    sync();
    double loss = result.loss.item<double>();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto phases = timer.FinishStep();
    if (!std::isfinite(loss))
      throw std::runtime_error(fmt::format("step {}: the loss is {} (diverged); lower --lr", s, loss));
    if (!warm) {
      step_ms.push_back(ms);
      losses.push_back(loss);
      timed_wall_ms += ms;
      for (int p = 0; p < kNumPhases; ++p) phase_total[p] += phases[p];
    }
    progress.Update(warm ? s + 1 : s - config.warmup + 1, warm ? config.warmup : timed_steps, warm,
                    process_batch * 1000.0 / ms, loss);
  }

  // Accuracy on the test set.
  double accuracy = -1;
  if (info.real && config.eval) {
    std::unique_ptr<BatchSource> test;
    {
      CpuDeviceScope host(-1);
      test = MakeTestSource(spec, dist.rank, dist.world);
    }
    int64_t correct = 0, total = 0;
    torch::NoGradGuard no_grad;
    for (int64_t b = 0; test && (config.eval_batches == 0 || b < config.eval_batches); ++b) {
      Batch batch = test->Next();
      if (batch.size() == 0) break;
      auto logits = strategy->Predict(batch.images);
      correct += logits.argmax(1).to(torch::kCPU).eq(batch.labels.to(torch::kCPU)).sum().item<int64_t>();
      total += batch.size();
    }
    double all_correct = dist.AllReduceSum(static_cast<double>(correct));
    double all_total = dist.AllReduceSum(static_cast<double>(total));
    if (all_total > 0) accuracy = all_correct / all_total;
  }

  // Figures of this process, then of every rank (rank order).
  const size_t tail = std::min<size_t>(10, losses.size());
  double final_loss = 0;
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) final_loss += losses[i] / tail;
  std::vector<double> mine = {process_batch * timed_steps * 1000.0 / timed_wall_ms, timed_wall_ms,
                              final_loss, PeakRssMb(), strategy->OptimizerStateMb()};
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceMemory m = MeasureDeviceMemory(devices[i], static_cast<int>(i));
    mine.push_back(m.peak_allocated_mb);
    mine.push_back(m.peak_reserved_mb);
  }
  const size_t stride = mine.size();
  std::vector<double> all = dist.AllGather(mine);
  if (!dist.is_root()) return 0;

  std::vector<double> rank_tput, mem_alloc, mem_reserved, opt_state;
  double max_wall = 0, loss_sum = 0, max_rss = 0;
  for (int r = 0; r < dist.world; ++r) {
    const double* v = all.data() + r * stride;
    rank_tput.push_back(v[0]);
    max_wall = std::max(max_wall, v[1]);
    loss_sum += v[2];
    max_rss = std::max(max_rss, v[3]);
    opt_state.push_back(v[4]);
    for (size_t i = 0; i < devices.size(); ++i) {
      mem_alloc.push_back(v[5 + 2 * i]);
      mem_reserved.push_back(v[6 + 2 * i]);
    }
  }
  const double throughput = global_batch * timed_steps * 1000.0 / max_wall;

  RunEnvironment env = DescribeEnvironment(cuda);
  Row row;
  row["timestamp"] = env.timestamp;
  row["git_sha"] = kGitSha;
  row["host"] = env.host;
  row["strategy"] = config.strategy;
  row["gpus"] = std::to_string(config.gpus);
  row["world_size"] = std::to_string(dist.world);
  row["launcher"] = dist.launcher;
  row["device"] = config.device;
  row["device_name"] = cuda ? CudaDeviceName(devices.front().index()) : env.cpu_model;
  row["threads_per_device"] = cuda ? "" : std::to_string(config.threads_per_device);
  row["oversubscribed"] = oversubscribed ? "true" : "false";
  row["model"] = config.model;
  row["norm"] = config.norm;
  row["width"] = std::to_string(config.width);
  row["small_input"] = config.small_input ? "true" : "false";
  row["dataset"] = config.dataset;
  row["image_size"] = std::to_string(info.height);
  row["per_device_batch"] = std::to_string(config.batch_size);
  row["global_batch"] = std::to_string(global_batch);
  row["steps"] = std::to_string(timed_steps);
  row["warmup"] = std::to_string(config.warmup);
  if (config.epochs > 0) row["epochs"] = fmt::format("{}", config.epochs);
  row["amp"] = config.amp;
  row["optimizer"] = config.optimizer;
  row["lr"] = fmt::format("{}", lr);
  row["throughput_img_s"] = Num(throughput, 2);
  row["throughput_per_rank_img_s"] = JoinNums(rank_tput, 2);
  row["step_ms_p50"] = Num(Percentile(step_ms, 50));
  row["step_ms_p90"] = Num(Percentile(step_ms, 90));
  const Phase kReported[] = {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer,
                             Phase::kCommunication};
  for (Phase p : kReported) {
    double ms = phase_total[static_cast<int>(p)] / timed_steps;
    if (p != Phase::kCommunication || ms > 0) row[std::string(PhaseName(p)) + "_ms"] = Num(ms);
  }
  row["peak_mem_mb"] = Num(*std::max_element(mem_alloc.begin(), mem_alloc.end()), 1);
  row["mem_per_device_mb"] = JoinNums(mem_alloc);
  if (cuda) row["mem_reserved_per_device_mb"] = JoinNums(mem_reserved);
  if (!cuda) row["peak_rss_mb"] = Num(max_rss, 1);
  if (opt_state.front() >= 0) row["optimizer_state_mb"] = JoinNums(opt_state, 2);
  if (accuracy >= 0) row["accuracy"] = Num(accuracy, 4);
  row["final_loss"] = Num(loss_sum / dist.world, 4);
  if (config.verify) {
    row["parity_max_abs_diff"] = fmt::format("{:.3e}", parity.max_abs_diff);
    row["parity_steps"] = std::to_string(parity.steps);
    row["parity_model"] = parity.model;
    row["parity_ok"] = parity.max_abs_diff <= config.verify_tolerance ? "true" : "false";
  }
  for (const auto& [k, v] : strategy->Extras()) row[k] = v;
  row["torch_version"] = env.torch_version;
  row["cuda_version"] = env.cuda_version;
  row["nccl_version"] = env.nccl_version;
  row["cpu_model"] = env.cpu_model;
  row["command"] = config.command;

  if (config.strategy != "single") {
    std::string baseline = !config.baseline.empty() ? config.baseline : config.out;
    double base = 0;
    if (!baseline.empty() && [&] { struct stat st {}; return ::stat(baseline.c_str(), &st) == 0; }() &&
        FindBaselineThroughput(ReadRows(baseline), row, &base)) {
      row["baseline_throughput_img_s"] = Num(base, 2);
      row["scaling_efficiency"] = Num(throughput / (config.gpus * base), 4);
    } else if (!config.baseline.empty()) {
      LogWarn("--baseline={}: no matching single-device row; scaling_efficiency left empty",
                   config.baseline);
    }
  }

  LogInfo("{} gpus={} {}: {:.1f} img/s, step p50 {:.1f} ms, peak mem {} MB{}{}", config.strategy,
               config.gpus, config.device, throughput, Percentile(step_ms, 50), row["mem_per_device_mb"],
               accuracy >= 0 ? fmt::format(", accuracy {:.4f}", accuracy) : "",
               config.verify ? ", parity " + row["parity_max_abs_diff"] : "");
  if (!config.out.empty()) AppendRow(config.out, row);
  if (config.verify && parity.max_abs_diff > config.verify_tolerance) {
    LogError("--verify: parameters differ from the single-device run by {:.3e} > --verify-tolerance={}",
                  parity.max_abs_diff, config.verify_tolerance);
    return 3;
  }
  return 0;
}

}  // namespace ddpbench
