// mp and pmp: the pipeline strategy, which sets the engine up (the shape,
// the chunks, the devices, the transport) and runs its steps through the
// schedule walk (walk.h); evaluation, snapshots and the row's figures.
#include "strategies/pipeline/pipeline.h"

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/state_map.h"
#include "harness/trace.h"
#include "harness/training.h"
#include "strategies/pipeline/engine.h"
#include "strategies/pipeline/figures.h"
#include "strategies/pipeline/overlap_step.h"
#include "strategies/pipeline/pipeline_shape.h"
#include "strategies/pipeline/shape_trials.h"
#include "strategies/pipeline/placement.h"
#include "strategies/pipeline/stage_link.h"
#include "strategies/pipeline/transport.h"
#include "strategies/pipeline/walk.h"

namespace ddpbench {
namespace {

using pipeline::Clock;
using pipeline::Device;
using pipeline::StageWork;
using pipeline::StepState;

// The trace's name of device d's thread: its stage, or with interleaving
// (chunks > devices) the model chunks it holds.
std::string StageNames(int d, const PipelineTable& table) {
  if (table.chunks() == table.devices) return fmt::format("stage {}", d);
  std::vector<int> held;
  for (int c = 0; c < table.chunks(); ++c)
    if (table.DeviceOf(c) == d) held.push_back(c);
  return fmt::format("device {} (stages {})", d, fmt::join(held, ","));
}

std::string Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n && d.size() < 12; ++i)
    if (n % i == 0) d.push_back(i);
  return fmt::format("{}{}", fmt::join(d, ", "), d.back() == n ? "" : ", ...");
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
  PipelineStrategy(bool pipelined, const PipelineShape* forced) {
    e_.pipelined = pipelined;
    if (forced) forced_ = *forced;
  }
  ~PipelineStrategy() override = default;

  void Setup(const RunContext& ctx) override {
    e_.config = ctx.config;
    e_.timer = ctx.timer;
    e_.dist = ctx.dist;
    // Device d is rank d of the pipeline's group (the world, or with
    // --replicate-degree this rank's group of the mesh); this process runs its own.
    e_.ranks = e_.config->stage_ranks;
    e_.rank = e_.ranks ? e_.dist->group_rank() : 0;
    e_.lr = ctx.lr;
    const int S = e_.ranks ? e_.dist->group_world() : static_cast<int>(ctx.devices.size());
    ChooseShape(ctx, S);
    // CPU only: a CUDA device's host thread runs ahead of its stream, so an
    // input missing at the host says nothing about the device being idle.
    e_.fill_waits = e_.pipelined && SplitsBackward(e_.schedule) && e_.config->fill_waits == "on";
    for (const torch::Device& device : ctx.devices) e_.fill_waits = e_.fill_waits && device.is_cpu();
    // Every device's placeholder where another rank runs it.
    const std::vector<torch::Device> table_devices =
        e_.ranks ? std::vector<torch::Device>(S, ctx.devices.front()) : ctx.devices;
    for (int c = 0; c < e_.table.chunks(); ++c)
      e_.chunks.push_back(std::make_unique<pipeline::Chunk>(table_devices[e_.table.DeviceOf(c)],
                                                            e_.table.micro_batches));
    for (int d = 0; d < S; ++d) {
      e_.devices.push_back(std::make_unique<Device>(table_devices[d], e_.WorkerOf(d)));
      if (e_.Local(d)) e_.local.push_back(d);
    }
    const std::vector<torch::Device> mine = e_.ranks ? std::vector<torch::Device>{ctx.devices.front()} : ctx.devices;
    e_.workers = std::make_unique<DeviceWorkers>(mine, /*own_streams=*/true);
    e_.RunLocal([&](int d) {
      trace::NameThread(StageNames(d, e_.table), 1 + d);
      e_.devices[d]->scaler = std::make_unique<LossScaler>(e_.config->amp, e_.devices[d]->device);
    });
    transport_ = pipeline::MakeTransport(e_);
    e_.unit_device.assign(e_.model->units()->size(), -1);
    pipeline::PlaceUnits(e_, e_.plan.counts);
    if (e_.config->overlap_optimizer) e_.overlap = std::make_unique<pipeline::OptimizerOverlap>(e_);
  }

