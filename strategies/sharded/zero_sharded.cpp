// The engine of zero1, zero2 and zero3 (what each stage shards: see
// zero_sharded.h).
//
// Layout (planning/zero_partition.h): the trainable parameters live in one
// flat layout cut into buckets, each bucket padded and split into N equal
// slices, rank r owning slice r of every bucket. Stages 1 and 2 order it by
// gradient readiness (learnt from a probe backward, as DDP learns it from its
// first) and cut it by --bucket-cap-mb;
// stage 3 orders it by model units (stem, every block, head), one bucket per
// unit. The model's parameters are views of their bucket's buffer; the
// optimizer (torch::optim SGD/Adam, the same hyper-parameters) steps this
// rank's slices as flat tensors, which is the per-parameter update because
// both are element-wise.
//
// Gradients: a post-hook on each parameter's AccumulateGrad (the hook
// c10d::Reducer uses) counts the bucket's ready gradients and, once the
// bucket is complete, starts its reduction asynchronously, in one order on
// every rank, so it overlaps the rest of backward. Stage 1: .grad are views of
// one flat gradient buffer, so autograd accumulates straight into the buckets.
// Stages 2 and 3: each gradient is copied into its bucket's buffer as it is
// produced and .grad dropped; the bucket is reduce-scattered into this rank's
// gradient shard and its buffer given back; at most kReductionsInFlight
// buffers wait for their reduction while another fills.
//
// Reduction (--zero-reduce): reduce-scatter gives each owner the sum of its
// slice only. NCCL has it natively. Gloo has none: c10d emulates it by
// cloning the bucket and all-reducing the clone, so here it is an alltoall of
// the bucket's slices (each rank receives every rank's copy of its own slice)
// followed by a local sum, which moves (N-1)/N of the bucket per rank as a
// ring reduce-scatter does, half of an all-reduce's bytes. all-reduce reduces
// whole buckets, as torch's ZeroRedundancyOptimizer under DDP does, and each
// rank then uses its slice.
//
// Parameters: stages 1 and 2 all-gather the updated slices bucket by bucket,
// asynchronously, as the next forward starts (after its buffer broadcast,
// which would otherwise queue behind them in Gloo's work queue); it runs
// the model unit by unit, each unit waiting only for the buckets holding its
// own parameters (the buckets the stem needs are started first). Stage 3
// keeps only its slices at rest: before a unit's forward its bucket is
// all-gathered into newly allocated memory (the next unit's gather started
// right after, so it overlaps this unit's compute) and the memory given back
// after; a hook on the unit's output gathers it again before its backward
// (prefetching the previous unit's) and the memory goes once the unit's
// gradients are all in. The autograd graph's saved views of a unit's weights
// stay valid meanwhile: their storage object is kept and only its bytes go
// and come back, as FSDP resizes storage. The last unit is kept from its
// forward to its backward, which follows at once. So at most two units are
// held in full at a time in a training step: the current one and the
// prefetched one. Evaluation gathers the whole model once and keeps it until
// the next step.
//
// fp16 loss scaling: every rank unscales its own slices, so the inf/NaN
// verdict is all-reduced (MAX) before the shared skip-or-step decision.
#include "strategies/sharded/zero_sharded.h"

#include <c10/core/DeviceGuard.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <numeric>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "strategies/data/data_parallel.h"
#include "planning/zero_memory.h"
#include "planning/zero_partition.h"

