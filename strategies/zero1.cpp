// zero1: ZeRO stage 1 (sharded optimizer state). Every rank holds all
// parameters and gradients but the optimizer state (SGD momentum, Adam's two
// moments) of only its 1/N of the elements.
//
// Layout (strategies/zero_partition.h): the trainable parameters live in one
// flat buffer in gradient-ready (reverse model) order, cut into buckets of
// --bucket-cap-mb; each bucket is padded and split into N equal slices, rank r
// owning slice r of every bucket. The model's parameters are views of that
// buffer and their .grad views of a twin gradient buffer, so autograd
// accumulates gradients straight into the buckets (no copies).
//
// Step: buffers broadcast from rank 0 (as DDP); forward; backward, where a
// post-hook on each parameter's AccumulateGrad counts the bucket's ready
// gradients and, once the bucket is complete, starts its reduction
// asynchronously, in bucket order on every rank, so it overlaps the rest of
// backward; wait for all, average; the optimizer (torch::optim SGD/Adam, the
// same hyper-parameters) steps this rank's slices as flat tensors, which is
// the per-parameter update because both are element-wise; then ONE coalesced
// all-gather of the updated slices straight into the parameter buffer.
//
// Reduction (--zero-reduce): reduce-scatter gives each owner the sum of its
// slice only. NCCL has it natively (in place). Gloo has none: c10d emulates
// it by cloning the bucket and all-reducing the clone, so here it is an
// alltoall of the bucket's slices (each rank receives every rank's copy of
// its own slice) followed by a local sum, which moves (N-1)/N of the bucket
// per rank as a ring reduce-scatter does, half of an all-reduce's bytes.
// all-reduce reduces whole buckets, as torch's ZeroRedundancyOptimizer under
// DDP does, and each rank then uses its slice.
//
// fp16 loss scaling: every rank unscales its own slices, so the inf/NaN
// verdict is all-reduced (MAX) before the shared skip-or-step decision.
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <functional>

#include "harness/config.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "strategies/data_parallel.h"
#include "strategies/factories.h"
#include "strategies/zero_partition.h"

namespace ddpbench {
namespace {

constexpr int64_t kAlignBytes = 64;  // parameters and slices start on 64-byte boundaries

// Runs `fn` after a parameter's AccumulateGrad has added this backward's
// gradient into .grad (the hook c10d::Reducer uses).
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

class Zero1Strategy final : public Strategy {
 public:
  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    dist_ = ctx.dist;
    device_ = ctx.devices.front();
    rank_ = dist_ ? dist_->rank : 0;
    world_ = dist_ ? dist_->world : 1;
    comm_ = world_ > 1;
    TORCH_CHECK(!comm_ || dist_->group, "zero1 needs a process group");
    model_ = BuildModel(ctx.model, config_->seed, device_);
    std::vector<torch::Tensor> params;
    for (auto& p : model_->parameters())
      if (p.requires_grad()) params.push_back(p);
    buffers_ = model_->buffers();
    TORCH_CHECK(!params.empty(), "zero1: the model has no trainable parameters");
    for (const auto& p : params)
      TORCH_CHECK(p.scalar_type() == params.front().scalar_type(),
                  "zero1: all trainable parameters must share one dtype");

    // Gradient-ready order: backward visits the model from its end.
    std::reverse(params.begin(), params.end());
    std::vector<int64_t> numels;
    for (const auto& p : params) numels.push_back(p.numel());
    const int64_t element = params.front().element_size();
    const int64_t cap = static_cast<int64_t>(config_->bucket_cap_mb * 1024 * 1024);
    // As ddp: torch's 1 MiB first bucket with the default cap.
    const int64_t first_cap = config_->bucket_cap_mb == 25.0 ? std::min(kFirstBucketBytes, cap) : cap;
    partition_ = PartitionForZero(numels, element, std::max<int64_t>(cap, 1), std::max<int64_t>(first_cap, 1),
                                  world_, std::max<int64_t>(kAlignBytes / element, 1));