  StepResult Step(const Batch& batch) override {
    StepState state = CutBatch(batch);
    for (auto& ch : e_.chunks) {
      ch->from_prev.Reset();
      ch->from_next.Reset();
      std::fill(ch->w_done.begin(), ch->w_done.end(), 0);
    }
    transport_->BeginStep();
    if (e_.overlap) e_.overlap->StartStep();
    auto t0 = Clock::now();
    e_.RunLocal([&](int d) {
      try {
        pipeline::RunDevice(e_, *transport_, d, state);
      } catch (...) {
        if (e_.overlap) e_.overlap->Abort();
        for (auto& ch : e_.chunks) {  // wake every device waiting on another
          ch->from_prev.Close();
          ch->from_next.Close();
        }
        throw;
      }
    });
    transport_->ShareLoss(state);
    if (e_.Mine().scaler->enabled()) StepScaled();
    transport_->EndStep();
    const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const int64_t step = e_.steps++;
    CountStep(step, state.timed, wall);
    if (e_.rebalance && step + 1 == e_.config->warmup) pipeline::Rebalance(e_, step);
    return {state.loss};
  }

  torch::Tensor Predict(const torch::Tensor& images) override { return transport_->Predict(images); }

  std::vector<torch::Tensor> Parameters() override {
    transport_->GatherParameters();
    return e_.model->parameters();
  }
  const ResNetOptions* BuiltModel() const override { return &e_.model->options(); }

  // The model by its own names (each tensor on its chunk's device; across
  // --stage-ranks the units this rank runs), each device's optimizer state
  // by parameter name, the loss scale (the same on every device: each takes
  // the same skip-or-step decision) and the split as "meta.split" (with its
  // units, "meta.units") and (pmp) the shape as "meta.shape": a resumed run
  // must cut and schedule the model the same way. Across ranks also the
  // rank's place: its stage, the stages and the replicas.
  TensorMap SaveState() override {
    TensorMap state;
    SaveModel(state);
    for (int d : e_.local)
      SaveOptimizer(state, "optim.", *e_.devices[d]->optimizer, ParameterNames(*e_.devices[d]->optimizer, *e_.model));
    e_.Mine().scaler->Save(state, "scaler.");
    state["meta.split"] = SplitTensor();
    state["meta.units"] = UnitsTensor();
    if (e_.pipelined) state["meta.shape"] = ShapeTensor();
    if (transport_->AcrossRanks()) state["meta.place"] = PlaceTensor();
    return state;
  }

  void LoadState(const TensorMap& state) override;
  TensorMap ModelBuffers() override {
    if (!transport_->AcrossRanks()) return SaveState();
    transport_->GatherBuffers();  // the parameters came whole through Parameters()
    TensorMap state;
    for (const auto& b : e_.model->named_buffers()) state["model." + b.key()] = b.value();
    return state;
  }
  // In one process the model's tensors are stored whole under their own
  // names (the default); across ranks each rank holds its stages' units
  // whole (their parameters with their optimizer fields, their buffers), in
  // every replica of the pipeline.
  StateLayout DescribeState() override {
    StateLayout l;
    if (!transport_->AcrossRanks()) return l;
    std::vector<std::map<std::string, int64_t>> unit_tensors;
    for (const auto& unit : e_.model->units()->named_children()) {
      auto& tensors = unit_tensors.emplace_back();
      const std::string prefix = "units." + unit.key() + ".";
      auto add = [&](const std::string& name, const torch::Tensor& t) {
        tensors[prefix + name] = t.numel();
        l.shapes[prefix + name] = t.sizes().vec();
        l.dtypes[prefix + name] = t.scalar_type();
      };
      for (const auto& p : unit.value()->named_parameters()) {
        add(p.key(), p.value());
        l.optim_name["model." + prefix + p.key()] = prefix + p.key();
      }
      for (const auto& b : unit.value()->named_buffers()) add(b.key(), b.value());
    }
    l.params = StagePieces(unit_tensors, e_.unit_device, e_.table.devices, e_.dist->mesh.replicas, "model.");
    return l;
  }