namespace ddpbench {
namespace {

constexpr int64_t kAlignBytes = 64;        // parameters and slices start on 64-byte boundaries
constexpr size_t kReductionsInFlight = 2;  // stages 2, 3: bucket buffers awaiting their reduction

// Runs `fn` after a parameter's AccumulateGrad has added this backward's
// gradient into .grad.
class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Names of the collectives of each stage (static: an error may name one
// after the strategy is gone).
struct Labels {
  const char* name;
  const char* initial;
  const char* buffers;
  const char* reduce_scatter;
  const char* all_reduce;
  const char* found_inf;
  const char* gather;
};
constexpr Labels kLabels[] = {
    {"zero1", "ZeRO-1 broadcast of the initial parameters and buffers", "ZeRO-1 buffer broadcast",
     "ZeRO-1 gradient reduce-scatter", "ZeRO-1 gradient all-reduce", "ZeRO-1 found-inf all-reduce",
     "ZeRO-1 parameter all-gather"},
    {"zero2", "ZeRO-2 broadcast of the initial parameters and buffers", "ZeRO-2 buffer broadcast",
     "ZeRO-2 gradient reduce-scatter", "ZeRO-2 gradient all-reduce", "ZeRO-2 found-inf all-reduce",
     "ZeRO-2 parameter all-gather"},
    {"zero3", "ZeRO-3 broadcast of the initial parameters and buffers", "ZeRO-3 buffer broadcast",
     "ZeRO-3 gradient reduce-scatter", "ZeRO-3 gradient all-reduce", "ZeRO-3 found-inf all-reduce",
     "ZeRO-3 unit parameter all-gather"},
};

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

class ShardedStrategy final : public Strategy {
 public:
  explicit ShardedStrategy(int stage) : stage_(stage), labels_(kLabels[stage - 1]) {}

  ~ShardedStrategy() override {
    // All-gathers still under way write into buffers about to go.
    for (auto& work : gathers_) {
      if (!work) continue;
      try {
        work->wait();
      } catch (...) {  // the run is failing already; its error is reported
      }
    }
  }

  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    dist_ = ctx.dist;
    device_ = ctx.devices.front();
    rank_ = dist_ ? dist_->rank : 0;
    world_ = dist_ ? dist_->world : 1;
    comm_ = world_ > 1;
    TORCH_CHECK(!comm_ || dist_->group, labels_.name, " needs a process group");
    model_ = BuildModel(ctx.model, config_->seed, device_);
    buffers_ = model_->buffers();
    CollectParameters();
    LayOut();
    ShareInitialState();
    BuildOptimizer(ctx.lr);
    RegisterGradHooks();
    reduce_scatter_ = config_->zero_reduce == "reduce-scatter";
    alltoall_ = reduce_scatter_ && dist_ && dist_->backend == "gloo";
    timeline_ = std::make_shared<CommTimeline>();
  }

  StepResult Step(const Batch& batch) override {
    model_->train();
    BeginStep();
    torch::Tensor loss;
    {
      auto scope = timer_->Measure(Phase::kForward);
      if (comm_) dist_->BroadcastFromRoot(buffers_, labels_.buffers);
      StartParameterGathers();  // after the broadcast, which would otherwise queue behind them
      AutocastGuard amp(config_->amp, device_);
      loss =
          ClassificationLoss(RunUnits(batch.images.to(device_), /*training=*/true), batch.labels.to(device_));
    }
    Backward(loss);
    OptimizerStep();
    gathers_due_ = stage_ < 3 && comm_;
    return {loss.detach()};
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    StartParameterGathers();
    if (stage_ == 3) GatherForEvaluation();
    torch::NoGradGuard no_grad;
    model_->eval();
    torch::Tensor logits;
    {
      AutocastGuard amp(config_->amp, device_);
      logits = RunUnits(images.to(device_), /*training=*/false);
    }
    model_->train();
    return logits;
  }

  std::vector<torch::Tensor> Parameters() override {
    if (stage_ < 3) {
      StartParameterGathers();
      for (size_t b = 0; b < gathers_.size(); ++b) Gather(static_cast<int64_t>(b));
      return model_->parameters();
    }
    GatherForEvaluation();
    std::vector<torch::Tensor> params;
    for (auto& p : model_->parameters()) params.push_back(p.detach().clone());
    ReleaseEvaluation();
    return params;
  }

  double OptimizerStateMb() override { return ddpbench::OptimizerStateMb(*optimizer_); }

  // This rank's slice of every bucket's parameters ("shard.bucket<b>": after
  // a step of stages 1 and 2 the other slices are stale until the next
  // forward's all-gather, so only the own ones are state), the buffers, the
  // optimizer state of its slices ("optim.bucket<b>.<field>"), the loss scale,
  // and the rank and world the slices belong to.
  TensorMap SaveState() override {
    // After an evaluation (stages 1, 2) all-gathers may still write the
    // buckets, own slices included: let them finish (no new collective).
    for (auto& work : gathers_)
      if (work) {
        work->wait();
        work.reset();
      }
    TensorMap state;
    for (size_t b = 0; b < slice_params_.size(); ++b) state[ShardKey(b)] = slice_params_[b];
    SaveBuffers(state, "model.", *model_);
    SaveOptimizer(state, "optim.", *optimizer_, BucketNames());
    scaler_->Save(state, "scaler.");
    state["meta.rank"] = torch::tensor(int64_t{rank_});
    state["meta.world"] = torch::tensor(int64_t{world_});
    return state;
  }

  void LoadState(const TensorMap& state) override {
    StateReader reader(state);
    const char* hint = "each rank loads the shard it saved, at the same world size";
    reader.TakeEqual("meta.world", torch::tensor(int64_t{world_}), hint);
    reader.TakeEqual("meta.rank", torch::tensor(int64_t{rank_}), hint);
    ReleaseEvaluation();  // stage 3: a gathered model would be stale
    for (size_t b = 0; b < slice_params_.size(); ++b) reader.CopyInto(ShardKey(b), slice_params_[b]);
    reader.LoadBuffers("model.", *model_);
    reader.LoadOptimizer("optim.", *optimizer_, BucketNames());
    scaler_->Load(reader, "scaler.");
    reader.Finish();
    gathers_due_ = stage_ < 3 && comm_;  // every rank's slices to every rank before the next forward
  }

  std::map<std::string, std::string> Extras() override {
    std::map<std::string, std::string> extras = {{"zero_reduce", config_->zero_reduce}};
    if (stage_ < 3) extras["bucket_cap_mb"] = fmt::format("{}", config_->bucket_cap_mb);
    if (stage_ == 3) extras["units_gathered_max"] = std::to_string(held_max_);
    // The share of the gradient reduction hidden behind backward, over the
    // timed steps (on CUDA from events, as ddp's).
    const double hidden = overlap_.HiddenFraction(static_cast<size_t>(config_->warmup));
    if (hidden >= 0) extras["allreduce_hidden_frac"] = fmt::format("{:.3f}", hidden);
    // What this rank holds between steps (every rank holds the same).
    const int64_t params = std::accumulate(partition_.slots.begin(), partition_.slots.end(), int64_t{0},
                                           [](int64_t n, const ZeroSlot& s) { return n + s.numel; });
    const int64_t param_bytes = stage_ < 3 ? Bytes(flat_params_) : Bytes(shard_params_);
    const int64_t grad_bytes = stage_ < 2 ? Bytes(flat_grads_) : Bytes(grad_shard_);
    auto memory = ModelStateColumns(
        static_cast<double>(param_bytes), static_cast<double>(grad_bytes), stage_, params, world_,
        BytesPerParameter(config_->optimizer, config_->momentum, params_.front().element_size()));
    extras.insert(memory.begin(), memory.end());
    return extras;
  }

 private:
  // The trainable parameters in layout order (stages 1, 2: the order their
  // gradients become ready; stage 3: model order), with each one's unit.
  void CollectParameters() {
    auto& units = *model_->units();
    for (size_t u = 0; u < units.size(); ++u)
      for (auto& p : units.ptr(u)->parameters())
        if (p.requires_grad()) {
          params_.push_back(p);
          param_unit_.push_back(static_cast<int64_t>(u));
        }
    TORCH_CHECK(!params_.empty(), labels_.name, ": the model has no trainable parameters");
    for (const auto& p : params_)
      TORCH_CHECK(p.scalar_type() == params_.front().scalar_type(), labels_.name,
                  ": all trainable parameters must share one dtype");
    if (stage_ == 3) return;
    std::vector<torch::Tensor> params;
    std::vector<int64_t> unit_of;
    for (size_t i : GradientOrder()) {
      params.push_back(params_[i]);
      unit_of.push_back(param_unit_[i]);
    }
    params_ = std::move(params);
    param_unit_ = std::move(unit_of);
  }

  // The order backward produces the gradients of params_ in. DDP learns it
  // from its first backward and rebuilds its buckets; here a probe backward
  // of one small image in eval mode (no running statistics change, no random
  // numbers drawn) gives the same order before the layout is made, since the
  // graph does not depend on the data. Parameters without a gradient go last.
  std::vector<size_t> GradientOrder() {
    std::vector<size_t> order;
    std::vector<unsigned> hooks;
    for (size_t i = 0; i < params_.size(); ++i)
      hooks.push_back(params_[i].register_hook([&order, i](const torch::Tensor&) { order.push_back(i); }));
    model_->eval();
    const auto& options = model_->options();
    auto image = torch::zeros({1, options.in_channels, 32, 32}, params_.front().options());
    model_->forward(image).sum().backward();
    model_->train();
    std::vector<bool> seen(params_.size(), false);
    for (size_t i : order) seen[i] = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].remove_hook(hooks[i]);
      params_[i].mutable_grad().reset();
      if (!seen[i]) order.push_back(i);
    }
    return order;
  }