    auto options = params.front().options();
    flat_params_ = torch::zeros({partition_.total_numel}, options);
    flat_grads_ = torch::zeros({partition_.total_numel}, options);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        auto& p = params[i];
        const ZeroSlot& slot = partition_.slots[i];
        auto view = flat_params_.narrow(0, slot.offset, slot.numel).view(p.sizes());
        view.copy_(p);
        p.set_data(view);
        p.mutable_grad() = flat_grads_.narrow(0, slot.offset, slot.numel).view(p.sizes());
      }
    }
    // DDP's _sync_module_states: rank 0's parameters and buffers everywhere.
    if (comm_) {
      std::vector<at::Tensor> states{flat_params_};
      states.insert(states.end(), buffers_.begin(), buffers_.end());
      dist_->BroadcastFromRoot(states, "ZeRO-1 broadcast of the initial parameters and buffers");
    }

    const auto& buckets = partition_.buckets;
    for (const auto& b : buckets) {
      bucket_params_.push_back(flat_params_.narrow(0, b.offset, b.numel));
      bucket_grads_.push_back(flat_grads_.narrow(0, b.offset, b.numel));
      slice_params_.push_back(flat_params_.narrow(0, b.SliceBegin(rank_), b.shard_numel));
      slice_grads_.push_back(flat_grads_.narrow(0, b.SliceBegin(rank_), b.shard_numel));
      // The optimizer's parameters: leaves sharing the slices' memory, so its
      // in-place update is the update of the parameter buffer.
      auto shard = slice_params_.back().detach();
      shard.mutable_grad() = slice_grads_.back();
      shards_.push_back(shard);
    }
    optimizer_ = MakeOptimizer(*config_, shards_, ctx.lr);
    scaler_ = std::make_unique<LossScaler>(config_->amp, device_);

