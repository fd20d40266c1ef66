// One process's run, in order: prepare (flags against the hardware, data,
// model shape), set the process up, check parity, run the timed loop
// (step_loop.cpp), evaluate, gather every rank's figures into one RunResult,
// and (rank 0) report it (reporter.cpp). Everything is measured the same way
// for every strategy.
#include "app/runner.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/context.h"
#include "harness/cpu_pinning.h"
#include "harness/cuda_support.h"
#include "app/calibrate.h"
#include "app/cli.h"
#include "datasets/gpu_decode.h"
#include "app/data_only.h"
#include "app/expected.h"
#include "base/crash_point.h"
#include "harness/dist.h"
#include "harness/memory.h"
#include "app/memory_fit.h"
#include "app/parity.h"
#include "app/recompute_choice.h"
#include "base/log.h"
#include "harness/mfu.h"
#include "harness/phase.h"
#include "app/run_result.h"
#include "app/export.h"
#include "harness/snapshot.h"
#include "app/step_loop.h"
#include "app/train_goal.h"
#include "harness/trace.h"
#include "harness/flight_watch.h"
#include "harness/training.h"
#include "models/fused_norm.h"
#include "strategies/registry.h"
#include "planning/mesh.h"
#include "planning/traits.h"
#include "planning/schedules.h"

namespace ddpbench {

namespace {

// The devices this process drives, and whether that oversubscribes hardware.
std::vector<torch::Device> ResolveDevices(const RunConfig& c, const StrategyInfo& info,
                                          const DistContext& dist, bool* oversubscribed) {
  const bool cuda = c.device == "cuda";
  const bool rank_per_device = RunsRankPerDevice(info, c);
  int per_process = !rank_per_device && (info.parallelism() == Parallelism::kDataInProcess ||
                                         info.parallelism() == Parallelism::kModel) ? c.gpus : 1;
  if (info.parallelism() == Parallelism::kNone && c.gpus != 1)
    throw ConfigError(fmt::format("--gpus={}: the '{}' strategy uses exactly one device; use --gpus=1 "
                                  "or a multi-device strategy ({})", c.gpus, c.strategy,
                                  JoinNames(StrategiesWhere([](const StrategyTraits& t) {
                                    return t.parallelism() != Parallelism::kNone;
                                  }))));
  std::vector<torch::Device> devices;
  if (cuda) {
    int count = CudaDeviceCount();
    int needed = rank_per_device ? dist.local_world : per_process;
    *oversubscribed = needed > count;
    if (*oversubscribed && !c.oversubscribe)
      throw ConfigError(fmt::format("--gpus={}: this machine has {} CUDA device(s); pass --oversubscribe "
                                    "to share them (the row will say so)", c.gpus, count));
    int first = rank_per_device ? dist.local_rank : 0;
    for (int i = 0; i < per_process; ++i)
      devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>((first + i) % count));
  } else {
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    int threads = c.threads_per_device * (rank_per_device ? dist.local_world : per_process);
    *oversubscribed = cores > 0 && threads > cores;
    if (*oversubscribed && !c.oversubscribe)
      throw ConfigError(fmt::format(
          "--gpus={} x --threads-per-device={}: {} threads but this machine has {} cores; pass "
          "--oversubscribe to run anyway (the row will say so)", c.gpus, c.threads_per_device, threads, cores));
    for (int i = 0; i < per_process; ++i) devices.emplace_back(torch::kCPU);
  }
  return devices;
}



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
  RunSettings settings;
};

// The times a strategy's group of ranks is replicated: --replicate-degree
// where the strategy reads it (1 elsewhere).
int ReplicateDegree(const RunConfig& config, const StrategyInfo& info) {
  return info.Reads("--replicate-degree") ? static_cast<int>(config.replicate_degree) : 1;
}

// --replicate-degree left out on a strategy that replicates by node (hsdp):
// the number of nodes, the world over the ranks of one node.
void ResolveReplicateDegree(RunConfig* config, const StrategyInfo& info, const DistContext& dist) {
  if (!info.replicate_by_node) return;
  if (config->replicate_degree_given) {
    // hsdp asks for node-aligned groups: a given degree must keep each group on one node.
    const int64_t R = config->replicate_degree;
    if (dist.world > 1 && R >= 1 && dist.world % R == 0 && !GroupsWithinNodes(static_cast<int>(dist.world / R),
                                                                              dist.local_world))
      throw ConfigError(fmt::format(
          "--replicate-degree={} with --strategy={}: shard groups of {} ranks do not fit in a node's {} ranks; "
          "accepted: a degree that is a multiple of the {} nodes (world {} / ranks per node {}), or "
          "--strategy=zero3 for groups across nodes", R, config->strategy, dist.world / R, dist.local_world,
          dist.world / std::max(1, dist.local_world), dist.world, dist.local_world));
    return;
  }
  config->replicate_degree = std::max(1, dist.world / std::max(1, dist.local_world));
  if (dist.is_root() && dist.world > 1)
    LogInfo("--strategy={}: replicate degree {} (one per node), shard groups of {} ranks", config->strategy,
          config->replicate_degree, dist.world / config->replicate_degree);
}

