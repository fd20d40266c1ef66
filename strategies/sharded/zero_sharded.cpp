// zero1, zero2 and zero3: the sharded strategy (zero_sharded.h says what each
// stage shards). Its parts, each in this folder: layout.h (the parameters in
// buckets, each rank owning one slice of every bucket), gathers.h (the
// parameters all-gathered bucket by bucket, and stage 3's units materialised
// and released), reductions.h (gradients reduced bucket by bucket during
// backward). The optimizer (torch::optim SGD/Adam, the same
// hyper-parameters) steps this rank's slices as flat tensors, which is the
// per-parameter update because both are element-wise. fp16 loss scaling:
// every rank unscales its own slices, so the inf/NaN verdict is all-reduced
// (MAX) before the shared skip-or-step decision. --overlap-optimizer: each
// bucket's slice is stepped by a PartialStepper as its reduction
// completes (reductions.h), and the updated slices are all-gathered before
// the next forward as without it.
#include "strategies/sharded/zero_sharded.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/partial_step.h"
#include "harness/phase.h"
#include "harness/state_map.h"
#include "harness/training.h"
#include "planning/mesh.h"
#include "planning/zero_memory.h"
#include "strategies/sharded/gathers.h"
#include "strategies/sharded/layout.h"
#include "strategies/sharded/reductions.h"

namespace ddpbench {
namespace {

using sharded::Bytes;

class ShardedStrategy final : public Strategy {
 public:
  explicit ShardedStrategy(int stage) : labels_(sharded::LabelsOf(stage)) { layout_.stage = stage; }

  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    dist_ = ctx.dist;
    layout_.device = ctx.devices.front();
    // With a mesh the shard group is this rank's group; else the world.
    layout_.rank = dist_ ? dist_->group_rank() : 0;
    layout_.world = dist_ ? dist_->group_world() : 1;
    layout_.data_world = dist_ ? dist_->world : 1;
    layout_.group = dist_ ? dist_->strategy_group() : nullptr;
    layout_.replicate = dist_ ? dist_->replicate_group.get() : nullptr;
    layout_.comm = layout_.world > 1;
    TORCH_CHECK(!layout_.comm || layout_.group, labels_.name, " needs a process group");
    layout_.model = BuildModel(ctx.model, config_->seed, layout_.device);
    buffers_ = layout_.model->buffers();
    sharded::LayOut(layout_, *config_);
    gathers_ = std::make_unique<sharded::ParameterGathers>(layout_, dist_, *timer_);
    ShareInitialState();
    BuildOptimizer(ctx.lr);
    // --overlap-optimizer: the CLI refuses it where the step is not per
    // bucket (fp16's loss scaler). Stage 3 steps the persistent slice, not
    // the gathered bucket, which the bucket's finished backward has released.
    std::function<void(size_t)> step_bucket;
    if (config_->overlap_optimizer) {
      stepper_ = std::make_unique<PartialStepper>(*optimizer_);
      step_bucket = [this](size_t b) { stepper_->Step({shards_[b]}, {layout_.slice_grads[b]}); };
    }
    reductions_ = std::make_unique<sharded::GradientReductions>(
        layout_, *gathers_, dist_, *timer_, config_->zero_reduce == "reduce-scatter", std::move(step_bucket));
  }

  StepResult Step(const Batch& batch) override {
    layout_.model->train();
    if (layout_.stage == 1) layout_.flat_grads.zero_();  // autograd accumulates into the buckets
    gathers_->ReleaseEvaluation();
    reductions_->BeginStep();
    torch::Tensor loss;
    {
      auto scope = timer_->Measure(Phase::kForward);
      if (layout_.world_comm()) dist_->BroadcastFromRoot(buffers_, labels_.buffers);
      gathers_->StartDue();  // after the broadcast, which would otherwise queue behind them
      AutocastGuard amp(config_->amp, layout_.device);
      loss = ClassificationLoss(gathers_->RunUnits(batch.images.to(layout_.device), /*training=*/true),
                                batch.labels.to(layout_.device));
    }
    reductions_->Backward(loss, *scaler_);
    OptimizerStep();
    gathers_->SetDue();
    return {loss.detach()};
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    gathers_->StartDue();
    if (layout_.stage == 3) gathers_->GatherForEvaluation();
    torch::NoGradGuard no_grad;
    layout_.model->eval();
    torch::Tensor logits;
    {
      AutocastGuard amp(config_->amp, layout_.device);
      logits = gathers_->RunUnits(images.to(layout_.device), /*training=*/false);
    }
    layout_.model->train();
    return logits;
  }

