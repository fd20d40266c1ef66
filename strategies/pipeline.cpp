#include "strategies/pipeline.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "base/log.h"
#include "harness/memory.h"
#include "harness/phase.h"
#include "harness/trace.h"
#include "harness/training.h"
#include "strategies/device_workers.h"
#include "strategies/pipeline_shape.h"
#include "strategies/rebalance.h"
#include "planning/schedules.h"
#include "strategies/split_backward.h"
#include "strategies/stage_link.h"
#include "strategies/stages.h"

namespace ddpbench {
namespace {

using Clock = std::chrono::steady_clock;

// How much faster the re-balanced split must be predicted to be (rebalance.h).
constexpr double kRebalanceMargin = 0.03;

// --stage-ranks: receives each rank posts ahead of the action that needs
// them, and the tags of evaluation hand-offs and of the step's loss (the
// step's own are below them: ActTag, GradTag).
constexpr int kPostAhead = 2;
constexpr int kEvalTag = 1 << 24;
constexpr int kLossTag = 1 << 25;

// Busy time of one stage: the sum of its operations' durations, waits for
// other stages excluded. CUDA: events on the stage's stream, read once the
// stream is idle; CPU: the wall clock.
class BusyClock {
 public:
  explicit BusyClock(torch::Device device) : device_(device) {}
  void Start() {
    if (device_.is_cuda()) {
      events_.push_back(std::make_unique<CudaEventPair>(device_.index()));
      events_.back()->RecordStart();
    } else {
      start_ = Clock::now();
    }
  }
  void Stop() {
    if (device_.is_cuda()) events_.back()->RecordEnd();
    else cpu_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }
  // Busy milliseconds since the last call (CUDA: waits for the events).
  double Take() {
    double ms = cpu_ms_;
    for (auto& e : events_) ms += e->ElapsedMs();
    cpu_ms_ = 0;
    events_.clear();
    return ms;
  }

 private:
  torch::Device device_;
  Clock::time_point start_;
  double cpu_ms_ = 0;
  std::vector<std::unique_ptr<CudaEventPair>> events_;
};

// One operation of a stage: busy time and the phase figure together.
class StageWork {
 public:
  StageWork(BusyClock& clock, PhaseTimer& timer, Phase phase, torch::Device device)
      : clock_(clock), scope_(timer.Measure(phase, device)) {
    clock_.Start();
  }
  ~StageWork() { clock_.Stop(); }
  StageWork(const StageWork&) = delete;
  StageWork& operator=(const StageWork&) = delete;

 private:
  BusyClock& clock_;
  PhaseTimer::Scope scope_;
};

// The trace's name of device d's thread: its stage, or with interleaving
// (chunks > devices) the model chunks it holds.
std::string StageNames(int d, const PipelineTable& table) {
  if (table.chunks() == table.devices) return fmt::format("stage {}", d);
  std::vector<int> held;
  for (int c = 0; c < table.chunks(); ++c)
    if (table.DeviceOf(c) == d) held.push_back(c);
  return fmt::format("device {} (stages {})", d, fmt::join(held, ","));
}

// Which micro-batch, model chunk and schedule action the open range is.
void TraceMicroBatch(int chunk, int micro_batch, const char* op) {
  if (!trace::Enabled()) return;
  trace::Annotate("micro_batch", micro_batch);
  trace::Annotate("chunk", chunk);
  trace::Annotate("op", op);
}

std::string Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n && d.size() < 12; ++i)
    if (n % i == 0) d.push_back(i);
  return fmt::format("{}{}", fmt::join(d, ", "), d.back() == n ? "" : ", ...");
}

std::string Joined(const std::vector<double>& values, const char* format = "{:.1f}") {
  std::vector<std::string> parts;
  for (double v : values) parts.push_back(fmt::format(fmt::runtime(format), v));
  return fmt::format("{}", fmt::join(parts, "/"));
}

// The checks of --chunks/--schedule/--virtual-stages that need the batch and
// the device count; each a ConfigError naming the value and what is accepted.
void CheckPipelineShape(const RunConfig& c, int devices) {
  if (c.chunks < 1) throw ConfigError(fmt::format("--chunks={}: must be at least 1", c.chunks));
  if (c.batch_size % c.chunks != 0)
    throw ConfigError(fmt::format(
        "--chunks={}: --batch-size={} does not divide into {} equal micro-batches; accepted: a divisor of {} ({})",
        c.chunks, c.batch_size, c.chunks, c.batch_size, Divisors(c.batch_size)));
  CheckMicroBatchImages(c, RunImageSize(c));
  const PipelineSchedule schedule = ParsePipelineSchedule(c.schedule);
  const int least = MinMicroBatches(schedule, devices);
  if (c.chunks < least)
    throw ConfigError(fmt::format(
        "--chunks={}: --schedule={} needs at least {} micro-batches on --gpus={} ({}); accepted: --chunks>={}",
        c.chunks, c.schedule, least, devices,
        schedule == PipelineSchedule::kDualPipeV ? "one per stage of its V" : "one per device", least));
  if (NeedsGroupsOfDevices(schedule) && c.chunks % devices != 0)
    throw ConfigError(fmt::format(
        "--chunks={}: --schedule={} takes micro-batches in groups of --gpus={}; accepted: a multiple of {} "
        "that divides --batch-size={}", c.chunks, c.schedule, devices, devices, c.batch_size));
}