// How the step runs on this device: memory format, cuDNN autotuning, TF32,
// optimizer kernels. Flags win; "auto" picks what is fastest on the device.
RunSettings ResolveSettings(RunConfig& config, const std::vector<torch::Device>& devices) {
  const bool cuda = config.device == "cuda";
  if (config.cuda_graphs && !cuda)
    throw ConfigError("--cuda-graphs: CUDA graphs need a CUDA device; leave the flag out on CPU");
  if (!config.memory_snapshot.empty() && !cuda)
    throw ConfigError(fmt::format("--memory-snapshot={}: the snapshot is the CUDA caching allocator's history and this "
                                  "run is on CPU; leave the flag out", config.memory_snapshot));
  if (config.fuse == "bn-add-relu" && !cuda)
    throw ConfigError(fmt::format("--fuse={}: the fusion runs in cuDNN, which needs a CUDA device; leave the flag "
                                  "out on CPU", config.fuse));
  if (config.fuse == "bn-add-relu" && !FusedNormHasCudnn())
    throw ConfigError(fmt::format("--fuse={}: this ddpbench was built without cuDNN's headers (CMake found none "
                                  "beside the torch wheel); rebuild with them or leave the flag out", config.fuse));
  RunSettings s;
  s.memory_format = config.memory_format != "auto" ? config.memory_format : cuda ? "channels_last" : "contiguous";
  s.tf32 = config.tf32;
  s.cudnn_benchmark = cuda;
  s.optimizer_impl = ResolveOptimizerImpl(config, devices.front());
  return s;
}

// ImageFolder decode threads per rank when --data-workers is not given: the
// host's cores that the devices' threads leave, shared by the ranks on it
// (a CUDA device keeps one host thread busy), at least 1.
int DefaultDataWorkers(const RunConfig& c, const StrategyInfo& info, const DistContext& dist) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int processes = RunsRankPerDevice(info, c) ? dist.local_world : 1;
  const int devices = info.parallelism() == Parallelism::kDataMultiProcess ? dist.local_world
                      : info.parallelism() == Parallelism::kNone         ? 1
                                                                       : c.gpus;
  const int busy = devices * (c.device == "cuda" ? 1 : c.threads_per_device);
  return std::max(1, (cores - busy) / std::max(1, processes));
}

// Preflight: refuses a run whose model state and activations surely exceed
// one device (memory_fit.h), before anything is allocated.
void CheckRunFitsDevices(const PreparedRun& run, const StrategyInfo& info, const DistContext& dist) {
  const RunConfig& config = run.config;
  const int zero_stage = info.zero_stage;
  const bool model_cut = info.parallelism() == Parallelism::kModel;
  // The ranks the model state is sharded over: the world, or one shard group of the mesh.
  const int replicas = ReplicateDegree(config, info);
  const int world = info.parallelism() == Parallelism::kDataMultiProcess ? dist.world / std::max(replicas, 1) : 1;
  const DeviceDemand demand =
      EstimateDeviceDemand(run.model, run.info.height, run.info.width, config.batch_size, config.optimizer,
                           config.momentum, zero_stage, world, model_cut ? config.gpus : 1);
  const torch::Device& device = run.devices.front();
  if (device.is_cuda()) {
    CheckDemandFits(config, demand, CudaTotalBytes(device.index()), fmt::format("cuda device {}", device.index()));
  } else if (config.cpu_device_memory_mb > 0) {
    CheckDemandFits(config, demand, static_cast<double>(config.cpu_device_memory_mb) * 1024 * 1024,
                    "a cpu device (--cpu-device-memory-mb)");
  } else {  // the devices on this host share its memory
    const int sharing = info.parallelism() == Parallelism::kDataMultiProcess ? dist.local_world
                        : info.parallelism() == Parallelism::kNone         ? 1
                                                                         : config.gpus;
    CheckDemandFits(config, demand, AvailableHostBytes() / std::max(1, sharing),
                    fmt::format("a cpu device (this machine's available memory shared by {} device(s))", sharing));
  }
}

// --stage-ranks: a stage per rank of a pipeline (world / --replicate-degree),
// each holding at least one unit (half blocks where pmp may choose them), so
// that a spawning parent refuses too many stages once, before any rank starts.
void CheckStagesFitUnits(const RunConfig& config, const StrategyInfo& info, ResNetOptions model) {
  model.half_blocks = config.units == "half-blocks" || (config.units == "auto" && info.micro_batches);
  const auto units = static_cast<int64_t>(ResNetUnitNames(model).size());
  const int64_t R = ReplicateDegree(config, info), stages = config.gpus / std::max<int64_t>(R, 1);
  if (stages <= units) return;
  throw ConfigError(fmt::format(
      "--gpus={}{}: {} stages, but --strategy={} puts at least one of the model's {} {} on each stage; accepted: "
      "at most {} stages{}", config.gpus, R > 1 ? fmt::format(" with --replicate-degree={}", R) : "", stages,
      config.strategy, units, model.half_blocks ? "half blocks" : "units", units,
      R > 1 ? fmt::format(" (--gpus<={})", units * R) : fmt::format(" (--gpus<={})", units)));
}