  std::vector<torch::Tensor> Parameters() override {
    if (layout_.stage < 3) {
      gathers_->GatherAll();
      return layout_.model->parameters();
    }
    gathers_->GatherForEvaluation();
    std::vector<torch::Tensor> params;
    for (auto& p : layout_.model->parameters()) params.push_back(p.detach().clone());
    gathers_->ReleaseEvaluation();
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
    gathers_->WaitUnderWay();
    TensorMap state;
    for (size_t b = 0; b < layout_.slice_params.size(); ++b) state[ShardKey(b)] = layout_.slice_params[b];
    SaveBuffers(state, "model.", *layout_.model);
    SaveOptimizer(state, "optim.", *optimizer_, BucketNames());
    scaler_->Save(state, "scaler.");
    state["meta.rank"] = torch::tensor(int64_t{layout_.rank});
    state["meta.world"] = torch::tensor(int64_t{layout_.world});
    if (Replicas() > 1) state["meta.replicas"] = torch::tensor(int64_t{Replicas()});
    return state;
  }

  void LoadState(const TensorMap& state) override {
    StateReader reader(state);
    const char* hint = "each rank loads the shard it saved, at the same world size and --replicate-degree";
    reader.TakeEqual("meta.world", torch::tensor(int64_t{layout_.world}), hint);
    reader.TakeEqual("meta.rank", torch::tensor(int64_t{layout_.rank}), hint);
    if (reader.Has("meta.replicas") || Replicas() > 1)
      reader.TakeEqual("meta.replicas", torch::tensor(int64_t{Replicas()}), hint);
    gathers_->ReleaseEvaluation();  // stage 3: a gathered model would be stale
    for (size_t b = 0; b < layout_.slice_params.size(); ++b) reader.CopyInto(ShardKey(b), layout_.slice_params[b]);
    reader.LoadBuffers("model.", *layout_.model);
    reader.LoadOptimizer("optim.", *optimizer_, BucketNames());
    scaler_->Load(reader, "scaler.");
    reader.Finish();
    gathers_->SetDue();  // every rank's slices to every rank before the next forward
  }

  std::map<std::string, std::string> Extras() override;

  // Every rank's slices of every parameter (with --replicate-degree, each
  // replica's ranks hold the same slices).
  StateLayout DescribeState() override {
    StateLayout l;
    std::unordered_map<const void*, std::string> name_of;
    for (const auto& item : layout_.model->named_parameters()) name_of[item.value().unsafeGetTensorImpl()] = item.key();
    std::vector<std::string> names;
    for (const auto& p : layout_.params) {
      names.push_back(name_of.at(p.unsafeGetTensorImpl()));
      l.shapes[names.back()] = p.sizes().vec();
    }
    const std::vector<std::string> optim_names = BucketNames();
    for (size_t b = 0; b < optim_names.size(); ++b) l.optim_name[ShardKey(b)] = optim_names[b];
    const int world = dist_ ? dist_->world : 1;
    for (int g = 0; g < world; ++g) {
      const int index = Replicas() > 1 ? MeshOf(g, world, Replicas()).index : g;
      for (auto piece : ZeroPieces(layout_.partition, names, index, ShardKey)) {
        piece.holder = g;
        l.params.push_back(std::move(piece));
      }
    }
    return l;
  }

 private:
  int Replicas() const { return layout_.data_world / std::max(layout_.world, 1); }

  // Rank 0's parameters and buffers everywhere (DDP's _sync_module_states);
  // stage 3 then keeps only its slices.
  void ShareInitialState() {
    if (layout_.world_comm()) {
      std::vector<at::Tensor> states =
          layout_.stage < 3 ? std::vector<at::Tensor>{layout_.flat_params} : layout_.bucket_params;
      states.insert(states.end(), buffers_.begin(), buffers_.end());
      dist_->BroadcastFromRoot(states, labels_.initial);
    }
    if (layout_.stage < 3) return;
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < layout_.bucket_params.size(); ++b) {
      layout_.slice_params[b].copy_(layout_.OwnSlice(layout_.bucket_params[b], layout_.partition.buckets[b]));
      gathers_->Release(b);
    }
    gathers_->ResetHeldMost();
  }

