// The backward of a pipeline stage cut in two, for zero-bubble schedules
// (Qi et al., ICLR 2024): B, the gradient of the stage input, which the stage
// before waits for, and W, the parameter gradients, which can wait and fill
// the pipeline's bubbles. LibTorch computes both in one autograd pass; here
// the graph is cut at the nodes that take parameters. B runs the graph from
// the output down to the input only (those nodes skip their weight
// gradients) and keeps the gradient that arrived at each of them; W runs just
// those nodes again from the kept gradients, down to the parameters. The two
// do the work of one backward and add the same gradients to .grad. The one
// exception: a normalisation layer's parameter gradients are sums its input
// gradient needs anyway, so B computes them with it and W only adds them.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

namespace ddpbench {

// What W needs from B: the graph, and the gradient kept at each node that
// takes parameters. Dropping it frees the micro-batch's activations.
struct WeightGradWork;

struct BackwardInputResult {
  torch::Tensor input_grad;               // undefined when the input needs none
  std::shared_ptr<WeightGradWork> weight;  // for BackwardWeight
};

// B. `grad` is the gradient of `output` (undefined: a scalar output's 1).
// When `input` does not require grad (the first stage), B computes nothing
// and W is the whole backward.
BackwardInputResult BackwardInput(const torch::Tensor& output, const torch::Tensor& grad, const torch::Tensor& input,
                                  const std::vector<torch::Tensor>& params);

// W: accumulates the parameter gradients into .grad and releases the graph.
void BackwardWeight(WeightGradWork& work);

// W one piece at a time, so that a device can fill a short wait with it and
// stop when its input arrives: the next node's parameter gradients (a first
// stage's whole backward at once). True once W is complete (the normalisation
// gradients added and the graph released); BackwardWeight then does nothing.
// The parameters' .grad receive the same sums in the same order as from
// BackwardWeight.
bool BackwardWeightStep(WeightGradWork& work);

}  // namespace ddpbench