PreparedRun PrepareRun(const RunConfig& config_in, const StrategyEntry& entry, const DistContext& dist) {
  if (dist.is_root()) CheckPaths(PathOptions(config_in));  // every output, before anything is built
  PreparedRun run;
  RunConfig& config = run.config;
  config = config_in;
  if (config.device == "auto") config.device = CudaAvailable() ? "cuda" : "cpu";
  ResolveReplicateDegree(&config, entry.info, dist);
  if (config.stage_ranks && config.device == "cuda")
    throw ConfigError("--stage-ranks with --device=cuda: the stage hand-off is addressed by tag, which NCCL "
                      "ignores (it pairs point-to-point messages in the order they are issued); built and "
                      "checked for CPU devices over Gloo; accepted: --device=cpu, or leave --stage-ranks out");
  if (config.device == "cuda" && !CudaAvailable())
    throw ConfigError("--device=cuda: no CUDA device is available here; accepted: --device=cpu or auto");
  if (config.decode == "gpu" && (config.device != "cuda" || !GpuDecodeBuilt()))  // --device=auto resolved
    throw ConfigError(GpuDecodeRefusal(config.device));
  CheckExpectedProfile(config);
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
  spec.val_fraction = config.val_fraction;
  spec.data_workers = config.data_workers > 0 ? config.data_workers : DefaultDataWorkers(config, entry.info, dist);
  spec.skip_bad_images = config.skip_bad_images;
  spec.gpu_decode = config.decode == "gpu";
  run.replicas = entry.info.parallelism() == Parallelism::kDataInProcess      ? config.gpus
                 : entry.info.parallelism() == Parallelism::kDataMultiProcess ? dist.world
                 : RunsRankPerDevice(entry.info, config)                      ? ReplicateDegree(config, entry.info)
                                                                            : 1;
  run.process_batch =
      config.batch_size * (entry.info.parallelism() == Parallelism::kDataInProcess ? config.gpus : 1);
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
  run.settings = ResolveSettings(config, run.devices);
  model.channels_last = spec.channels_last = run.settings.memory_format == "channels_last";
  model.half_blocks = config.units == "half-blocks";
  model.fuse = ParseNormFuse(config.fuse);
  model.recompute = RecomputeNames(config, model);
  ValidateResNetOptions(model);
  if (entry.info.family == Family::kPipeline && config.stage_ranks) CheckStagesFitUnits(config, entry.info, model);
  if (!config.data_only) CheckRunFitsDevices(run, entry.info, dist);
  if (dist.is_root()) CheckResumable(config, dist.world);
  return run;
}

// The process-wide settings a run needs before anything is built.
void ConfigureProcess(const PreparedRun& run, const StrategyEntry& entry, DistContext& dist) {
  const RunConfig& config = run.config;
  const bool cuda = config.device == "cuda";
  dist.device = cuda ? run.devices.front() : torch::Device(torch::kCPU);
  ConfigureCpuMalloc(config.cpu_malloc);  // host memory of every run; before any worker thread
  if (cuda) {
    at::globalContext().setBenchmarkCuDNN(run.settings.cudnn_benchmark);
    at::globalContext().setAllowTF32CuDNN(run.settings.tf32 != "off");
    at::globalContext().setAllowTF32CuBLAS(run.settings.tf32 == "all");
  } else {
    // A logical CPU device is threads_per_device intra-op threads.
    if (RunsRankPerDevice(entry.info, config) && dist.world > 1 && !run.oversubscribed)
      PinRankToCores(dist.local_rank, config.threads_per_device);
    at::set_num_threads(config.threads_per_device);
    InstallCpuMemoryTracker(config.cpu_device_memory_mb * (int64_t{1} << 20));
  }
  // Pipeline stages on separate ranks all read the same batches.
  dist.same_data = entry.info.parallelism() == Parallelism::kModel && config.stage_ranks;
  // --device=auto that found a GPU: as --device=cuda, the pipelines' overlapped optimizer is CPU only.
  if (entry.info.family == Family::kPipeline && cuda && config.overlap_optimizer)
    throw ConfigError(PipelineOverlapOnGpuRefusal(config));
  // Oversubscribed GPUs cannot host one NCCL rank each: such ranks use Gloo.
  if (RunsRankPerDevice(entry.info, config) && cuda && run.oversubscribed && config.cuda_graphs)
    throw ConfigError(fmt::format(
        "--cuda-graphs with --strategy={} on {} ranks that share GPUs (oversubscribed): such ranks communicate "
        "over Gloo, whose CUDA collectives wait on the host and cannot be captured; give every rank a GPU of its "
        "own (NCCL), or leave --cuda-graphs out", config.strategy, dist.world));
  dist.cpu_backend = config.cpu_backend;
  dist.shm_slot_bytes = static_cast<int64_t>(config.bucket_cap_mb * (1 << 20));
  // --stage-ranks: the stage hand-offs through shared memory too, up to 4 MiB a message (larger ones: Gloo).
  if (entry.info.family == Family::kPipeline && config.stage_ranks) dist.shm_p2p_bytes = 4 << 20;
  if (RunsRankPerDevice(entry.info, config))
    dist.Connect(config.timeout_s, cuda, /*nccl=*/cuda && !run.oversubscribed);
  if (ReplicateDegree(config, entry.info) > 1) {
    CheckMeshOfWorld(config, dist.world);  // a launcher's world, unknown to the flag checks
    dist.ConnectMesh(static_cast<int>(config.replicate_degree), entry.info.family == Family::kPipeline);
  }
}

// Steps of the whole run: --steps after the warm-up, --epochs' worth, or
// unbounded (a budget or a target ends it).
int64_t TotalSteps(const RunConfig& config, BatchSource& train) {
  if (config.epochs > 0) {
    const int64_t total = std::llround(config.epochs * train.BatchesPerEpoch());
    if (total - config.warmup < 1)
      throw ConfigError(fmt::format("--epochs={}: gives {} steps ({} per epoch), not more than --warmup={}",
                                    config.epochs, total, train.BatchesPerEpoch(), config.warmup));
    return total;
  }
  if (config.steps > 0) return config.warmup + config.steps;
  return std::numeric_limits<int64_t>::max() / 4;
}