  void LayOut() {
    std::vector<int64_t> numels;
    for (const auto& p : params_) numels.push_back(p.numel());
    const int64_t element = params_.front().element_size();
    const int64_t align = std::max<int64_t>(kAlignBytes / element, 1);
    if (stage_ == 3) {
      partition_ = PartitionForZeroByGroup(numels, param_unit_, world_, align);
    } else {
      const int64_t cap = std::max<int64_t>(static_cast<int64_t>(config_->bucket_cap_mb * 1024 * 1024), 1);
      // As ddp: torch's 1 MiB first bucket with the default cap.
      const int64_t first_cap = config_->bucket_cap_mb == 25.0 ? std::min(kFirstBucketBytes, cap) : cap;
      partition_ = PartitionForZero(numels, element, cap, first_cap, world_, align);
    }
    const auto& buckets = partition_.buckets;
    const size_t n = buckets.size();
    unit_buckets_.assign(model_->units()->size(), {});
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& mine = unit_buckets_[param_unit_[i]];
      const int64_t b = partition_.slots[i].bucket;
      if (std::find(mine.begin(), mine.end(), b) == mine.end()) mine.push_back(b);
    }
    launch_order_.resize(n);
    std::iota(launch_order_.begin(), launch_order_.end(), size_t{0});
    if (stage_ == 3)
      std::reverse(launch_order_.begin(), launch_order_.end());  // backward visits units from the end

