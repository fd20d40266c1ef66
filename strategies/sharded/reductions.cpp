// The sharded strategies' gradient buckets and their reductions.
#include "strategies/sharded/reductions.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>

#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/training.h"

namespace ddpbench::sharded {
namespace {

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

}  // namespace

GradientReductions::GradientReductions(Layout& layout, ParameterGathers& gathers, DistContext* dist,
                                       PhaseTimer& timer, bool reduce_scatter,
                                       std::function<void(size_t)> step_bucket)
    : layout_(layout), gathers_(gathers), dist_(dist), timer_(timer), comm_(layout.world_comm()),
      // A shard group of one rank: its reduce-scatter is a copy and the
      // replicate all-reduce of the slice (the whole bucket) is the world's.
      reduce_scatter_(reduce_scatter && layout.comm),
      alltoall_(reduce_scatter_ && layout.group && BackendName(*layout.group) == "gloo"),
      step_bucket_(std::move(step_bucket)), timeline_(std::make_shared<CommTimeline>()) {
  expected_.assign(layout_.buckets(), 0);
  for (size_t i = 0; i < layout_.params.size(); ++i) {
    ++expected_[layout_.partition.slots[i].bucket];
    auto accumulator = torch::autograd::impl::grad_accumulator(layout_.params[i]);
    accumulator->add_post_hook(std::make_unique<GradReadyHook>([this, i] { GradReady(i); }));
    accumulators_.push_back(std::move(accumulator));  // hooks live on the node: keep it alive
  }
}

void GradientReductions::BeginStep() {
  const size_t n = layout_.buckets();
  remaining_ = expected_;
  next_launch_ = 0;
  works_.assign(n, {});
  done_.assign(n, {});
  received_.assign(n, {});
  finished_.assign(n, false);
  replicate_works_.assign(n, {});
  replicate_done_.assign(n, {});
  in_flight_.clear();
  timeline_->intervals.clear();
  timeline_->marks.clear();
}

void GradientReductions::Backward(const torch::Tensor& loss, LossScaler& scaler) {
  const Labels& labels = LabelsOf(layout_.stage);
  double comm_ms = 0, hidden_ms = 0;
  {
    auto scope = timer_.Measure(Phase::kBackward);
    CollectiveLabel label(reduce_scatter_ ? labels.reduce_scatter : labels.all_reduce);
    scaler.Scale(loss).backward();
    // Buckets whose parameters got no gradient (none in a ResNet) still
    // take part, in order, so every rank issues the same collectives.
    for (size_t b = 0; b < remaining_.size(); ++b)
      if (remaining_[b] != 0) {
        remaining_[b] = 0;
        if (layout_.stage == 3) gathers_.Release(b);
      }
    LaunchReady();
    for (size_t b : layout_.launch_order) FinishReduction(b);  // the order every rank starts replicate all-reduces in
    FinishReplicas();
    if (comm_ && layout_.device.is_cuda()) return DeferCudaBackwardComm(*timeline_, timer_, overlap_);
    if (comm_) {
      std::tie(comm_ms, hidden_ms) = timeline_->BackwardMs();
      timer_.Add(Phase::kCommunication, comm_ms);
    }
  }
  overlap_.Add(comm_ms, hidden_ms);
}

// Parameter i has its gradient (autograd thread).
void GradientReductions::GradReady(size_t i) {
  const int64_t b = layout_.partition.slots[i].bucket;
  if (layout_.stage >= 2) StageGradient(i);
  if (--remaining_[b] == 0) {
    if (layout_.stage == 3) gathers_.Release(b);  // the unit's backward is done
    LaunchReady();
  }
}

// Stages 2, 3: the gradient moves into its bucket's buffer.
void GradientReductions::StageGradient(size_t i) {
  torch::NoGradGuard no_grad;
  auto& grad = layout_.params[i].mutable_grad();
  if (!grad.defined()) return;
  const ZeroSlot& slot = layout_.partition.slots[i];
  layout_.InBucket(BucketBuffer(slot.bucket), slot).view(grad.sizes()).copy_(grad);
  grad.reset();
}

// Stages 2, 3: bucket b's gradient buffer, made (zeroed: padding and
// parameters without a gradient add nothing) when first needed.
torch::Tensor& GradientReductions::BucketBuffer(size_t b) {
  if (!layout_.bucket_grads[b].defined()) {
    while (in_flight_.size() >= kReductionsInFlight) FinishReduction(in_flight_.front());
    layout_.bucket_grads[b] = torch::zeros({layout_.partition.buckets[b].numel}, layout_.grad_shard.options());
  }
  return layout_.bucket_grads[b];
}

// Starts the reductions of the complete buckets that are next in order.
void GradientReductions::LaunchReady() {
  while (next_launch_ < layout_.launch_order.size() && remaining_[layout_.launch_order[next_launch_]] == 0)
    Launch(layout_.launch_order[next_launch_++]);
}

void GradientReductions::Launch(size_t b) {
  if (layout_.stage >= 2) BucketBuffer(b);
  if (!comm_) return FinishReduction(b);
  NvtxRange range("communication");  // the launch, as ddp's hook marks it
  const auto start = CommClock::now();
  auto cuda_start = CommTimeline::CudaStart(layout_.device.is_cuda(), layout_.device.index());
  torch::Tensor& bucket = layout_.bucket_grads[b];
  c10::intrusive_ptr<c10d::Work> work;
  if (!reduce_scatter_) {
    std::vector<at::Tensor> tensors{bucket};
    work = dist_->group->allreduce(tensors);  // every rank's whole bucket, replicas included
  } else if (alltoall_) {
    // Row j of the result is rank j's gradient of this rank's slice.
    received_[b] = torch::empty_like(bucket);
    std::vector<int64_t> equal_splits;
    work = layout_.group->alltoall_base(received_[b], bucket, equal_splits, equal_splits);
  } else {
    work = layout_.group->_reduce_scatter_base(layout_.slice_grads[b], bucket);
  }
  works_[b] = work;
  in_flight_.push_back(b);
  std::function<void()> then;
  if (SettledOnCompletion())
    then = [this, b] {
      SumIntoSlice(b);
      Settle(b);
    };
  done_[b] = Track(work, start, cuda_start, !reduce_scatter_ ? "all-reduce" : alltoall_ ? "alltoall" : "reduce-scatter",
                   b, std::move(then));
}

// A future that stamps `work`'s end on the step's communication timeline.
c10::intrusive_ptr<c10::ivalue::Future> GradientReductions::Track(const c10::intrusive_ptr<c10d::Work>& work,
                                                                  CommClock::time_point start,
                                                                  std::shared_ptr<CudaMark> cuda_start,
                                                                  const char* op, size_t b,
                                                                  std::function<void()> then) {
  auto timeline = timeline_;
  const int device = layout_.device.index();
  return work->getFuture()->then(
      [timeline, start, cuda_start, device, op, b, then = std::move(then)](c10::ivalue::Future&) {
        timeline->End(start, cuda_start, device, op, static_cast<int64_t>(b));
        if (then) then();
        return c10::IValue();
      },
      c10::NoneType::get());
}

// Waits for bucket b's reduction and leaves this rank's gradient slice
// holding the mean over ranks (--overlap-optimizer: stepped too); with
// replicas, the slice (summed over the group) is all-reduced across them
// first, started here and finished by FinishReplicas.
void GradientReductions::FinishReduction(size_t b) {
  if (finished_[b]) return;
  finished_[b] = true;
  if (comm_) {
    works_[b]->wait();
    if (done_[b]) done_[b]->wait();  // the timestamp is taken (and the slice stepped)
    in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), b));
  }
  const bool settled = SettledOnCompletion();
  if (!settled) SumIntoSlice(b);
  received_[b] = torch::Tensor();
  if (layout_.stage >= 2) layout_.bucket_grads[b] = torch::Tensor();
  if (ReplicateFollows()) return LaunchReplicate(b);
  if (!settled) Settle(b);
}