  void BuildOptimizer(double lr) {
    for (size_t b = 0; b < layout_.slice_params.size(); ++b) {
      // Leaves sharing the slices' memory, so the optimizer's in-place update
      // is the update of the parameters.
      auto shard = layout_.slice_params[b].detach();
      shard.mutable_grad() = layout_.slice_grads[b];
      shards_.push_back(shard);
    }
    optimizer_ = MakeOptimizer(*config_, shards_, lr);
    scaler_ = std::make_unique<LossScaler>(config_->amp, layout_.device);
  }

  // fp16 loss scaling: every rank unscales its own slices, so the inf/NaN
  // verdict is all-reduced (MAX) before the shared skip-or-step decision.
  void OptimizerStep() {
    auto scope = timer_->Measure(Phase::kOptimizer);
    if (stepper_) return;  // every slice was stepped as its reduction completed, in backward
    if (!scaler_->enabled()) {
      optimizer_->step();
      return;
    }
    torch::Tensor found_inf = scaler_->Unscale(shards_);
    if (layout_.world_comm()) {
      CollectiveLabel label(labels_.found_inf);
      std::vector<at::Tensor> t{found_inf};
      dist_->group->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
    }
    scaler_->StepAndUpdate(*optimizer_, found_inf);
  }

  static std::string ShardKey(int64_t b) { return fmt::format("shard.bucket{}", b); }
  // The optimizer's parameters are the buckets' slices, in bucket order.
  std::vector<std::string> BucketNames() const {
    std::vector<std::string> names;
    for (size_t b = 0; b < shards_.size(); ++b) names.push_back(fmt::format("bucket{}", b));
    return names;
  }

  const sharded::Labels& labels_;
  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  DistContext* dist_ = nullptr;
  sharded::Layout layout_;
  std::vector<torch::Tensor> buffers_;
  std::vector<torch::Tensor> shards_;  // per bucket: the optimizer's leaf over this rank's slice
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<PartialStepper> stepper_;  // --overlap-optimizer
  std::unique_ptr<sharded::ParameterGathers> gathers_;
  std::unique_ptr<sharded::GradientReductions> reductions_;
};

std::map<std::string, std::string> ShardedStrategy::Extras() {
  const int stage = layout_.stage;
  std::map<std::string, std::string> extras = {{"zero_reduce", config_->zero_reduce}};
  if (Replicas() > 1) extras["mesh"] = dist_->mesh.Describe(/*pipeline=*/false);
  if (stage < 3) extras["bucket_cap_mb"] = fmt::format("{}", config_->bucket_cap_mb);
  if (stage == 3) extras["units_gathered_max"] = std::to_string(gathers_->HeldMost());
  // The share of the gradient reduction hidden behind backward, over the
  // timed steps (on CUDA from events, as ddp's).
  const double hidden = reductions_->HiddenFraction(static_cast<size_t>(config_->warmup));
  if (hidden >= 0) extras["allreduce_hidden_frac"] = fmt::format("{:.3f}", hidden);
  // What this rank holds between steps (every rank holds the same).
  const auto& slots = layout_.partition.slots;
  const int64_t params = std::accumulate(slots.begin(), slots.end(), int64_t{0},
                                         [](int64_t n, const ZeroSlot& s) { return n + s.numel; });
  const int64_t param_bytes = stage < 3 ? Bytes(layout_.flat_params) : Bytes(layout_.shard_params);
  const int64_t grad_bytes = stage < 2 ? Bytes(layout_.flat_grads) : Bytes(layout_.grad_shard);
  auto memory = ModelStateColumns(
      static_cast<double>(param_bytes), static_cast<double>(grad_bytes), stage, params, layout_.world,
      BytesPerParameter(config_->optimizer, config_->momentum, layout_.params.front().element_size()));
  extras.insert(memory.begin(), memory.end());
  return extras;
}

}  // namespace

std::unique_ptr<Strategy> MakeShardedStrategy(int stage) {
  TORCH_CHECK(stage >= 1 && stage <= 3, "ZeRO stage ", stage, " (accepted: 1, 2, 3)");
  return std::make_unique<ShardedStrategy>(stage);
}

}  // namespace ddpbench