// This session's steps: a resumed run continues at first_step and warms up
// again (untimed) before timing what is left.
LoopPlan PlanSteps(const RunConfig& config, const StrategyInfo& info, const PreparedRun& run, BatchSource& train,
                   const DistContext& dist, int64_t first_step) {
  LoopPlan plan;
  const int64_t remaining = TotalSteps(config, train) - first_step;
  plan.first_step = first_step;
  plan.warmup = std::min(config.warmup, std::max<int64_t>(remaining - 1, 0));
  plan.timed = remaining - plan.warmup;
  plan.process_batch = run.process_batch;
  plan.progress_live = isatty(STDERR_FILENO);
  plan.progress = dist.is_root() && (config.progress == "on" || (config.progress == "auto" && plan.progress_live));
  plan.check_every = config.device == "cuda" ? 25 : 1;
  plan.reset_peak_at_timed = !config.cuda_graphs;
  if (dist.is_root()) plan.profile = config.profile;
  // The profiler records host operators of the thread that starts it (CUDA
  // kernels from every thread): devices driven from one process each have a
  // thread of their own.
  const bool device_threads = !RunsRankPerDevice(info, config) && run.devices.size() > 1;
  if (!plan.profile.empty() && config.device == "cpu" && device_threads)
    LogWarn("--profile on CPU records the training loop's thread only: --strategy={} runs its devices on threads of "
            "their own, whose operators the profile lacks (on CUDA every kernel is recorded)", config.strategy);
  plan.profile_cuda = config.device == "cuda";
  return plan;
}

// The per-epoch CSV of a run that trains to an answer: --epoch-csv, or a file
// beside --out named after the strategy and the run's start.
std::string EpochCsvPath(const RunConfig& config, const DistContext& dist) {
  if (!config.TrainsToAnswer()) return "";
  if (!config.epoch_csv.empty()) return config.epoch_csv;
  if (config.out.empty()) return "";
  const std::string stem = config.out.size() > 4 && config.out.substr(config.out.size() - 4) == ".csv"
                               ? config.out.substr(0, config.out.size() - 4) : config.out;
  std::string stamp = UtcTimestamp();  // 2026-11-23T05:48:54Z -> 20261123T054854Z
  stamp.erase(std::remove_if(stamp.begin(), stamp.end(), [](char c) { return c == '-' || c == ':'; }), stamp.end());
  return fmt::format("{}-epochs-{}-{}gpu-{}.csv", stem, config.strategy, config.gpus, stamp);
}