  // The model's tensors: all of them in one process, this rank's units across ranks.
  void SaveModel(TensorMap& state) {
    if (!transport_->AcrossRanks()) return SaveModule(state, "model.", *e_.model);
    for (const auto& [name, unit] : LocalUnits()) SaveModule(state, "model.units." + name + ".", *unit);
  }
  void LoadModel(StateReader& reader) {
    if (!transport_->AcrossRanks()) return reader.LoadModule("model.", *e_.model);
    for (const auto& [name, unit] : LocalUnits()) reader.LoadModule("model.units." + name + ".", *unit);
  }
  // The units this process runs, by their names in the model.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> LocalUnits() {
    std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> local;
    const auto named = e_.model->units()->named_children();
    for (size_t u = 0; u < named.size(); ++u)
      if (e_.Local(e_.unit_device.at(u))) local.emplace_back(named[u].key(), named[u].value());
    return local;
  }

  std::map<std::string, std::string> Extras() override {
    transport_->ShareFigures();
    auto extras = pipeline::PipelineExtras(e_);
    if (e_.ranks && e_.dist->mesh.replicas > 1)
      extras["mesh"] = e_.dist->mesh.Describe(/*pipeline=*/true);
    return extras;
  }

  // This process's devices' (--stage-ranks: each rank reports its own).
  double OptimizerStateMb() override {
    double mb = 0;
    for (int d : e_.local) mb += ddpbench::OptimizerStateMb(*e_.devices[d]->optimizer);
    return mb;
  }

 private:
  // The model built, its split and (pmp) its schedule and micro-batches
  // chosen; the table they make. --units=auto: measured in half blocks,
  // rebuilt in blocks (the same weights from the same seed) unless half
  // blocks win. (--units as a resumed run's snapshot says, which may differ
  // from ctx.model's.)
  void ChooseShape(const RunContext& ctx, int S) {
    const RunConfig& config = *e_.config;
    if (e_.pipelined && config.chunks > 0) CheckPipelineShape(config, S);
    const bool units_open = e_.pipelined && UnitsOpen(config);
    ResNetOptions options = ctx.model;
    options.half_blocks = forced_ ? forced_->half_blocks : config.units == "half-blocks" || units_open;
    e_.model = BuildModel(options, config.seed, ctx.devices.front());
    PipelineShape shape;  // mp: one micro-batch, the stages take turns
    if (forced_) {
      shape = *forced_;
    } else if (e_.pipelined) {
      const ShapeChoice choice = CostPipelineShapes(config, e_.model, S, e_.ranks ? 1 : 0);
      // Across ranks every rank would have to run every trial: not built.
      shape = e_.ranks ? FinishShape(config, e_.model, choice, choice.chosen) : PickByTrials(ctx, e_.model, choice);
      if (e_.ranks) AgreeOnShape(*e_.dist, &shape);
      if (units_open && !shape.half_blocks) {
        options.half_blocks = false;
        e_.model = BuildModel(options, config.seed, ctx.devices.front());
      }
      LogStagePlan(config, e_.model, shape.plan);
    } else {
      shape.schedule = PipelineSchedule::kGPipe;
      shape.plan = ChooseSplit(config, e_.model, S, 1, config.batch_size);
      if (e_.ranks) AgreeOnShape(*e_.dist, &shape);
    }
    e_.schedule = shape.schedule;
    e_.table = BuildPipelineTable(shape.schedule, S, shape.virtual_stages, shape.micro_batches);
    e_.plan = std::move(shape.plan);
    e_.setup_counts = e_.plan.counts;
    e_.rebalance = e_.pipelined && RebalanceApplies(config, shape.virtual_stages);
  }

  // The batch as the table's micro-batches, handed to the first and last chunks.
  StepState CutBatch(const Batch& batch) const {
    const int M = e_.table.micro_batches;
    const int64_t n = batch.size();
    TORCH_CHECK(n >= M, "pipeline: a batch of ", n, " cannot make ", M, " micro-batches");
    StepState state;
    state.timed = e_.steps >= e_.config->warmup;
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
    return state;
  }

  // fp16: the step skipped on every device if any device's gradients overflowed.
  void StepScaled() {
    torch::Tensor found = torch::zeros({1});
    for (int d : e_.local) found += e_.devices[d]->found_inf.to(torch::kCPU);
    if (e_.ranks) found.fill_(e_.dist->AllReduceSum(found.item<double>()));
    e_.RunLocal([&](int d) {
      Device& dev = *e_.devices[d];
      {
        StageWork work(dev.clock, *e_.timer, Phase::kOptimizer, dev.device);
        dev.scaler->StepAndUpdate(*dev.optimizer, found.to(dev.device));
      }
      WaitForCurrentStream(dev.device);
      dev.optimizer_ms += dev.clock.Take();
    });
  }

  // The step's busy times onto the devices' and chunks' totals: the timed
  // steps' figures, or (after the first) the warm-up's, which Rebalance reads.
  void CountStep(int64_t step, bool timed, double wall) {
    if (timed) {
      ++e_.timed_steps;
      e_.wall_ms += wall;
    }
    std::vector<double> busy_before;
    for (auto& dev : e_.devices) {
      busy_before.push_back(dev->busy_ms);
      if (timed) dev->busy_ms += dev->optimizer_ms;
      dev->optimizer_ms = 0;
    }
    for (int c = 0; c < e_.table.chunks(); ++c)
      for (int k = 0; k < 3; ++k) {
        const double ms = e_.chunks[c]->clock[k].Take();
        if (timed) {
          e_.chunks[c]->op_ms[k] += ms;
          e_.devices[e_.table.DeviceOf(c)]->busy_ms += ms;
        } else if (step > 0) {  // the first step's times include first-touch costs
          e_.chunks[c]->warmup_ms[k] += ms;
        }
      }
    if (timed)
      for (int d : e_.local) e_.devices[d]->step_busy_ms.push_back(e_.devices[d]->busy_ms - busy_before[d]);
  }

  torch::Tensor SplitTensor() const {
    return torch::tensor(std::vector<int64_t>(e_.plan.counts.begin(), e_.plan.counts.end()), torch::kLong);
  }
  // [1]: the split counts half blocks; [0]: whole blocks.
  torch::Tensor UnitsTensor() const {
    return torch::tensor({static_cast<int64_t>(e_.model->options().half_blocks)}, torch::kLong);
  }
  // Across ranks: [this rank's stage, stages, replicas].
  torch::Tensor PlaceTensor() const {
    return torch::tensor({static_cast<int64_t>(e_.rank), static_cast<int64_t>(e_.table.devices),
                          static_cast<int64_t>(e_.dist->mesh.replicas)}, torch::kLong);
  }
  // [micro-batches, chunks per device, schedule] (PipelineSchedule's value).
  torch::Tensor ShapeTensor() const {
    return torch::tensor({static_cast<int64_t>(e_.table.micro_batches), static_cast<int64_t>(e_.table.virtual_stages),
                          static_cast<int64_t>(e_.schedule)}, torch::kLong);
  }

  pipeline::Engine e_;
  std::unique_ptr<pipeline::Transport> transport_;
  std::optional<PipelineShape> forced_;
};