// Leaves bucket b's gradient slice holding the sum over the group, once its
// reduction is done: alltoall's received rows summed, or (whole-bucket
// all-reduce, stages 2 and 3) copied out of the bucket.
void GradientReductions::SumIntoSlice(size_t b) {
  torch::NoGradGuard no_grad;
  torch::Tensor& slice = layout_.slice_grads[b];
  if (alltoall_)
    torch::sum_out(slice, received_[b].view({layout_.world, -1}), std::vector<int64_t>{0});
  else if (layout_.stage >= 2 && !reduce_scatter_)
    slice.copy_(layout_.OwnSlice(layout_.bucket_grads[b], layout_.partition.buckets[b]));
}

// Bucket b's slice, summed over every rank, made the mean and, with
// --overlap-optimizer, stepped.
void GradientReductions::Settle(size_t b) {
  torch::NoGradGuard no_grad;
  if (comm_) layout_.slice_grads[b].div_(layout_.data_world);
  if (step_bucket_) step_bucket_(b);
}

// Bucket b's slice, summed over the group, summed across the replicas.
void GradientReductions::LaunchReplicate(size_t b) {
  const auto start = CommClock::now();
  auto cuda_start = CommTimeline::CudaStart(layout_.device.is_cuda(), layout_.device.index());
  std::vector<at::Tensor> tensors{layout_.slice_grads[b]};
  replicate_works_[b] = layout_.replicate->allreduce(tensors);
  std::function<void()> then;
  if (step_bucket_) then = [this, b] { Settle(b); };
  replicate_done_[b] = Track(replicate_works_[b], start, cuda_start, "replicate all-reduce", b, std::move(then));
}

// Every replicate all-reduce waited for, in the order they were started
// (the same on every rank), and each slice made the mean over all ranks
// (--overlap-optimizer: by its completion, which stepped it too).
void GradientReductions::FinishReplicas() {
  for (size_t b : layout_.launch_order) {
    if (!replicate_works_[b]) continue;
    replicate_works_[b]->wait();
    if (replicate_done_[b]) replicate_done_[b]->wait();
    if (!step_bucket_) Settle(b);
    replicate_works_[b] = {};
    replicate_done_[b] = {};
  }
}

}  // namespace ddpbench::sharded