    expected_.assign(buckets.size(), 0);
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t b = partition_.slots[i].bucket;
      ++expected_[b];
      auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
      accumulator->add_post_hook(std::make_unique<GradReadyHook>([this, b] { GradReady(b); }));
      accumulators_.push_back(std::move(accumulator));  // hooks live on the node: keep it alive
    }
    reduce_scatter_ = config_->zero_reduce == "reduce-scatter";
    alltoall_ = reduce_scatter_ && dist_ && dist_->backend == "gloo";
    timeline_ = std::make_shared<CommTimeline>();
  }

  StepResult Step(const Batch& batch) override {
    model_->train();
    flat_grads_.zero_();  // autograd accumulates into the buckets
    const size_t n = partition_.buckets.size();
    remaining_ = expected_;
    next_launch_ = 0;
    works_.assign(n, {});
    done_.assign(n, {});
    received_.assign(n, {});
    timeline_->intervals.clear();

    torch::Tensor loss;
    {
      auto scope = timer_->Measure(Phase::kForward);
      if (comm_) dist_->BroadcastFromRoot(buffers_, "ZeRO-1 buffer broadcast");
      AutocastGuard amp(config_->amp, device_);
      auto logits = model_->forward(batch.images.to(device_));
      loss = ClassificationLoss(logits, batch.labels.to(device_));
    }
    double comm_ms = 0, hidden_ms = 0;
    {
      auto scope = timer_->Measure(Phase::kBackward);
      CollectiveLabel label(reduce_scatter_ ? "ZeRO-1 gradient reduce-scatter"
                                            : "ZeRO-1 gradient all-reduce");
      scaler_->Scale(loss).backward();
      // Buckets whose parameters got no gradient (none in a ResNet) still
      // take part, in order, so every rank issues the same collectives.
      for (size_t b = 0; b < n; ++b) remaining_[b] = 0;
      LaunchReady();
      for (size_t b = 0; b < n; ++b) FinishReduction(b);
      if (comm_ && !device_.is_cuda()) {
        std::tie(comm_ms, hidden_ms) = timeline_->BackwardMs();
        timer_->Add(Phase::kCommunication, comm_ms);
      }
    }
    overlap_.Add(comm_ms, hidden_ms);
    {
      auto scope = timer_->Measure(Phase::kOptimizer);
      if (scaler_->enabled()) {
        torch::Tensor found_inf = scaler_->Unscale(shards_);
        if (comm_) {
          // Each rank checked only its slices: skip or step together.
          CollectiveLabel label("ZeRO-1 found-inf all-reduce");
          std::vector<at::Tensor> t{found_inf};
          dist_->group->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
        }
        scaler_->StepAndUpdate(*optimizer_, found_inf);
      } else {
        optimizer_->step();
      }
    }
    if (comm_) {
      auto scope = timer_->Measure(Phase::kCommunication);
      CollectiveLabel label("ZeRO-1 parameter all-gather");
      // One collective for all buckets; each bucket's output is
      // [slice 0 | slice 1 | ...] in place in the parameter buffer.
      dist_->group->allgather_into_tensor_coalesced(bucket_params_, slice_params_)->wait();
    }
    return {loss.detach()};
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    return PredictLogits(model_, config_->amp, device_, images);
  }

  std::vector<torch::Tensor> Parameters() override { return model_->parameters(); }
  double OptimizerStateMb() override { return ddpbench::OptimizerStateMb(*optimizer_); }

  std::map<std::string, std::string> Extras() override {
    std::map<std::string, std::string> extras = {{"bucket_cap_mb", fmt::format("{}", config_->bucket_cap_mb)},
                                                 {"zero_reduce", config_->zero_reduce}};
    // The share of the gradient reduction hidden behind backward, over the
    // timed steps (CPU only, as ddp's; the all-gather is never hidden).
    const double hidden = overlap_.HiddenFraction(static_cast<size_t>(config_->warmup));
    if (!device_.is_cuda() && hidden >= 0) extras["allreduce_hidden_frac"] = fmt::format("{:.3f}", hidden);
    return extras;
  }

 private:
  // A parameter of bucket `b` has its gradient (autograd thread).
  void GradReady(int64_t b) {
    if (--remaining_[b] == 0) LaunchReady();
  }

  // Starts the reductions of the complete buckets that are next in order.
  void LaunchReady() {
    while (next_launch_ < remaining_.size() && remaining_[next_launch_] == 0) Launch(next_launch_++);
  }

  void Launch(size_t b) {
    if (!comm_) return;
    const auto start = CommClock::now();
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
    if (!device_.is_cuda()) {
      auto timeline = timeline_;
      done_[b] = work->getFuture()->then(
          [timeline, start](c10::ivalue::Future&) {
            timeline->Add(start, CommClock::now());
            return c10::IValue();
          },
          c10::NoneType::get());
    }
  }

  // Waits for bucket b's reduction and leaves this rank's slice of the
  // gradient buffer holding the mean over ranks.
  void FinishReduction(size_t b) {
    if (!comm_) return;
    works_[b]->wait();
    if (done_[b]) done_[b]->wait();  // the timestamp is taken
    torch::NoGradGuard no_grad;
    if (alltoall_) {
      torch::sum_out(slice_grads_[b], received_[b].view({world_, -1}), std::vector<int64_t>{0});
      received_[b] = torch::Tensor();
    }
    slice_grads_[b].div_(world_);
  }

  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  DistContext* dist_ = nullptr;
  torch::Device device_ = torch::kCPU;
  int rank_ = 0, world_ = 1;
  bool comm_ = false, reduce_scatter_ = true, alltoall_ = false;
  ResNet model_{nullptr};
  std::vector<torch::Tensor> buffers_;
  ZeroPartition partition_;
  torch::Tensor flat_params_, flat_grads_;
  // Per bucket: the whole bucket and this rank's slice, of parameters and of
  // gradients (views of the flat buffers), and the optimizer's leaves.
  std::vector<torch::Tensor> bucket_params_, bucket_grads_, slice_params_, slice_grads_, shards_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  // Per step: gradients still missing per bucket, the next bucket to launch,
  // its work, timestamping future and (alltoall) received rows.
  std::vector<int64_t> expected_, remaining_;
  size_t next_launch_ = 0;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> done_;
  std::vector<torch::Tensor> received_;
  std::shared_ptr<CommTimeline> timeline_;
  OverlapStats overlap_;
};

}  // namespace

std::unique_ptr<Strategy> MakeZero1Strategy() { return std::make_unique<Zero1Strategy>(); }

}  // namespace ddpbench