// The integers of a small int64 snapshot tensor.
std::vector<int64_t> Ints(const torch::Tensor& t) {
  const auto v = t.to(torch::kLong).contiguous();
  return std::vector<int64_t>(v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
}

// The newest intact snapshot of this configuration (collective), or none. A
// pipeline's split and shape are measured at set-up (--balance=time, pmp
// without --chunks) and may come out otherwise on a restart, so the
// snapshot's become the resumed run's --split, --units, --chunks, --schedule
// and --virtual-stages.
std::optional<SnapshotStore::Loaded> FindSnapshot(SnapshotStore* store, DistContext& dist, RunConfig* config) {
  if (!store) return std::nullopt;
  auto loaded = store->LoadNewest(dist, /*can_reshard=*/!config->data_only);
  if (!loaded && config->resume) store->RefuseResume();
  if (!loaded) return loaded;
  const auto& t = loaded->tensors;
  if (t.count("meta.split")) config->split = fmt::format("{}", fmt::join(Ints(t.at("meta.split")), ","));
  if (t.count("meta.units")) config->units = Ints(t.at("meta.units")).at(0) != 0 ? "half-blocks" : "blocks";
  if (t.count("meta.shape")) {
    const auto shape = Ints(t.at("meta.shape"));  // micro-batches, chunks per device, schedule
    config->chunks = shape.at(0);
    const auto schedule = static_cast<PipelineSchedule>(shape.at(2));
    config->schedule = PipelineScheduleName(schedule);
    config->virtual_stages = IsInterleaved(schedule) ? shape.at(1) : 0;
  }
  return loaded;
}

// This rank's state from a snapshot of another layout (strategy, world,
// --replicate-degree): the slices it holds under its own layout.
TensorMap ReshardedState(SnapshotStore& store, const SnapshotStore::Loaded& loaded, Strategy& strategy,
                         DistContext& dist) {
  const StateLayout layout = strategy.DescribeState();
  if (!layout.reshardable)
    throw ConfigError(fmt::format("--snapshot-dir: {} was written by {}, and this strategy cannot read another "
                                  "layout's snapshot; accepted: the same layout", loaded.name, loaded.from));
  return store.Reshard(loaded, strategy.SaveState(), layout, dist);
}

// Where the run stands: fresh, or the snapshot restored into the strategy
// (and this process's RNG, when the layout is the same).
LoopState ResumeOrStart(const RunConfig& config, DistContext& dist, Strategy& strategy, SnapshotStore* store,
                        const std::optional<SnapshotStore::Loaded>& loaded) {
  LoopState state;
  if (loaded) {
    TensorMap tensors;
    for (const auto& [key, value] : loaded->tensors)
      if (key.rfind("rng.", 0) != 0) tensors[key] = value;
    strategy.LoadState(loaded->reshard ? ReshardedState(*store, *loaded, strategy, dist) : tensors);
    LoadRngStates(loaded->tensors);
    state = loaded->loop;
    ++state.restarts;
    const int64_t reached = store->Progress();
    const int64_t lost = std::max<int64_t>(0, reached - state.step);
    state.steps_lost += lost;
    if (dist.is_root())
      LogInfo("resuming from {}: step {}, {:.1f} s trained, {} epoch(s) recorded; {} step(s) past it lost{}",
              loaded->name, state.step, state.elapsed_s, state.history.size(), lost,
              loaded->reshard ? fmt::format("; resharded from {}", loaded->from) : "");
  }
  const std::string world = fmt::format("{}:{}x{}", config.strategy, dist.world, config.batch_size);
  state.worlds += (state.worlds.empty() ? "" : ",") + world;
  if (state.epoch_csv.empty()) state.epoch_csv = EpochCsvPath(config, dist);
  return state;
}

// A resume on another world trains as the interrupted run would have: the
// snapshot's global batch (the per-device batch adjusted) and learning rate.
struct Adopted {
  std::string batch;  // "16->32": the per-device batch changed; "": kept
  std::optional<double> lr;
};
Adopted AdoptSnapshotLayout(const RunConfig& config_in, const StrategyEntry& entry, const DistContext& dist,
                            PreparedRun* run) {
  Adopted adopted;
  const RunConfig& c = run->config;
  if (c.snapshot_dir.empty()) return adopted;
  const SnapshotStore store(c.snapshot_dir, RunIdentity(c, dist.world), c.snapshot_keep);
  const auto layout = store.NewestLayout();
  if (auto lr = layout.find("lr"); lr != layout.end()) adopted.lr = std::stod(lr->second);
  RunConfig adjusted = config_in;
  // --units=auto takes the cut of a snapshot of another layout (its tensors
  // are named by its units; one of this layout gives its own, meta.units).
  std::map<std::string, std::string> ours, theirs;
  for (const auto& [flag, value] : RunIdentity(c, dist.world))
    if (IsLayoutFlag(flag)) ours[flag] = value;
  for (const auto& [flag, value] : layout)
    if (IsLayoutFlag(flag)) theirs[flag] = value;
  const bool same_layout = ours == theirs;
  const std::string cut = c.units == "auto" && !same_layout ? store.NewestCut() : "";
  if (!cut.empty()) adjusted.units = cut;
  auto it = layout.find("global-batch");
  const int64_t global = it == layout.end() ? run->global_batch : std::stoll(it->second), replicas = run->replicas;
  if (global != run->global_batch) {
    if (global % replicas != 0 || (global / replicas) % c.grad_accum != 0)
      throw ConfigError(fmt::format("--snapshot-dir={}: its global batch of {} does not split into {} equal "
                                    "per-device batches of whole --grad-accum={} micro-batches; accepted: a number "
                                    "of replicas that divides it", c.snapshot_dir, global, replicas, c.grad_accum));
    adjusted.batch_size = global / replicas;
    adopted.batch = fmt::format("{}->{}", c.batch_size, adjusted.batch_size);
    if (dist.is_root())
      LogInfo("the snapshot's global batch is {}: per-device batch {} -> {} on {} replica(s)", global, c.batch_size,
              adjusted.batch_size, replicas);
  }
  if (cut.empty() && adopted.batch.empty()) return adopted;
  *run = PrepareRun(adjusted, entry, dist);
  return adopted;
}

// The warm-up once, then `repeat` timed sections of plan.timed steps each.
std::vector<LoopTimes> RunRepeats(Strategy& strategy, BatchSource& train, PhaseTimer& timer, DistContext& dist,
                                  const std::vector<torch::Device>& devices, LoopPlan plan, int64_t repeat) {
  std::vector<LoopTimes> sections;
  for (int64_t r = 0; r < repeat; ++r) {
    sections.push_back(RunSteps(strategy, train, timer, dist, devices, plan));
    plan.warmup = 0;
    plan.profile.clear();  // --profile covers the first repeat
  }
  return sections;
}

// This rank's figures after the loop.
RankFigures MeasureRank(const PreparedRun& run, const std::vector<LoopTimes>& sections, Strategy& strategy) {
  RankFigures f;
  std::vector<double> rank_tput;
  for (const auto& t : sections) {
    f.wall_ms.push_back(t.wall_ms);
    rank_tput.push_back(t.step_ms.empty() ? 0 : run.process_batch * static_cast<double>(t.step_ms.size()) * 1000.0 / t.wall_ms);
  }
  f.throughput = Median(rank_tput);
  const auto& losses = sections.back().losses;
  const size_t tail = std::min<size_t>(10, losses.size());
  for (size_t i = losses.size() - tail; i < losses.size(); ++i) f.final_loss += losses[i] / tail;
  f.peak_rss_mb = PeakRssMb();
  f.optimizer_state_mb = strategy.OptimizerStateMb();
  for (size_t i = 0; i < run.devices.size(); ++i) {
    DeviceMemory m = MeasureDeviceMemory(run.devices[i], static_cast<int>(i));
    f.mem_allocated_mb.push_back(m.peak_allocated_mb);
    f.mem_reserved_mb.push_back(m.peak_reserved_mb);
  }
  return f;
}

// Every rank's figures, in rank order (collective; all ranks get them). All
// ranks drive the same number of devices and timed sections.
std::vector<RankFigures> GatherRanks(const RankFigures& mine, DistContext& dist) {
  std::vector<double> flat = {mine.throughput, mine.final_loss, mine.peak_rss_mb, mine.optimizer_state_mb};
  flat.insert(flat.end(), mine.wall_ms.begin(), mine.wall_ms.end());
  flat.insert(flat.end(), mine.mem_allocated_mb.begin(), mine.mem_allocated_mb.end());
  flat.insert(flat.end(), mine.mem_reserved_mb.begin(), mine.mem_reserved_mb.end());
  const size_t stride = flat.size(), walls = mine.wall_ms.size(), devices = mine.mem_allocated_mb.size();
  const std::vector<double> all = dist.AllGather(flat);
  std::vector<RankFigures> ranks;
  for (int r = 0; r < dist.world; ++r) {
    const double* v = all.data() + r * stride;
    RankFigures f{v[0], {}, v[1], v[2], v[3], {}, {}};
    f.wall_ms.assign(v + 4, v + 4 + walls);
    f.mem_allocated_mb.assign(v + 4 + walls, v + 4 + walls + devices);
    f.mem_reserved_mb.assign(v + 4 + walls + devices, v + 4 + walls + 2 * devices);
    ranks.push_back(std::move(f));
  }
  return ranks;
}

RunResult DescribeRun(const PreparedRun& run, const DistContext& dist, double lr) {
  const RunConfig& c = run.config;
  RunResult r;
  r.config = &run.config;
  r.cuda = c.device == "cuda";
  r.env = DescribeEnvironment(r.cuda);
  r.settings = run.settings;
  r.oversubscribed = run.oversubscribed;
  r.world = dist.world;
  r.nodes = (dist.world + dist.local_world - 1) / dist.local_world;
  r.launcher = dist.launcher;
  r.store_bind = dist.store_bind;
  r.comm_backend = dist.CommBackend();
  r.socket_ifname = dist.socket_ifname;
  r.device_name = r.cuda ? CudaDeviceName(run.devices.front().index()) : r.env.cpu_model;
  r.image_size = run.info.height;
  r.global_batch = run.global_batch;
  r.lr = lr;
  r.model_flops_per_img = 6.0 * ResNetForwardMacs(run.model, run.info.height, run.info.width);  // 3 passes x 2 FLOPs
  r.hardware_flops_per_img = HardwareFlopsPerImage(run.model, run.info.height, run.info.width);
  r.recompute = DescribeRunRecompute(run.model);
  if (r.cuda) r.peak_flops = PeakFlops(r.device_name, c.amp, run.settings.tf32);
  return r;
}

// Rank 0: the row, its scaling figures, the console line, the file.
int Report(const RunResult& result) {
  const RunConfig& config = *result.config;
  Row row = BuildRow(result);
  if (FindStrategy(config.strategy).info.family != Family::kSingle) {
    const std::string baseline = !config.baseline.empty() ? config.baseline : config.out;
    struct stat st {};
    const bool exists = !baseline.empty() && ::stat(baseline.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    if (!(exists && AddScaling(ReadRows(baseline), config.gpus, &row)) && !config.baseline.empty())
      LogWarn("--baseline={}: no matching single-device row; scaling_efficiency left empty", config.baseline);
  }
  LogInfo("{}", SummaryLine(result, row));
  fmt::print(stderr, "{}", SummaryBlock(row));
  if (!config.out.empty()) AppendRowOrSave(config.out, row);
  if (result.parity && result.parity->max_abs_diff > config.verify_tolerance) {
    LogError("--verify: parameters differ from the single-device run by {:.3e} > --verify-tolerance={}",
             result.parity->max_abs_diff, config.verify_tolerance);
    return 3;
  }
  return 0;
}

// Test-set accuracy and loss after training; the source is made now, so its
// prefetching cannot slow the timed steps.
void EvaluateTestSet(const PreparedRun& run, Strategy& strategy, DistContext& dist, RunResult* result) {
  std::unique_ptr<BatchSource> test;
  {
    CpuDeviceScope host(-1);
    test = MakeTestSource(run.spec, dist.data_rank(), dist.data_world());
  }
  const EvalResult tested = Evaluate(strategy, test.get(), dist, run.config.eval_batches);
  result->accuracy = tested.accuracy;
  result->test_loss = tested.loss;
  result->eval_images = tested.images;
}

// The training source's figures over the last timed section; none for
// synthetic data (made on the device, never waited for).
std::optional<DataFigures> DescribeData(const LoopTimes& t, int64_t process_batch) {
  const LoaderStats& s = t.loader;
  if (s.taken == 0) return std::nullopt;
  DataFigures d;
  d.workers = s.workers;
  d.wait_ms = s.wait_s * 1000 / static_cast<double>(s.taken);
  d.bound_frac = t.wall_ms > 0 ? std::min(1.0, s.wait_s * 1000 / t.wall_ms) : 0;
  if (s.busy_s > 0) d.loader_img_s = static_cast<double>(s.images) / s.busy_s * std::max(1, s.workers);
  const double working_s = t.wall_ms / 1000 - s.wait_s;
  if (working_s > 0) d.consumed_img_s = static_cast<double>(s.taken * process_batch) / working_s;
  d.bad_images = s.bad_images;
  double most = 0;
  for (int i = 0; i < kLoadStages && s.images > 0; ++i) {
    d.stage_ms[i] = s.stage_s[i] * 1000 / static_cast<double>(s.images);
    if (d.stage_ms[i] > most) {
      most = d.stage_ms[i];
      d.bound_stage = kLoadStageNames[i];
    }
  }
  return d;
}

// --data-only: where the loader's time goes, one line.
void ReportLoaderStages(const DataFigures& d) {
  if (d.bound_stage.empty()) return;
  double total = 0;
  for (double ms : d.stage_ms) total += ms;
  std::string parts;
  for (int i = 0; i < kLoadStages; ++i)
    parts += fmt::format("{}{} {:.3f} ({:.0f}%)", i ? ", " : "", kLoadStageNames[i], d.stage_ms[i], 100 * d.stage_ms[i] / total);
  LogInfo("loader stages, ms per image on one worker: {}; {} bounds it", parts, d.bound_stage);
}

// One line when the loop waited for data more than a tenth of its time: how
// many decode threads would have kept up.
void ReportDataBound(const DataFigures& d, const RunConfig& config) {
  if (d.bound_frac < 0.1 || d.loader_img_s <= 0 || d.workers < 1) return;
  const double per_worker = d.loader_img_s / d.workers;
  const int needed = static_cast<int>(std::ceil(d.consumed_img_s / per_worker));
  if (needed <= d.workers) return;  // the pool keeps up: the waits were its start or jitter
  LogWarn("data-bound: the loop waited for data {:.0f}% of the time; {} worker(s) sustain {:.0f} img/s, the step "
          "takes {:.0f} img/s: about {} worker(s) would feed it ({}){}", 100 * d.bound_frac, d.workers, d.loader_img_s,
          d.consumed_img_s, needed, config.dataset == "imagefolder" ? "--data-workers" : "--prefetch",
          config.dataset == "imagefolder" ? "" : " (the in-memory datasets build batches on --prefetch threads)");
}

// A step after the timed ones (the expected columns, --export, the memory
// snapshot): a failure leaves its columns empty and says why, and the
// measured row is still written (the run then exits kExitAfterRunFailed).
template <typename F>
void AfterRunStep(const char* what, RunResult* result, F step) {
  try {
    step();
  } catch (const std::exception& e) {
    if (FailedCollective()) throw;  // a rank lost or a collective timed out: main names it (exit 7)
    const std::string why = e.what();
    LogWarn("{} failed after the timed steps: {}; its columns are left empty, the row is written",
            what, why.substr(0, why.find('\n')));
    result->after_run_failures.push_back(what);
  }
}

// The loop's figures into the result: steps, phases, the strategy's
// columns, and every rank's own figures (collective).
void CollectFigures(const PreparedRun& run, const std::vector<LoopTimes>& sections, Strategy& strategy,
                    DistContext& dist, RunResult* result) {
  for (const auto& t : sections) result->step_ms.insert(result->step_ms.end(), t.step_ms.begin(), t.step_ms.end());
  result->timed_steps = static_cast<int64_t>(sections.back().step_ms.size());
  const double counted = std::max<double>(1, static_cast<double>(result->step_ms.size()));  // phase totals span every section
  for (int p = 0; p < kNumPhases; ++p) result->phase_ms[p] = sections.back().phase_ms[p] / counted;
  result->data = DescribeData(sections.back(), run.process_batch);
  result->extras = strategy.Extras();
  result->ranks = GatherRanks(MeasureRank(run, sections, strategy), dist);
  // Who made the others wait: every rank's timed collectives, read on rank 0.
  double step_sum = 0;
  for (double ms : result->step_ms) step_sum += ms;
  result->straggler = GatherStragglers(dist, step_sum / counted);
  if (dist.is_root())
    if (const std::string line = DescribeStraggler(result->straggler); !line.empty()) LogWarn("straggler: {}", line);
  // After the memory figures: the prediction's own measurements allocate.
  AfterRunStep("expected", result, [&] {
    FailPoint("expected");
    for (auto& [k, v] : ExpectThisRun(run.config, run.model, run.devices, dist, result->extras))
      result->extras[k] = v;
  });
}

GoalFigures DescribeGoal(const TrainingGoal& goal, const LoopState& start) {
  const LoopState& s = goal.state();
  GoalFigures g;
  g.stop_reason = goal.stop_reason();
  g.steps_done = s.step;
  g.resumed_from = start.restarts > 0 ? start.step : -1;
  g.restarts = s.restarts;
  g.worlds = s.worlds;
  g.steps_lost = s.steps_lost;
  g.train_time_s = s.elapsed_s;
  g.epochs_completed = static_cast<int64_t>(s.history.size());
  g.steps_per_epoch = goal.steps_per_epoch();
  g.mean_epoch_s = goal.mean_epoch_s();
  g.best_val_loss = goal.best_val_loss();
  g.val_accuracy = s.history.empty() ? -1 : s.history.back().val_accuracy;
  g.time_to_target_s = s.time_to_target_s;
  g.steps_to_target = s.steps_to_target;
  if (!s.history.empty()) g.epoch_csv = s.epoch_csv;  // written at the first epoch's end
  g.snapshot = goal.last_snapshot();
  return g;
}

}  // namespace

// --memory-snapshot: rank 0 writes FILE, rank R > 0 FILE.rankR (its own GPU).
void WriteMemorySnapshot(const RunConfig& config, const DistContext& dist) {
  const std::string path = dist.rank == 0 ? config.memory_snapshot : fmt::format("{}.rank{}", config.memory_snapshot, dist.rank);
  CudaWriteMemorySnapshot(path);
  if (dist.is_root()) LogInfo("memory snapshot: {} (PyTorch's pickle: segments, device_traces)", path);
}

void PreflightCheck(const RunConfig& config, int world) {
  DistContext dist;
  dist.world = dist.local_world = world;
  PrepareRun(config, FindStrategy(config.strategy), dist);
}

int RunBenchmark(const RunConfig& config_in, DistContext& dist) {
  const StrategyEntry& entry = FindStrategy(config_in.strategy);
  PreparedRun run = PrepareRun(config_in, entry, dist);
  const Adopted adopted = AdoptSnapshotLayout(config_in, entry, dist, &run);
  if (run.info.skipped_files > 0 && dist.is_root())  // here, not in PrepareRun: the pre-spawn check runs that too
    LogInfo("{}: {} file(s) that are not .jpg, .jpeg or .png left out", run.config.data_dir, run.info.skipped_files);
  const RunConfig& config = run.config;
  if (!config.snapshot_dir.empty()) ArmStopSignals();  // finish the step, snapshot, exit kExitPreempted
  ConfigureProcess(run, entry, dist);
  CpuDeviceScope main_device(0);
  if (config.recompute == "auto") {
    const int shard_world = entry.info.parallelism() == Parallelism::kDataMultiProcess
                                ? dist.world / std::max(1, ReplicateDegree(config, entry.info))
                                : 1;
    run.model.recompute = ChooseRecompute(config, run.model, run.devices.front(), entry.info, shard_world, dist);
  }

  double lr = config.lr;
  if (config.lr_scaling == "linear") lr *= static_cast<double>(run.replicas);
  if (config.lr_scaling == "sqrt") lr *= std::sqrt(static_cast<double>(run.replicas));
  if (adopted.lr && *adopted.lr != lr) {
    if (dist.is_root()) LogInfo("the snapshot's learning rate {} continues (this world's would be {})", *adopted.lr, lr);
    lr = *adopted.lr;
  }
  PhaseTimer timer(run.devices.front());
  const RunContext ctx{&config, &dist, run.devices, run.model, lr, &timer};

  if (!config.calibrate.empty()) return RunCalibration(config, run.model, run.devices.front(), dist);
  RunResult result = DescribeRun(run, dist, lr);
  if (config.verify) {  // correctness before timing
    LogInfo("verifying {} against single for {} steps", config.strategy, config.verify_steps);
    const ParityResult parity = RunParityCheck(entry, ctx, run.spec);
    result.parity = ParityFigures{parity.max_abs_diff, parity.steps, parity.model};
    if (dist.is_root()) LogInfo("parity: max |param diff| = {:.3e} ({})", parity.max_abs_diff, parity.model);
  }
  std::unique_ptr<SnapshotStore> store;
  if (!config.snapshot_dir.empty()) {
    store = std::make_unique<SnapshotStore>(config.snapshot_dir, RunIdentity(config, dist.world), config.snapshot_keep);
    store->AddLayout("global-batch", std::to_string(run.global_batch));
    store->AddLayout("lr", fmt::format("{}", lr));
  }
  auto snapshot = FindSnapshot(store.get(), dist, &run.config);
  if (!config.memory_snapshot.empty()) CudaRecordMemoryHistory();  // from the model's first allocation
  auto strategy = config.data_only ? MakeDataOnlyStrategy() : entry.make();
  strategy->Setup(ctx);
  const LoopState start = ResumeOrStart(config, dist, *strategy, store.get(), snapshot);
  snapshot.reset();  // restored into the strategy: the loaded copy would sit beside it all run

  std::unique_ptr<BatchSource> train;
  {
    CpuDeviceScope host(-1);  // host-side data is not device memory
    DataSpec spec = run.spec;
    spec.start_batch = start.step;  // a resumed run's next batch
    train = MakeTrainSource(spec, dist.data_rank(), dist.data_world());
  }
  LoopPlan plan = PlanSteps(config, entry.info, run, *train, dist, start.step);
  if (plan.timed < 1) {
    if (dist.is_root())
      LogInfo("the snapshot is at step {}, the run's last: nothing left to train (its row was written when it "
              "finished); remove --snapshot-dir={} to run afresh", start.step, config.snapshot_dir);
    dist.Shutdown();
    return 0;
  }
  std::unique_ptr<TrainingGoal> goal;
  if (config.TrainsToAnswer() || store) {  // validation, budgets, targets, snapshots between steps
    goal = std::make_unique<TrainingGoal>(config, dist, *strategy, run.spec, train->BatchesPerEpoch(),
                                          plan.first_step + plan.warmup + plan.timed, start, store.get());
    plan.after_step = [&goal](int64_t done, LossLog& losses) { return goal->AfterStep(done, losses); };
  }
  if (!config.trace.empty()) trace::Start();  // the timeline covers the steps and evaluation
  const auto sections = RunRepeats(*strategy, *train, timer, dist, run.devices, plan, config.repeat);
  if (goal && goal->preempted()) {
    if (dist.is_root()) LogWarn("preempted after step {}: snapshot {} written; run the same command again to "
                                "continue", goal->state().step, goal->last_snapshot());
    dist.Shutdown();
    return kExitPreempted;
  }
  if (goal) {
    goal->Finish();
    result.goal = DescribeGoal(*goal, start);
    result.goal->batch_adjusted = adopted.batch;
  }
  if (run.info.real && config.eval && !config.data_only) EvaluateTestSet(run, *strategy, dist, &result);
  if (!config.export_file.empty())
    AfterRunStep("--export", &result, [&] { ExportWeights(config.export_file, run.model, *strategy, dist); });
  CollectFigures(run, sections, *strategy, dist, &result);
  if (!config.memory_snapshot.empty())
    AfterRunStep("--memory-snapshot", &result, [&] { WriteMemorySnapshot(config, dist); });
  if (dist.is_root() && result.data && !config.data_only) ReportDataBound(*result.data, config);
  if (dist.is_root() && result.data && config.data_only) ReportLoaderStages(*result.data);
  result.trace_file = trace::Finish(config.trace, dist, config.command);
  if (!sections.empty()) result.profile_file = sections.front().profile;
  dist.Shutdown();
  const int code = dist.is_root() ? Report(result) : 0;
  if (code != 0 || result.after_run_failures.empty()) return code;
  LogError("the row is written; these steps after the run failed (see above): {}",
           fmt::format("{}", fmt::join(result.after_run_failures, ", ")));
  return kExitAfterRunFailed;
}

}  // namespace ddpbench
