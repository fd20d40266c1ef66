// Activation recompute (--recompute): a unit marked for it keeps only its
// input from the forward pass and runs its forward again inside its
// backward, so that the activations inside it live only while its own
// backward runs. The unit's parameters are inputs of the recomputing node,
// so their gradients reach the same accumulators (and the strategies'
// gradient-ready hooks) as without recompute. The recomputed forward leaves
// the unit's buffers (BatchNorm's running statistics) as the first forward
// left them: they are updated once per forward, as without recompute, and
// the result is bit for bit the same. It runs under the autocast state of
// the first forward.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

namespace ddpbench {

// A unit of the model that may be recomputed: its forward is Forward(), its
// computation Run().
class Recomputable {
 public:
  virtual ~Recomputable() = default;
  virtual torch::Tensor Run(torch::Tensor x) = 0;
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

 protected:
  // Run(x), recomputed in backward when marked and a graph is being built
  // (training, grad mode on); `self` is the unit (its parameters and buffers).
  torch::Tensor Forward(torch::nn::Module& self, const torch::Tensor& x);

 private:
  bool recompute_ = false;
};

}  // namespace ddpbench
