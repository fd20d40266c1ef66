// The optimizer stepped a part at a time, as each part's gradients become
// final (--overlap-optimizer): ddp steps a bucket's parameters from the
// completion of that bucket's all-reduce, the sharded strategies this rank's slice of
// a bucket from the completion of its reduce-scatter (or all-reduce), on the
// thread that completed it, while backward goes on computing the other
// buckets' gradients. Each
// parameter's update is the one the whole optimizer's step() gives it (the
// per-parameter state, the same options), so the maths is unchanged; it
// needs an optimizer whose update of a parameter reads nothing of the others
// (SGD, Adam: no norm over the whole model).
#pragma once

#include <torch/torch.h>

#include <mutex>
#include <vector>

namespace ddpbench {

class PartialStepper {
 public:
  // `optimizer` (one param group) outlives this object.
  explicit PartialStepper(torch::optim::Optimizer& optimizer);

  // Steps `params` with `grads` (grads[i] the final gradient of params[i],
  // e.g. a view into a reduced bucket) as optimizer.step() would step them;
  // each parameter's own .grad is left as it was. Thread-safe: parts may
  // complete on several communication threads at once.
  void Step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads);

 private:
  torch::optim::Optimizer& optimizer_;
  std::mutex mutex_;
};

}  // namespace ddpbench