    auto options = params_.front().options();
    if (stage_ < 3) flat_params_ = torch::zeros({partition_.total_numel}, options);
    if (stage_ == 3) shard_params_ = torch::zeros({partition_.ShardNumel()}, options);
    if (stage_ == 1) flat_grads_ = torch::zeros({partition_.total_numel}, options);
    if (stage_ >= 2) grad_shard_ = torch::zeros({partition_.ShardNumel()}, options);
    int64_t shard_offset = 0;
    for (const auto& b : buckets) {
      bucket_params_.push_back(stage_ < 3 ? flat_params_.narrow(0, b.offset, b.numel)
                                          : torch::zeros({b.numel}, options));
      slice_params_.push_back(stage_ < 3 ? OwnSlice(bucket_params_.back(), b)
                                         : shard_params_.narrow(0, shard_offset, b.shard_numel));
      bucket_grads_.push_back(stage_ == 1 ? flat_grads_.narrow(0, b.offset, b.numel) : torch::Tensor());
      slice_grads_.push_back(stage_ == 1 ? OwnSlice(bucket_grads_.back(), b)
                                         : grad_shard_.narrow(0, shard_offset, b.shard_numel));
      shard_offset += b.shard_numel;
    }
    held_.assign(n, true);
    gathers_.assign(n, {});
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      const ZeroSlot& slot = partition_.slots[i];
      auto view = InBucket(bucket_params_[slot.bucket], slot).view(p.sizes());
      view.copy_(p);
      p.set_data(view);
      if (stage_ == 1) p.mutable_grad() = InBucket(bucket_grads_[slot.bucket], slot).view(p.sizes());
    }
  }

  // Rank 0's parameters and buffers everywhere (DDP's _sync_module_states);
  // stage 3 then keeps only its slices.
  void ShareInitialState() {
    if (comm_) {
      std::vector<at::Tensor> states = stage_ < 3 ? std::vector<at::Tensor>{flat_params_} : bucket_params_;
      states.insert(states.end(), buffers_.begin(), buffers_.end());
      dist_->BroadcastFromRoot(states, labels_.initial);
    }
    if (stage_ < 3) return;
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < bucket_params_.size(); ++b) {
      slice_params_[b].copy_(OwnSlice(bucket_params_[b], partition_.buckets[b]));
      Release(b);
    }
    held_max_ = 0;
  }

  void BuildOptimizer(double lr) {
    for (size_t b = 0; b < slice_params_.size(); ++b) {
      // Leaves sharing the slices' memory, so the optimizer's in-place update
      // is the update of the parameters.
      auto shard = slice_params_[b].detach();
      shard.mutable_grad() = slice_grads_[b];
      shards_.push_back(shard);
    }
    optimizer_ = MakeOptimizer(*config_, shards_, lr);
    scaler_ = std::make_unique<LossScaler>(config_->amp, device_);
  }

  void RegisterGradHooks() {
    expected_.assign(partition_.buckets.size(), 0);
    for (size_t i = 0; i < params_.size(); ++i) {
      ++expected_[partition_.slots[i].bucket];
      auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
      accumulator->add_post_hook(std::make_unique<GradReadyHook>([this, i] { GradReady(i); }));
      accumulators_.push_back(std::move(accumulator));  // hooks live on the node: keep it alive
    }
  }

  static std::string ShardKey(size_t b) { return fmt::format("shard.bucket{}", b); }
  // The optimizer's parameters are the buckets' slices, in bucket order.
  std::vector<std::string> BucketNames() const {
    std::vector<std::string> names;
    for (size_t b = 0; b < shards_.size(); ++b) names.push_back(fmt::format("bucket{}", b));
    return names;
  }

  torch::Tensor OwnSlice(const torch::Tensor& bucket, const ZeroBucket& b) const {
    return bucket.narrow(0, rank_ * b.shard_numel, b.shard_numel);
  }
  torch::Tensor InBucket(const torch::Tensor& bucket, const ZeroSlot& slot) const {
    return bucket.narrow(0, slot.offset - partition_.buckets[slot.bucket].offset, slot.numel);
  }

  void BeginStep() {
    if (stage_ == 1) flat_grads_.zero_();  // autograd accumulates into the buckets
    ReleaseEvaluation();
    const size_t n = partition_.buckets.size();
    remaining_ = expected_;
    next_launch_ = 0;
    works_.assign(n, {});
    done_.assign(n, {});
    received_.assign(n, {});
    finished_.assign(n, false);
    in_flight_.clear();
    timeline_->intervals.clear();
    timeline_->marks.clear();
  }

  // ---- Forward, unit by unit ----

  torch::Tensor RunUnits(torch::Tensor x, bool training) {
    size_t u = 0;
    for (auto& unit : *model_->units()) {
      BeforeForward(u);
      x = unit.forward(x);
      AfterForward(u, x, training);
      ++u;
    }
    return x;
  }

  // The bucket of unit u's parameters (stage 3: one per unit), or -1.
  int64_t UnitBucket(size_t u) const { return unit_buckets_[u].empty() ? -1 : unit_buckets_[u].front(); }
  // The bucket of the nearest unit after (step +1) or before (-1) unit u that has one, or -1.
  int64_t NeighbourBucket(size_t u, int step) const {
    for (int64_t v = static_cast<int64_t>(u) + step; v >= 0 && v < static_cast<int64_t>(unit_buckets_.size());
         v += step)
      if (UnitBucket(v) >= 0) return UnitBucket(v);
    return -1;
  }

  void BeforeForward(size_t u) {
    for (int64_t b : unit_buckets_[u]) Gather(b);
    if (stage_ == 3) StartGather(NeighbourBucket(u, +1));  // prefetch the next unit
  }

  void AfterForward(size_t u, torch::Tensor& out, bool training) {
    const int64_t b = UnitBucket(u);
    if (stage_ < 3 || b < 0 || evaluation_held_) return;
    const bool backward = training && out.requires_grad();
    if (backward) out.register_hook([this, u](const torch::Tensor& /*grad*/) { BeforeBackward(u); });
    // The last unit's backward comes next: keep it.
    if (!backward || NeighbourBucket(u, +1) >= 0) Release(b);
  }

  void BeforeBackward(size_t u) {
    Gather(UnitBucket(u));
    StartGather(NeighbourBucket(u, -1));  // prefetch the previous unit
  }

  // ---- Parameter gathers ----

  // Starts the all-gather of bucket b's parameters (stage 3: into newly
  // allocated memory) unless it is under way or, stage 3, already there.
  void StartGather(int64_t b) {
    if (b < 0 || gathers_[b]) return;
    if (stage_ == 3) {
      if (held_[b]) return;
      Materialize(b);
    }
    if (!comm_) {
      torch::NoGradGuard no_grad;  // stage 3, world 1: this rank's slice is the bucket
      if (stage_ == 3) bucket_params_[b].copy_(slice_params_[b]);
      return;
    }
    const auto start = CommClock::now();
    gathers_[b] = dist_->group->_allgather_base(bucket_params_[b], slice_params_[b]);
    if (trace::Enabled() && !device_.is_cuda())  // its real end: Gloo completes the future then
      gathers_[b]->getFuture()->addCallback([start, b](c10::ivalue::Future&) {
        trace::Collective("all-gather", b, start, CommClock::now());
      });
  }

  // Bucket b's parameters, complete.
  void Gather(int64_t b) {
    if (b < 0) return;
    if (stage_ == 3) StartGather(b);
    if (!gathers_[b]) return;
    CollectiveLabel label(labels_.gather);
    gathers_[b]->wait();
    gathers_[b].reset();
  }

  // Stages 1, 2, after an optimizer step: every bucket's updated slices to
  // every rank, in the order the next forward needs them (the stem's
  // parameters are laid out last). Started when the parameters are next
  // needed, so at the start of the next forward.
  void StartParameterGathers() {
    if (!gathers_due_) return;
    gathers_due_ = false;
    auto scope = timer_->Measure(Phase::kCommunication);
    CollectiveLabel label(labels_.gather);
    for (size_t b = bucket_params_.size(); b-- > 0;) StartGather(static_cast<int64_t>(b));
  }

  // Stage 3, evaluation and the parity check: the whole model gathered once
  // and kept until the next step, so that ranks whose test shares differ by
  // a batch still issue the same collectives (as FSDP's summon_full_params).
  // Not counted in units_gathered_max, which is about training steps.
  void GatherForEvaluation() {
    if (evaluation_held_) return;
    const int64_t held_max = held_max_;
    for (size_t b = 0; b < held_.size(); ++b) Gather(static_cast<int64_t>(b));
    held_max_ = held_max;
    evaluation_held_ = true;
  }
  void ReleaseEvaluation() {
    if (!evaluation_held_) return;
    for (size_t b = 0; b < held_.size(); ++b) Release(b);
    evaluation_held_ = false;
  }

  // Stage 3: bucket b's full parameters get their memory, or give it back.
  void Materialize(size_t b) {
    c10::DeviceGuard guard(device_);
    auto storage = bucket_params_[b].storage();
    const size_t bytes = static_cast<size_t>(Bytes(bucket_params_[b]));
    storage.set_data_ptr_noswap(storage.allocator()->allocate(bytes));
    storage.set_nbytes(bytes);
    held_[b] = true;
    held_max_ = std::max(held_max_, static_cast<int64_t>(std::count(held_.begin(), held_.end(), true)));
  }
  void Release(size_t b) {
    if (!held_[b]) return;
    if (gathers_[b]) Gather(static_cast<int64_t>(b));  // a prefetch still writing into it
    c10::DeviceGuard guard(device_);
    auto storage = bucket_params_[b].storage();
    storage.set_data_ptr_noswap(storage.allocator()->allocate(0));
    storage.set_nbytes(0);
    held_[b] = false;
  }

  // ---- Backward and gradient reduction ----

  void Backward(const torch::Tensor& loss) {
    double comm_ms = 0, hidden_ms = 0;
    {
      auto scope = timer_->Measure(Phase::kBackward);
      CollectiveLabel label(reduce_scatter_ ? labels_.reduce_scatter : labels_.all_reduce);
      scaler_->Scale(loss).backward();
      // Buckets whose parameters got no gradient (none in a ResNet) still
      // take part, in order, so every rank issues the same collectives.
      for (size_t b = 0; b < remaining_.size(); ++b)
        if (remaining_[b] != 0) {
          remaining_[b] = 0;
          if (stage_ == 3) Release(b);
        }
      LaunchReady();
      for (size_t b = 0; b < remaining_.size(); ++b) FinishReduction(b);
      if (comm_ && device_.is_cuda()) return DeferCudaBackwardComm(*timeline_, *timer_, overlap_);
      if (comm_) {
        std::tie(comm_ms, hidden_ms) = timeline_->BackwardMs();
        timer_->Add(Phase::kCommunication, comm_ms);
      }
    }
    overlap_.Add(comm_ms, hidden_ms);
  }

  // Parameter i has its gradient (autograd thread).
  void GradReady(size_t i) {
    const int64_t b = partition_.slots[i].bucket;
    if (stage_ >= 2) StageGradient(i);
    if (--remaining_[b] == 0) {
      if (stage_ == 3) Release(b);  // the unit's backward is done
      LaunchReady();
    }
  }

  // Stages 2, 3: the gradient moves into its bucket's buffer.
  void StageGradient(size_t i) {
    torch::NoGradGuard no_grad;
    auto& grad = params_[i].mutable_grad();
    if (!grad.defined()) return;
    const ZeroSlot& slot = partition_.slots[i];
    InBucket(BucketBuffer(slot.bucket), slot).view(grad.sizes()).copy_(grad);
    grad.reset();
  }

  // Stages 2, 3: bucket b's gradient buffer, made (zeroed: padding and
  // parameters without a gradient add nothing) when first needed.
  torch::Tensor& BucketBuffer(size_t b) {
    if (!bucket_grads_[b].defined()) {
      while (in_flight_.size() >= kReductionsInFlight) FinishReduction(in_flight_.front());
      bucket_grads_[b] = torch::zeros({partition_.buckets[b].numel}, grad_shard_.options());
    }
    return bucket_grads_[b];
  }

  // Starts the reductions of the complete buckets that are next in order.
  void LaunchReady() {
    while (next_launch_ < launch_order_.size() && remaining_[launch_order_[next_launch_]] == 0)
      Launch(launch_order_[next_launch_++]);
  }

  void Launch(size_t b) {
    if (stage_ >= 2) BucketBuffer(b);
    if (!comm_) return FinishReduction(b);
    NvtxRange range("communication");  // the launch, as ddp's hook marks it
    const auto start = CommClock::now();
    auto cuda_start = CommTimeline::CudaStart(device_.is_cuda(), device_.index());
    auto& group = dist_->group;
    c10::intrusive_ptr<c10d::Work> work;
    if (!reduce_scatter_) {
      std::vector<at::Tensor> tensors{bucket_grads_[b]};
      work = group->allreduce(tensors);
    } else if (alltoall_) {
      // Row j of the result is rank j's gradient of this rank's slice.
      received_[b] = torch::empty_like(bucket_grads_[b]);
      std::vector<int64_t> equal_splits;
      work = group->alltoall_base(received_[b], bucket_grads_[b], equal_splits, equal_splits);
    } else {
      work = group->_reduce_scatter_base(slice_grads_[b], bucket_grads_[b]);
    }
    works_[b] = work;
    in_flight_.push_back(b);
    auto timeline = timeline_;
    const char* op = !reduce_scatter_ ? "all-reduce" : alltoall_ ? "alltoall" : "reduce-scatter";
    const int device = device_.index();
    done_[b] = work->getFuture()->then(
        [timeline, start, cuda_start, device, op, b](c10::ivalue::Future&) {
          timeline->End(start, cuda_start, device, op, static_cast<int64_t>(b));
          return c10::IValue();
        },
        c10::NoneType::get());
  }

  // Waits for bucket b's reduction and leaves this rank's gradient slice
  // holding the mean over ranks.
  void FinishReduction(size_t b) {
    if (finished_[b]) return;
    finished_[b] = true;
    if (comm_) {
      works_[b]->wait();
      if (done_[b]) done_[b]->wait();  // the timestamp is taken
      in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), b));
    }
    torch::NoGradGuard no_grad;
    const ZeroBucket& bucket = partition_.buckets[b];
    if (comm_ && alltoall_) {
      torch::sum_out(slice_grads_[b], received_[b].view({world_, -1}), std::vector<int64_t>{0});
      received_[b] = torch::Tensor();
    } else if (stage_ >= 2 && !(comm_ && reduce_scatter_)) {
      slice_grads_[b].copy_(OwnSlice(bucket_grads_[b], bucket));
    }
    if (comm_) slice_grads_[b].div_(world_);
    if (stage_ >= 2) bucket_grads_[b] = torch::Tensor();
  }

  void OptimizerStep() {
    auto scope = timer_->Measure(Phase::kOptimizer);
    if (!scaler_->enabled()) {
      optimizer_->step();
      return;
    }
    torch::Tensor found_inf = scaler_->Unscale(shards_);
    if (comm_) {
      // Each rank checked only its slices: skip or step together.
      CollectiveLabel label(labels_.found_inf);
      std::vector<at::Tensor> t{found_inf};
      dist_->group->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
    }
    scaler_->StepAndUpdate(*optimizer_, found_inf);
  }

  const int stage_;
  const Labels labels_;
  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  DistContext* dist_ = nullptr;
  torch::Device device_ = torch::kCPU;
  int rank_ = 0, world_ = 1;
  bool comm_ = false, reduce_scatter_ = true, alltoall_ = false;
  ResNet model_{nullptr};
  std::vector<torch::Tensor> params_, buffers_;     // params_ in layout order
  std::vector<int64_t> param_unit_;                 // the unit of each of params_
  std::vector<std::vector<int64_t>> unit_buckets_;  // per unit: the buckets holding its parameters
  ZeroPartition partition_;
  std::vector<size_t> launch_order_;  // the order gradients complete buckets in
  // Stage 1, 2: the flat parameter buffer; stage 3: this rank's slices.
  torch::Tensor flat_params_, shard_params_;
  // Stage 1: the flat gradient buffer; stages 2, 3: this rank's slices.
  torch::Tensor flat_grads_, grad_shard_;
  // Per bucket: its parameters in full (stage 3: memory only while held),
  // this rank's slice of them, its gradients in full (stages 2, 3: only
  // between the first gradient and the reduction), this rank's reduced
  // gradient slice, and the optimizer's leaves.
  std::vector<torch::Tensor> bucket_params_, slice_params_, bucket_grads_, slice_grads_, shards_;
  std::vector<bool> held_;                               // stage 3: bucket_params_ has memory
  bool gathers_due_ = false;                             // stages 1, 2: updated slices not yet sent
  int64_t held_max_ = 0;                                 // stage 3: most buckets held at once
  bool evaluation_held_ = false;                         // stage 3: all held for evaluation
  std::vector<c10::intrusive_ptr<c10d::Work>> gathers_;  // per bucket: its all-gather under way
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  // Per step: gradients still missing per bucket, the next bucket to launch,
  // its work, timestamping future and (alltoall) received rows, whether it is
  // finished, and the launched but unfinished ones in launch order.
  std::vector<int64_t> expected_, remaining_;
  size_t next_launch_ = 0;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> done_;
  std::vector<torch::Tensor> received_;
  std::vector<bool> finished_;
  std::deque<size_t> in_flight_;
  std::shared_ptr<CommTimeline> timeline_;
  OverlapStats overlap_;
};

}  // namespace

std::unique_ptr<Strategy> MakeShardedStrategy(int stage) {
  TORCH_CHECK(stage >= 1 && stage <= 3, "ZeRO stage ", stage, " (accepted: 1, 2, 3)");
  return std::make_unique<ShardedStrategy>(stage);
}

}  // namespace ddpbench
