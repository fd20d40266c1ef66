// The sharded strategies' gradient reductions. A post-hook on each
// parameter's AccumulateGrad (the hook c10d::Reducer uses) counts the
// bucket's ready gradients and, once the bucket is complete, starts its
// reduction asynchronously, in one order on every rank, so it overlaps the
// rest of backward. Stage 1: .grad are views of one flat gradient buffer, so
// autograd accumulates straight into the buckets. Stages 2 and 3: each
// gradient is copied into its bucket's buffer as it is produced and .grad
// dropped; the bucket is reduced into this rank's gradient shard and its
// buffer given back; at most kReductionsInFlight buffers wait for their
// reduction while another fills.
//
// Reduction (--zero-reduce): reduce-scatter gives each owner the sum of its
// slice only. NCCL has it natively. Gloo has none: c10d emulates it by
// cloning the bucket and all-reducing the clone, so here it is an alltoall of
// the bucket's slices (each rank receives every rank's copy of its own slice)
// followed by a local sum, which moves (N-1)/N of the bucket per rank as a
// ring reduce-scatter does, half of an all-reduce's bytes. all-reduce reduces
// whole buckets, as torch's ZeroRedundancyOptimizer under DDP does, and each
// rank then uses its slice. With --replicate-degree the gathers and the
// reduce-scatter stay inside the rank's shard group and each reduced slice
// is then all-reduced across the group's replicas (HSDP), started as the
// slice is ready so it overlaps what is left of backward; all-reduce mode
// reduces whole buckets over every rank, as does a shard group of one rank
// (its reduce-scatter would be a copy, its slice the whole bucket).
//
// --overlap-optimizer: a bucket's slice is stepped (the strategy's
// `step_bucket`, a PartialStepper) as soon as its last reduction completes,
// on the thread that completed it (the group's, or with replicas the
// replicate all-reduce's), while backward goes on computing the earlier
// layers' gradients; Backward returns once every slice is reduced and stepped.
// The bucket's parameters are no longer read by the rest of backward: every
// node using them has run once all their gradients are in.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/types.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "strategies/data/data_parallel.h"
#include "strategies/sharded/gathers.h"
#include "strategies/sharded/layout.h"

namespace ddpbench {

struct DistContext;
class PhaseTimer;
class LossScaler;

namespace sharded {

class GradientReductions {
 public:
  // Registers the gradient hooks (this object must not move afterwards).
  // `step_bucket` (may be empty): steps bucket b's slice once its gradient
  // slice holds the mean over ranks; called on a communication thread, so it
  // must be thread-safe.
  GradientReductions(Layout& layout, ParameterGathers& gathers, DistContext* dist, PhaseTimer& timer,
                     bool reduce_scatter, std::function<void(size_t)> step_bucket = {});
  GradientReductions(const GradientReductions&) = delete;
  GradientReductions& operator=(const GradientReductions&) = delete;

  // A step's counts and reductions reset.
  void BeginStep();
  // The loss's backward (scaled by `scaler`), every bucket's reduction
  // started as its gradients complete and finished at the end: this rank's
  // gradient slices then hold the mean over ranks.
  void Backward(const torch::Tensor& loss, LossScaler& scaler);
  // The share of the reduction hidden behind backward over the timed steps
  // (-1: not measured).
  double HiddenFraction(size_t warmup) const { return overlap_.HiddenFraction(warmup); }

 private:
  void GradReady(size_t i);
  void StageGradient(size_t i);
  torch::Tensor& BucketBuffer(size_t b);
  void LaunchReady();
  void Launch(size_t b);
  c10::intrusive_ptr<c10::ivalue::Future> Track(const c10::intrusive_ptr<c10d::Work>& work, CommClock::time_point start,
                                                std::shared_ptr<CudaMark> cuda_start, const char* op,
                                                size_t b, std::function<void()> then = {});
  void FinishReduction(size_t b);
  void SumIntoSlice(size_t b);
  void Settle(size_t b);
  // With replicas a reduce-scattered slice is all-reduced across them after.
  bool ReplicateFollows() const { return reduce_scatter_ && layout_.replicate; }
  // --overlap-optimizer: the group reduction's completion settles and steps the slice.
  bool SettledOnCompletion() const { return step_bucket_ && comm_ && !ReplicateFollows(); }
  void LaunchReplicate(size_t b);
  void FinishReplicas();

  Layout& layout_;
  ParameterGathers& gathers_;
  DistContext* dist_;
  PhaseTimer& timer_;
  // Whether gradients are reduced over other ranks at all; by reduce-scatter
  // in the shard group (else whole buckets over every rank); by alltoall.
  // Each implies the one before it.
  const bool comm_, reduce_scatter_, alltoall_;
  const std::function<void(size_t)> step_bucket_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  // Per step: gradients still missing per bucket, the next bucket to launch,
  // its work, timestamping future and (alltoall) received rows, whether it is
  // finished, and the launched but unfinished ones in launch order.
  std::vector<int64_t> expected_, remaining_;
  size_t next_launch_ = 0;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> done_;
  std::vector<torch::Tensor> received_;
  std::vector<bool> finished_;
  // With replicas: each bucket's all-reduce of its slice across them, under way.
  std::vector<c10::intrusive_ptr<c10d::Work>> replicate_works_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> replicate_done_;
  std::deque<size_t> in_flight_;
  std::shared_ptr<CommTimeline> timeline_;
  OverlapStats overlap_;
};

}  // namespace sharded
}  // namespace ddpbench