class PipelineStrategy final : public Strategy {
 public:
  explicit PipelineStrategy(bool pipelined) : pipelined_(pipelined) {}
  ~PipelineStrategy() override = default;

  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    dist_ = ctx.dist;
    ranks_ = config_->stage_ranks;  // device d is rank d; this process runs its own
    rank_ = ranks_ ? dist_->rank : 0;
    const int S = ranks_ ? dist_->world : static_cast<int>(ctx.devices.size());
    // Every device's placeholder where another rank runs it.
    const std::vector<torch::Device> table_devices =
        ranks_ ? std::vector<torch::Device>(S, ctx.devices.front()) : ctx.devices;
    if (pipelined_ && config_->chunks > 0) CheckPipelineShape(*config_, S);
    // --units=auto: measured in half blocks, rebuilt in blocks (the same
    // weights from the same seed) unless half blocks win. (--units as a
    // resumed run's snapshot says, which may differ from ctx.model's.)
    const bool units_open = pipelined_ && UnitsOpen(*config_);
    ResNetOptions options = ctx.model;
    options.half_blocks = config_->units == "half-blocks" || units_open;
    model_ = BuildModel(options, config_->seed, ctx.devices.front());
    PipelineShape shape;  // mp: one micro-batch, the stages take turns
    if (pipelined_) {
      shape = ChoosePipelineShape(*config_, model_, S, ranks_ ? 1 : 0);
      if (ranks_) AgreeOnShape(*dist_, &shape);
      if (units_open && !shape.half_blocks) {
        options.half_blocks = false;
        model_ = BuildModel(options, config_->seed, ctx.devices.front());
      }
      LogStagePlan(*config_, model_, shape.plan);
    } else {
      shape.schedule = PipelineSchedule::kGPipe;
      shape.plan = ChooseSplit(*config_, model_, S, 1, config_->batch_size);
      if (ranks_) AgreeOnShape(*dist_, &shape);
    }
    schedule_ = shape.schedule;
    table_ = BuildPipelineTable(shape.schedule, S, shape.virtual_stages, shape.micro_batches);
    plan_ = std::move(shape.plan);
    setup_counts_ = plan_.counts;
    rebalance_ = pipelined_ && RebalanceApplies(*config_, shape.virtual_stages);
    lr_ = ctx.lr;
    // CPU only: a CUDA device's host thread runs ahead of its stream, so an
    // input missing at the host says nothing about the device being idle.
    fill_waits_ = pipelined_ && SplitsBackward(schedule_) && config_->fill_waits == "on";
    for (const torch::Device& device : ctx.devices) fill_waits_ = fill_waits_ && device.is_cpu();
    for (int c = 0; c < table_.chunks(); ++c)
      chunks_.push_back(std::make_unique<Chunk>(table_devices[table_.DeviceOf(c)], shape.micro_batches));
    for (int d = 0; d < S; ++d) {
      devices_.push_back(std::make_unique<Device>(table_devices[d], WorkerOf(d)));
      if (Local(d)) local_.push_back(d);
    }
    const std::vector<torch::Device> mine = ranks_ ? std::vector<torch::Device>{ctx.devices.front()} : ctx.devices;
    workers_ = std::make_unique<DeviceWorkers>(mine, /*own_streams=*/true);
    RunLocal([&](int d) {
      trace::NameThread(StageNames(d, table_), 1 + d);
      devices_[d]->scaler = std::make_unique<LossScaler>(config_->amp, devices_[d]->device);
    });
    if (ranks_ && S > 1) {
      link_ = std::make_unique<RankLink>(*dist_);
      boundaries_ = MeasureBoundaries(model_, RunImageSize(*config_), config_->amp, ctx.devices.front());
    }
    unit_device_.assign(model_->units()->size(), -1);
    PlaceUnits(plan_.counts);
  }

  StepResult Step(const Batch& batch) override {
    const int M = table_.micro_batches;
    const int64_t n = batch.size();
    TORCH_CHECK(n >= M, "pipeline: a batch of ", n, " cannot make ", M, " micro-batches");
    StepState state;
    state.timed = steps_ >= config_->warmup;
    auto images = batch.images.tensor_split(M);
    auto labels = batch.labels.tensor_split(M);
    for (int m = 0; m < M; ++m) {
      state.images.push_back(Send(images[m], /*host=*/true));
      state.labels.push_back(Send(labels[m], /*host=*/true));
      state.rows.push_back(images[m].size(0));
      // Each micro-batch's mean loss weighted by its share of the batch: the
      // sum over micro-batches is the mean over the batch.
      state.weights.push_back(static_cast<double>(labels[m].size(0)) / n);
    }
    for (auto& ch : chunks_) {
      ch->from_prev.Reset();
      ch->from_next.Reset();
      std::fill(ch->w_done.begin(), ch->w_done.end(), 0);
    }

    const int last_device = table_.DeviceOf(table_.chunks() - 1);
    if (link_ && !Local(last_device))  // the step's loss, from the last stage's rank
      link_->Post(last_device, kLossTag, {},
                  torch::TensorOptions().dtype(torch::kDouble).device(dist_->device));
    auto t0 = Clock::now();
    RunLocal([&](int d) {
      try {
        RunDevice(d, state);
      } catch (...) {
        for (auto& ch : chunks_) {  // wake every device waiting on another
          ch->from_prev.Close();
          ch->from_next.Close();
        }
        throw;
      }
    });
    if (link_) ShareLoss(state, last_device);
    if (Mine().scaler->enabled()) {
      // fp16: skip the step on every device if any device's gradients overflowed.
      torch::Tensor found = torch::zeros({1});
      for (int d : local_) found += devices_[d]->found_inf.to(torch::kCPU);
      if (ranks_) found.fill_(dist_->AllReduceSum(found.item<double>()));
      RunLocal([&](int d) {
        Device& dev = *devices_[d];
        {
          StageWork work(dev.clock, *timer_, Phase::kOptimizer, dev.device);
          dev.scaler->StepAndUpdate(*dev.optimizer, found.to(dev.device));
        }
        WaitForCurrentStream(dev.device);
        dev.optimizer_ms += dev.clock.Take();
      });
    }
    if (link_) link_->Flush();
    const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const bool timed = state.timed;
    const int64_t step = steps_++;
    if (timed) {
      ++timed_steps_;
      wall_ms_ += wall;
    }
    std::vector<double> busy_before;
    for (auto& dev : devices_) {
      busy_before.push_back(dev->busy_ms);
      if (timed) dev->busy_ms += dev->optimizer_ms;
      dev->optimizer_ms = 0;
    }
    for (int c = 0; c < table_.chunks(); ++c)
      for (int k = 0; k < 3; ++k) {
        const double ms = chunks_[c]->clock[k].Take();
        if (timed) {
          chunks_[c]->op_ms[k] += ms;
          devices_[table_.DeviceOf(c)]->busy_ms += ms;
        } else if (step > 0) {  // the first step's times include first-touch costs
          chunks_[c]->warmup_ms[k] += ms;
        }
      }
    if (timed)
      for (int d : local_) devices_[d]->step_busy_ms.push_back(devices_[d]->busy_ms - busy_before[d]);
    if (rebalance_ && step + 1 == config_->warmup) Rebalance(step);
    return {state.loss};
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    if (link_) return PredictAcrossRanks(images);
    Handoff h = Send(images, /*host=*/true);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      workers_->Run(table_.DeviceOf(static_cast<int>(c)), [&] {
        Chunk& ch = *chunks_[c];
        torch::NoGradGuard no_grad;
        ch.Train(false);
        torch::Tensor y;
        {
          AutocastGuard amp(config_->amp, ch.device);
          y = ch.Forward(Receive(h, ch.device));
        }
        ch.Train(true);
        h = Send(y);
      });
    }
    return Receive(h, chunks_.back()->device);
  }

  std::vector<torch::Tensor> Parameters() override {
    if (link_) GatherUnitParameters(*dist_, model_, unit_device_);
    return model_->parameters();
  }
  const ResNetOptions* BuiltModel() const override { return &model_->options(); }

  // The whole model by its own names (each tensor on its chunk's device),
  // every device's optimizer state by parameter name, the loss scale (the
  // same on every device: each takes the same skip-or-step decision) and
  // the split as "meta.split" (with its units, "meta.units") and (pmp) the
  // shape as "meta.shape": a resumed run must cut and schedule the model the
  // same way.
  TensorMap SaveState() override {
    TORCH_CHECK(!link_, "--stage-ranks: snapshots are not built for stages on separate ranks");
    TensorMap state;
    SaveModule(state, "model.", *model_);
    for (auto& dev : devices_) SaveOptimizer(state, "optim.", *dev->optimizer, ParameterNames(*dev->optimizer, *model_));
    Mine().scaler->Save(state, "scaler.");
    state["meta.split"] = SplitTensor();
    state["meta.units"] = UnitsTensor();
    if (pipelined_) state["meta.shape"] = ShapeTensor();
    return state;
  }

  void LoadState(const TensorMap& state) override {
    TORCH_CHECK(!link_, "--stage-ranks: snapshots are not built for stages on separate ranks");
    StateReader reader(state);
    reader.TakeEqual("meta.split", SplitTensor(),
                     "units per stage: --balance=time measures the split at every start; pass the saved "
                     "split as --split, with the saved row's units as --units, to cut the model as the saved "
                     "run did");
    if (reader.Has("meta.units"))  // since --units=auto
      reader.TakeEqual("meta.units", UnitsTensor(), "half blocks (1) or whole blocks (0): pass the saved row's units "
                       "as --units");
    if (pipelined_)
      reader.TakeEqual("meta.shape", ShapeTensor(),
                       "micro-batches, chunks per device, schedule: pmp chooses its shape at every start when "
                       "--chunks is not given; pass the saved ones");
    reader.LoadModule("model.", *model_);  // copies on this thread's streams: done before the workers go on
    for (auto& dev : devices_) WaitForCurrentStream(dev->device);
    // Each device's optimizer state is made in its own thread (a CPU logical
    // device is charged for it), one device at a time.
    for (size_t d = 0; d < devices_.size(); ++d)
      workers_->Run(static_cast<int>(d), [&] {
        Device& dev = *devices_[d];
        reader.LoadOptimizer("optim.", *dev.optimizer, ParameterNames(*dev.optimizer, *model_));
        dev.scaler->Load(reader, "scaler.");
        WaitForCurrentStream(dev.device);
      });
    reader.Finish();
  }

  std::map<std::string, std::string> Extras() override {
    if (link_) ShareFigures();
    const int S = table_.devices, V = table_.virtual_stages, M = table_.micro_batches;
    std::map<std::string, std::string> extras;
    extras["split"] = SplitCounts(plan_.counts);
    extras["split_setup"] = SplitCounts(setup_counts_);
    extras["units"] = model_->options().half_blocks ? "half-blocks" : "blocks";
    extras["stage_time_ms"] = Joined(plan_.stage_ms, "{:.2f}");
    extras["chunks"] = std::to_string(M);
    if (pipelined_) {
      extras["schedule"] = PipelineScheduleName(schedule_);
      extras["virtual_stages"] = std::to_string(V);
    }
    const bool split_backward = pipelined_ && SplitsBackward(schedule_);
    if (!split_backward)
      extras["bubble_theory"] = fmt::format("{:.4f}", schedule_ == PipelineSchedule::kLoopedBFS
                                                          ? LoopedBfsTheoreticalBubble(S, V, M)
                                                          : TheoreticalBubble(S, V, M));
    if (timed_steps_ > 0 && wall_ms_ > 0) {
      std::vector<double> busy, act_mb;
      double total = 0;
      for (auto& dev : devices_) {
        busy.push_back(dev->busy_ms / timed_steps_);
        act_mb.push_back(dev->activation_peak_bytes / (1024.0 * 1024.0));
        total += dev->busy_ms;
      }
      extras["bubble_measured"] = fmt::format("{:.4f}", 1.0 - total / (S * wall_ms_));
      extras["stage_busy_ms"] = Joined(busy);
      const std::vector<double> step_balance = StepBalance();
      if (!step_balance.empty()) {
        std::vector<double> sorted = step_balance;
        std::sort(sorted.begin(), sorted.end());
        extras["stage_busy_step_ratio"] = fmt::format("{:.3f}/{:.3f}", sorted[(sorted.size() - 1) / 2], sorted.back());
      }
      extras["activation_peak_mb"] = Joined(act_mb, "{:.2f}");
      const ChunkTimes times = PerMicroBatch(/*warmup=*/false, static_cast<double>(timed_steps_) * M);
      std::vector<std::string> fbw;
      for (size_t c = 0; c < chunks_.size(); ++c)
        fbw.push_back(split_backward ? fmt::format("{:.2f}:{:.2f}:{:.2f}", times.forward[c], times.backward_input[c],
                                                   times.backward_weight[c])
                                     : fmt::format("{:.2f}:{:.2f}", times.forward[c], times.backward_input[c]));
      extras["chunk_fbw_ms"] = fmt::format("{}", fmt::join(fbw, "/"));
      if (fill_waits_) {
        std::vector<double> fill;
        for (auto& dev : devices_) fill.push_back(dev->fill_ms / timed_steps_);
        extras["w_fill_ms"] = Joined(fill, "{:.2f}");
      }
      // The table run on ideal devices with this run's measured times: the
      // bubble its stage times leave without waits or noise. Zero-bubble's
      // ideal idle fraction depends on F, B and W, so this is its theory.
      const std::string simulated = fmt::format("{:.4f}", SimulatePipeline(table_, times).Bubble());
      extras["bubble_simulated"] = simulated;
      if (split_backward) extras["bubble_theory"] = simulated;
    }
    return extras;
  }

  // This process's devices' (--stage-ranks: each rank reports its own).
  double OptimizerStateMb() override {
    double mb = 0;
    for (int d : local_) mb += ddpbench::OptimizerStateMb(*devices_[d]->optimizer);
    return mb;
  }

 private:
  // One model chunk (a contiguous run of units) and its micro-batches' state.
  struct Chunk {
    Chunk(torch::Device d, int micro_batches)
        : device(d), clock{BusyClock(d), BusyClock(d), BusyClock(d)}, inputs(micro_batches),
          outputs(micro_batches), weight_work(micro_batches), w_done(micro_batches, 0) {}
    torch::Device device;
    std::vector<torch::nn::AnyModule> units;
    std::vector<torch::Tensor> params;
    Mailbox<int, Handoff> from_prev;  // activations from the chunk before, by micro-batch
    Mailbox<int, Handoff> from_next;  // input gradients from the chunk after
    BusyClock clock[3];               // forward, backward (or B), W
    double op_ms[3] = {0, 0, 0};      // timed steps' totals of each
    double warmup_ms[3] = {0, 0, 0};  // warm-up steps' after the first (Rebalance)
    std::vector<torch::Tensor> inputs, outputs;                   // per micro-batch, until its backward
    std::vector<std::shared_ptr<WeightGradWork>> weight_work;     // per micro-batch, from B until W
    std::vector<char> w_done;                                     // per micro-batch: this step's W complete

    torch::Tensor Forward(torch::Tensor x) {
      for (auto& u : units) x = u.forward(x);
      return x;
    }
    void Train(bool on) {
      for (auto& u : units) u.ptr()->train(on);
    }
  };

  struct Device {
    Device(torch::Device d, int i) : device(d), index(i), clock(d) {}
    torch::Device device;
    int index;  // logical device number
    std::vector<torch::Tensor> params;  // of all its chunks
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    std::unique_ptr<LossScaler> scaler;
    BusyClock clock;                     // optimizer work
    double optimizer_ms = 0;             // this step's
    double busy_ms = 0;                  // timed steps' total
    double fill_ms = 0;                  // timed steps' W run while an input was missing (busy_ms has it too)
    double activation_peak_bytes = 0;    // timed steps: above the step's starting allocation
    std::vector<double> step_busy_ms;    // each timed step's busy ms
    torch::Tensor found_inf;             // fp16: this step's overflow flag
  };

  struct StepState {
    std::vector<Handoff> images, labels;  // per micro-batch, from the data loader
    std::vector<int64_t> rows;            // per micro-batch: its images
    std::vector<double> weights;          // micro-batch size / batch size
    torch::Tensor loss;                   // on the last chunk: the batch's mean loss
    bool timed = false;                   // past --warmup
  };

  torch::Tensor SplitTensor() const {
    return torch::tensor(std::vector<int64_t>(plan_.counts.begin(), plan_.counts.end()), torch::kLong);
  }
  // [1]: the split counts half blocks; [0]: whole blocks.
  torch::Tensor UnitsTensor() const {
    return torch::tensor({static_cast<int64_t>(model_->options().half_blocks)}, torch::kLong);
  }
  // [micro-batches, chunks per device, schedule] (PipelineSchedule's value).
  torch::Tensor ShapeTensor() const {
    return torch::tensor({static_cast<int64_t>(table_.micro_batches), static_cast<int64_t>(table_.virtual_stages),
                          static_cast<int64_t>(schedule_)}, torch::kLong);
  }


  // Where the devices run: this process runs the devices in local_ (all of
  // them, or with --stage-ranks its rank's), each on worker WorkerOf(d).
  bool Local(int d) const { return !ranks_ || d == rank_; }
  int WorkerOf(int d) const { return ranks_ ? 0 : d; }
  Device& Mine() { return *devices_[local_.front()]; }
  void RunLocal(const std::function<void(int)>& job) {
    workers_->RunAll([&](int i) { job(local_[i]); });
  }

  // --stage-ranks tags of a step's hand-offs: chunk c's input activation of
  // micro-batch m, and the gradient chunk c sends back for that input.
  int ActTag(int c, int m) const { return 2 * (c * table_.micro_batches + m); }
  int GradTag(int c, int m) const { return ActTag(c, m) + 1; }

  // Whether action a's input comes from another rank.
  bool RemoteInput(const PipelineAction& a) const {
    if (!link_ || a.op == PipelineOp::kBackwardWeight) return false;
    if (a.op == PipelineOp::kForward) return a.chunk > 0 && !Local(table_.DeviceOf(a.chunk - 1));
    return a.chunk + 1 < table_.chunks() && !Local(table_.DeviceOf(a.chunk + 1));
  }
  // The tag of a forward's or a backward's input: the activation entering its
  // chunk, or the gradient the chunk after sends back.
  int InputTag(const PipelineAction& a) const {
    return a.op == PipelineOp::kForward ? ActTag(a.chunk, a.micro_batch) : GradTag(a.chunk + 1, a.micro_batch);
  }

  // Posts the receive of what enters chunk c (an activation, or the gradient
  // of chunk c - 1's output when c is the sender of one) for `rows` images,
  // its shape and dtype those MeasureBoundaries found.
  void PostBoundary(int src, int tag, int c, int64_t rows, torch::Device device) {
    int first = 0;
    for (int k = 0; k < c; ++k) first += plan_.counts[k];
    std::vector<int64_t> shape{rows};
    const auto& tail = boundaries_.shape.at(first - 1);
    shape.insert(shape.end(), tail.begin(), tail.end());
    link_->Post(src, tag, shape, torch::TensorOptions().dtype(boundaries_.dtype.at(first - 1)).device(device));
  }

  // Posts the receive of action a's input when another rank sends it.
  bool PostInput(const PipelineAction& a, const StepState& state) {
    if (!RemoteInput(a)) return false;
    const int c = a.chunk, from = a.op == PipelineOp::kForward ? c - 1 : c + 1;
    // The gradient of chunk c's output has the shape of what enters chunk c + 1.
    PostBoundary(table_.DeviceOf(from), InputTag(a), std::max(c, from), state.rows[a.micro_batch],
                 chunks_[c]->device);
    return true;
  }

  torch::Tensor TakeRemote(int tag) {
    torch::Tensor t = link_->Take(tag);
    if (model_->options().channels_last && t.dim() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    return t;
  }

  // The step's loss on every rank: the last stage's rank sends it, the
  // others take the receive Step posted before it began.
  void ShareLoss(StepState& state, int last_device) {
    if (!Local(last_device)) {
      state.loss = link_->Take(kLossTag);
      return;
    }
    const torch::Tensor loss = state.loss.to(dist_->device, torch::kDouble);
    for (int r = 0; r < dist_->world; ++r)
      if (r != rank_) link_->Send(loss, r, kLossTag);
  }

  // --stage-ranks evaluation: each rank runs its chunks on the batch in
  // turn, taking the input from the rank before; the logits are the last
  // stage's rank's, an undefined tensor elsewhere (Evaluate counts them once).
  torch::Tensor PredictAcrossRanks(const torch::Tensor& images) {
    const int64_t n = images.size(0);
    torch::Tensor logits;
    workers_->Run(0, [&] {
      torch::NoGradGuard no_grad;
      torch::Tensor y;  // the chunk before's output, when it ran here
      for (int c = 0; c < table_.chunks(); ++c) {
        const int d = table_.DeviceOf(c);
        if (!Local(d)) {
          y = torch::Tensor();
          continue;
        }
        Chunk& ch = *chunks_[c];
        torch::Tensor x = y;
        if (c == 0) {
          x = images.to(ch.device);
        } else if (!x.defined()) {
          PostBoundary(table_.DeviceOf(c - 1), kEvalTag + c, c, n, ch.device);
          x = TakeRemote(kEvalTag + c);
        }
        ch.Train(false);
        {
          AutocastGuard amp(config_->amp, ch.device);
          y = ch.Forward(x);
        }
        ch.Train(true);
        if (c + 1 == table_.chunks()) logits = y;
        else if (!Local(table_.DeviceOf(c + 1))) link_->Send(y, table_.DeviceOf(c + 1), kEvalTag + c + 1);
      }
      link_->Flush();
    });
    return logits;
  }

  // --stage-ranks: every device's and chunk's figures onto every rank (each
  // rank measured its own; the others' are zero here), the wall time the
  // slowest rank's. Collective, once.
  void ShareFigures() {
    if (figures_shared_) return;
    figures_shared_ = true;
    const size_t steps = Mine().step_busy_ms.size();
    std::vector<double> mine;
    for (auto& dev : devices_) {
      dev->step_busy_ms.resize(steps, 0.0);
      mine.insert(mine.end(), {dev->busy_ms, dev->activation_peak_bytes, dev->fill_ms});
      mine.insert(mine.end(), dev->step_busy_ms.begin(), dev->step_busy_ms.end());
    }
    for (auto& ch : chunks_) mine.insert(mine.end(), ch->op_ms, ch->op_ms + 3);
    mine.push_back(wall_ms_);
    const std::vector<double> all = dist_->AllGather(mine);
    const size_t n = mine.size();
    std::vector<double> sum(n, 0.0);
    for (size_t r = 0; (r + 1) * n <= all.size(); ++r)
      for (size_t i = 0; i < n; ++i)
        sum[i] = i + 1 == n ? std::max(sum[i], all[r * n + i]) : sum[i] + all[r * n + i];
    auto v = sum.begin();
    for (auto& dev : devices_) {
      dev->busy_ms = *v++, dev->activation_peak_bytes = *v++, dev->fill_ms = *v++;
      dev->step_busy_ms.assign(v, v + steps);
      v += steps;
    }
    for (auto& ch : chunks_)
      for (int k = 0; k < 3; ++k) ch->op_ms[k] = *v++;
    wall_ms_ = *v;
  }

  // Each chunk's mean F, B (or its whole backward) and W ms per micro-batch:
  // the timed steps' totals (op_ms) or the warm-up's (warmup_ms) over
  // `micro_batches`.
  ChunkTimes PerMicroBatch(bool warmup, double micro_batches) const {
    ChunkTimes times;
    for (const auto& ch : chunks_) {
      const double* ms = warmup ? ch->warmup_ms : ch->op_ms;
      times.forward.push_back(ms[0] / micro_batches);
      times.backward_input.push_back(ms[1] / micro_batches);
      times.backward_weight.push_back(ms[2] / micro_batches);
    }
    return times;
  }

  // Each timed step's balance: the busiest device's busy ms in that step
  // over the least busy's (stage_busy_step_ratio). Against stage_busy_ms's
  // whole-run ratio it tells a split's imbalance (every step alike) from
  // devices whose relative speed drifts during the run.
  std::vector<double> StepBalance() const {
    std::vector<double> ratios;
    if (devices_.size() < 2) return ratios;
    for (size_t i = 0; i < devices_.front()->step_busy_ms.size(); ++i) {
      double most = 0, least = std::numeric_limits<double>::infinity();
      for (const auto& dev : devices_) {
        most = std::max(most, dev->step_busy_ms.at(i));
        least = std::min(least, dev->step_busy_ms.at(i));
      }
      if (least > 0) ratios.push_back(most / least);
    }
    return ratios;
  }

  // Hands chunk c the next counts[c] units and moves the weights of each unit
  // whose device changes to its new device (a CPU logical device: a copy made
  // in that device's thread, so that it is charged for it and the old one is
  // not), then gives each device an optimizer over its chunks' parameters.
  // At set-up and when Rebalance changes the split.
  void PlaceUnits(const std::vector<int>& counts) {
    auto unit = model_->units()->begin();
    std::vector<int> chunk_of;
    for (int c = 0; c < table_.chunks(); ++c) {
      chunks_[c]->units.clear();
      for (int i = 0; i < counts[c]; ++i, ++unit) {
        chunks_[c]->units.push_back(*unit);
        chunk_of.push_back(c);
      }
    }
    RunLocal([&](int d) {
      Device& dev = *devices_[d];
      torch::NoGradGuard no_grad;
      dev.params.clear();
      for (size_t u = 0; u < chunk_of.size(); ++u) {
        if (table_.DeviceOf(chunk_of[u]) != d || unit_device_[u] == d) continue;
        auto& module = *model_->units()->ptr(u);
        if (dev.device.is_cpu()) {
          for (auto& p : module.parameters()) p.set_data(p.data().clone());
          for (auto& b : module.buffers()) b.set_data(b.data().clone());
        } else {
          module.to(dev.device);
        }
        unit_device_[u] = d;
      }
      for (int c = 0; c < table_.chunks(); ++c) {
        if (table_.DeviceOf(c) != d) continue;
        Chunk& ch = *chunks_[c];
        ch.params.clear();
        for (auto& u : ch.units)
          for (auto& p : u.ptr()->parameters()) ch.params.push_back(p);
        dev.params.insert(dev.params.end(), ch.params.begin(), ch.params.end());
      }
      dev.optimizer = MakeOptimizer(*config_, dev.params, lr_);
      WaitForCurrentStream(dev.device);
    });
    if (ranks_) MoveOthersToHost(chunk_of);
  }

  // --stage-ranks: the units other ranks run stay here only as host copies
  // (of the seed's weights; GatherUnitParameters refreshes them), charged to no
  // device.
  void MoveOthersToHost(const std::vector<int>& chunk_of) {
    CpuDeviceScope host(-1);
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < chunk_of.size(); ++u) {
      const int d = table_.DeviceOf(chunk_of[u]);
      if (Local(d) || unit_device_[u] == d) continue;
      auto& module = *model_->units()->ptr(u);
      for (auto& p : module.parameters()) p.set_data(p.data().to(torch::kCPU).clone());
      for (auto& b : module.buffers()) b.set_data(b.data().to(torch::kCPU).clone());
      unit_device_[u] = d;
    }
  }

  // After the last warm-up step (`step`): the split searched again with the
  // warm-up's chunk times (rebalance.h), and the units moved, their
  // optimizer state with them, when it changes. The maths is unchanged.
  void Rebalance(int64_t step) {
    // Warm-up steps 1..step, M micro-batches each.
    const ChunkTimes in_run = PerMicroBatch(/*warmup=*/true, static_cast<double>(step) * table_.micro_batches);
    RebalancePlan r = RebalanceSplit(table_, plan_, in_run, kRebalanceMargin);
    if (const char* forced = std::getenv("DDPBENCH_TEST_REBALANCE_SPLIT")) {  // tests: a move on demand
      r.counts = ParseSplit(forced, table_.chunks(), model_->unit_names());
      r.changed = true;
    }
    std::vector<double> measured;
    for (size_t c = 0; c < in_run.forward.size(); ++c)
      measured.push_back(in_run.forward[c] + in_run.backward_input[c] + in_run.backward_weight[c]);
    LogInfo("pmp rebalance: warm-up chunk ms {} against set-up {}; split {} predicted {:.1f} ms, {} {:.1f} ms: {}",
            Joined(measured, "{:.2f}"), Joined(plan_.stage_ms, "{:.2f}"), SplitCounts(plan_.counts), r.current_ms,
            SplitCounts(r.counts), r.best_ms, r.changed ? "moving units" : "kept");
    if (!r.changed) return;
    TensorMap state;
    for (auto& dev : devices_)
      SaveOptimizer(state, "optim.", *dev->optimizer, ParameterNames(*dev->optimizer, *model_));
    PlaceUnits(r.counts);
    StateReader reader(state);
    for (size_t d = 0; d < devices_.size(); ++d)
      workers_->Run(static_cast<int>(d), [&] {
        Device& dev = *devices_[d];
        reader.LoadOptimizer("optim.", *dev.optimizer, ParameterNames(*dev.optimizer, *model_));
        WaitForCurrentStream(dev.device);
      });
    reader.Finish();
    plan_.counts = r.counts;
    plan_.stage_ms = StageTimes(r.counts, plan_.unit_ms);
  }

  // Device d's part of one step, in its worker thread: its row of the
  // schedule table, then its optimizer step (fp16: the unscale; the step
  // follows once every device's overflow flag is known).
  void RunDevice(int d, StepState& state) {
    Device& dev = *devices_[d];
    dev.optimizer->zero_grad(/*set_to_none=*/false);  // gradients stay allocated: not activations
    const int64_t base = AllocatedBytesNow(dev.device, dev.index);
    const std::vector<PipelineAction>& row = table_.actions[d];
    size_t ahead = 0;  // --stage-ranks: row[0, ahead)'s receives are posted
    int posted = 0;    // of which not yet taken
    for (size_t i = 0; i < row.size(); ++i) {
      const PipelineAction& a = row[i];
      for (; link_ && ahead < row.size() && (ahead <= i || posted < kPostAhead); ++ahead)
        if (PostInput(row[ahead], state)) ++posted;
      if (fill_waits_) FillWhileWaiting(dev, row, i, state.timed);
      if (a.op == PipelineOp::kForward) RunForward(a.chunk, a.micro_batch, state);
      else if (a.op == PipelineOp::kBackwardWeight) RunWeightGrad(a.chunk, a.micro_batch);
      else RunBackward(a.chunk, a.micro_batch, a.op == PipelineOp::kBackwardInput);
      if (RemoteInput(a)) --posted;
      const double held = static_cast<double>(AllocatedBytesNow(dev.device, dev.index) - base);
      if (state.timed) dev.activation_peak_bytes = std::max(dev.activation_peak_bytes, held);
    }
    {
      StageWork work(dev.clock, *timer_, Phase::kOptimizer, dev.device);
      if (dev.scaler->enabled()) dev.found_inf = dev.scaler->Unscale(dev.params);
      else dev.optimizer->step();
    }
    WaitForCurrentStream(dev.device);
    dev.optimizer_ms = dev.clock.Take();
  }

  void RunForward(int c, int m, StepState& state) {
    Chunk& ch = *chunks_[c];
    const bool first = c == 0, last = c + 1 == table_.chunks();
    const PipelineAction action{PipelineOp::kForward, m, c};
    const bool remote = RemoteInput(action);
    torch::Tensor received = remote ? TakeRemote(InputTag(action)) : torch::Tensor();
    Handoff in = first ? state.images[m] : remote ? Handoff{} : ch.from_prev.Pop(m);
    StageWork work(ch.clock[0], *timer_, Phase::kForward, ch.device);
    TraceMicroBatch(c, m, "F");
    torch::Tensor x = remote ? received : Receive(in, ch.device);
    if (!first) x.requires_grad_();
    AutocastGuard amp(config_->amp, ch.device);
    torch::Tensor y = ch.Forward(x);
    if (last) {
      y = ClassificationLoss(y, Receive(state.labels[m], ch.device)) * state.weights[m];
      state.loss = state.loss.defined() ? state.loss + y.detach() : y.detach();
    } else if (Local(table_.DeviceOf(c + 1))) {
      chunks_[c + 1]->from_prev.Push(m, Send(y.detach()));
    } else {
      link_->Send(y.detach(), table_.DeviceOf(c + 1), ActTag(c + 1, m));
    }
    ch.inputs[m] = x;
    ch.outputs[m] = y;
  }

  // The whole backward of micro-batch m on chunk c, or (`input_only`) its B.
  void RunBackward(int c, int m, bool input_only) {
    Chunk& ch = *chunks_[c];
    const bool first = c == 0, last = c + 1 == table_.chunks();
    const PipelineAction action{PipelineOp::kBackward, m, c};
    const bool remote = RemoteInput(action);
    torch::Tensor received = remote ? TakeRemote(InputTag(action)) : torch::Tensor();
    Handoff grad = last || remote ? Handoff{} : ch.from_next.Pop(m);
    StageWork work(ch.clock[1], *timer_, Phase::kBackward, ch.device);
    TraceMicroBatch(c, m, input_only ? "B" : "backward");
    Device& dev = *devices_[table_.DeviceOf(c)];
    torch::Tensor out = last ? dev.scaler->Scale(ch.outputs[m]) : ch.outputs[m];
    torch::Tensor g = last ? torch::Tensor() : remote ? received : Receive(grad, ch.device);
    torch::Tensor input_grad;
    if (input_only) {
      auto result = BackwardInput(out, g, ch.inputs[m], ch.params);
      input_grad = result.input_grad;
      ch.weight_work[m] = std::move(result.weight);
    } else {
      out.backward(g);
      if (!first) input_grad = ch.inputs[m].grad();
    }
    if (!first && Local(table_.DeviceOf(c - 1))) chunks_[c - 1]->from_next.Push(m, Send(input_grad));
    else if (!first) link_->Send(input_grad, table_.DeviceOf(c - 1), GradTag(c, m));
    ch.inputs[m] = ch.outputs[m] = torch::Tensor();  // the graph stays with W's work, if any
  }

  // W of micro-batch m on chunk c, or what FillWhileWaiting left of it.
  void RunWeightGrad(int c, int m) {
    Chunk& ch = *chunks_[c];
    if (ch.w_done[m]) return;
    StageWork work(ch.clock[2], *timer_, Phase::kBackward, ch.device);
    TraceMicroBatch(c, m, "W");
    BackwardWeight(*ch.weight_work[m]);
    ch.weight_work[m].reset();
    ch.w_done[m] = 1;
  }

  // Whether action a can start without waiting for another device.
  bool InputArrived(const PipelineAction& a) {
    Chunk& ch = *chunks_[a.chunk];
    if (RemoteInput(a)) return link_->Arrived(InputTag(a));
    if (a.op == PipelineOp::kForward) return a.chunk == 0 || ch.from_prev.Has(a.micro_batch);
    if (a.op == PipelineOp::kBackwardWeight) return true;
    return a.chunk + 1 == table_.chunks() || ch.from_next.Has(a.micro_batch);
  }

  // --fill-waits: while row[i]'s input has not arrived, the first W still to
  // do in the rest of the row runs, one weight node at a time, if its B has
  // run (a later W never overtakes it, so each parameter's .grad sums the
  // micro-batches in the table's order, bit for bit the same as without
  // filling). Running a W early only frees its activations sooner.
  void FillWhileWaiting(Device& dev, const std::vector<PipelineAction>& row, size_t i, bool timed) {
    while (!InputArrived(row[i])) {
      const PipelineAction* next = nullptr;
      for (size_t j = i + 1; j < row.size() && next == nullptr; ++j)
        if (row[j].op == PipelineOp::kBackwardWeight && !chunks_[row[j].chunk]->w_done[row[j].micro_batch])
          next = &row[j];
      if (next == nullptr) return;
      Chunk& ch = *chunks_[next->chunk];
      const int m = next->micro_batch;
      if (!ch.weight_work[m]) return;  // its B has not run yet
      const auto t0 = Clock::now();
      {
        StageWork work(ch.clock[2], *timer_, Phase::kBackward, ch.device);
        TraceMicroBatch(next->chunk, m, "W");
        if (trace::Enabled()) trace::Annotate("fill", 1);  // a piece of W; "done": the piece that ends it
        if (BackwardWeightStep(*ch.weight_work[m])) {
          ch.weight_work[m].reset();
          ch.w_done[m] = 1;
          if (trace::Enabled()) trace::Annotate("done", 1);
        }
      }
      if (timed) dev.fill_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
  }

  bool pipelined_;
  PipelineSchedule schedule_ = PipelineSchedule::kGPipe;  // the table run (mp: one micro-batch of GPipe)
  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  PipelineTable table_;
  ResNet model_{nullptr};
  StagePlan plan_;
  std::vector<int> setup_counts_;  // the split chosen at set-up (the row's split_setup)
  std::vector<int> unit_device_;   // the device holding each unit's weights (-1: not placed yet)
  bool rebalance_ = false;         // RebalanceApplies: Rebalance after the warm-up
  bool fill_waits_ = false;        // --fill-waits=on applies (FillWhileWaiting)
  double lr_ = 0;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::unique_ptr<DeviceWorkers> workers_;
  // Timed steps only (the first --warmup steps are excluded).
  int64_t steps_ = 0, timed_steps_ = 0;
  double wall_ms_ = 0;
  // --stage-ranks
  DistContext* dist_ = nullptr;
  bool ranks_ = false;             // one rank per device: device d is rank d
  int rank_ = 0;
  std::vector<int> local_;         // the devices this process runs, by worker
  std::unique_ptr<RankLink> link_;  // world > 1 with --stage-ranks
  Boundaries boundaries_;          // what each unit hands on, for one image
  bool figures_shared_ = false;    // ShareFigures ran
};

}  // namespace

std::unique_ptr<Strategy> MakePipelineStrategy(bool pipelined) {
  return std::make_unique<PipelineStrategy>(pipelined);
}

}  // namespace ddpbench