void PipelineStrategy::LoadState(const TensorMap& state) {
  StateReader reader(state);
  if (transport_->AcrossRanks())
    reader.TakeEqual("meta.place", PlaceTensor(),
                     "this rank's stage, the stages and the replicas: each rank loads what it saved, at the same "
                     "world size and --replicate-degree");
  reader.TakeEqual("meta.split", SplitTensor(),
                   "units per stage: --balance=time measures the split at every start; pass the saved "
                   "split as --split, with the saved row's units as --units, to cut the model as the saved "
                   "run did");
  if (reader.Has("meta.units"))  // since --units=auto
    reader.TakeEqual("meta.units", UnitsTensor(), "half blocks (1) or whole blocks (0): pass the saved row's units "
                     "as --units");
  if (e_.pipelined)
    reader.TakeEqual("meta.shape", ShapeTensor(),
                     "micro-batches, chunks per device, schedule: pmp chooses its shape at every start when "
                     "--chunks is not given; pass the saved ones");
  LoadModel(reader);  // copies on this thread's streams: done before the workers go on
  for (int d : e_.local) WaitForCurrentStream(e_.devices[d]->device);
  // Each device's optimizer state is made in its own thread (a CPU logical
  // device is charged for it), one device at a time.
  for (int d : e_.local)
    e_.workers->Run(e_.WorkerOf(d), [&] {
      Device& dev = *e_.devices[d];
      reader.LoadOptimizer("optim.", *dev.optimizer, ParameterNames(*dev.optimizer, *e_.model));
      dev.scaler->Load(reader, "scaler.");
      WaitForCurrentStream(dev.device);
    });
  reader.Finish();
}

}  // namespace

std::unique_ptr<Strategy> MakePipelineStrategy(bool pipelined, const PipelineShape* forced) {
  return std::make_unique<PipelineStrategy>(pipelined, forced);
}

}  // namespace ddpbench
