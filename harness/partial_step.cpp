// PartialStepper (partial_step.h): the optimizer's one param group narrowed
// to the part for the length of one step(), with the part's gradients lent to
// its parameters; the per-parameter state, keyed by the parameter, is the
// whole optimizer's.
#include "harness/partial_step.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace ddpbench {

PartialStepper::PartialStepper(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
  if (optimizer.param_groups().size() != 1)
    throw std::invalid_argument(fmt::format("stepping an optimizer a part at a time needs one param group, not {}",
                                            optimizer.param_groups().size()));
}

namespace {

// Puts back the group's parameters and each parameter's own gradient, also
// when step() throws.
struct Lent {
  std::vector<torch::Tensor>& group;
  std::vector<torch::Tensor> all;
  const std::vector<torch::Tensor>& params;
  std::vector<torch::Tensor> own;
  ~Lent() {
    group = std::move(all);
    for (size_t i = 0; i < own.size(); ++i) params[i].mutable_grad() = own[i];
  }
};

}  // namespace

void PartialStepper::Step(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) {
  TORCH_CHECK(params.size() == grads.size(), "PartialStepper: ", params.size(), " parameters, ", grads.size(),
              " gradients");
  std::lock_guard<std::mutex> lock(mutex_);
  auto& group = optimizer_.param_groups().front().params();
  Lent lent{group, std::exchange(group, params), params, {}};
  for (size_t i = 0; i < params.size(); ++i) {
    lent.own.push_back(params[i].grad());
    params[i].mutable_grad() = grads[i];
  }
  optimizer_.step();
}

}  // namespace ddpbench
