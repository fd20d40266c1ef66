// SGD (momentum, weight decay) and Adam that update every parameter of a
// device in a few kernels instead of several per parameter: ATen's fused
// kernels (_fused_sgd_, _fused_adam_; what torch.optim's fused=True calls) or
// its multi-tensor _foreach_* ops (foreach=True). A ResNet-50 has 161
// parameter tensors, so on a GPU the per-parameter loop is launch-bound.
// The maths is torch::optim::SGD's / Adam's (tests compare them in float64);
// state lives in the same SGDParamState / AdamParamState objects, so state
// accounting works unchanged.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddpbench {

enum class OptimizerKernels { kPerParam, kForeach, kFused };
OptimizerKernels ParseOptimizerKernels(const std::string& name);  // per-param|foreach|fused

// An optimizer that can skip its update on the device when `found_inf` is
// non-zero (fp16 loss scaling) without the host reading the flag.
class DeviceSkippingOptimizer {
 public:
  virtual ~DeviceSkippingOptimizer() = default;
  // False when this optimizer cannot (the caller then reads found_inf).
  virtual bool StepUnlessInf(const torch::Tensor& found_inf) = 0;
};

namespace detail {
// Parameters with a gradient, grouped by (device, dtype) in first-seen order.
std::vector<std::vector<torch::Tensor>> GroupWithGrads(const std::vector<torch::Tensor>& params);
}  // namespace detail

// What SGD and Adam share: one param group, step() over (device, dtype)
// groups, and the fused kernels' on-device skip. Each says only Update().
template <typename Options>
class MultiTensorOptimizer : public torch::optim::Optimizer, public DeviceSkippingOptimizer {
 public:
  MultiTensorOptimizer(std::vector<torch::Tensor> params, const Options& options, OptimizerKernels kernels)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))}, std::make_unique<Options>(options)),
        kernels_(kernels) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    torch::Tensor loss = closure ? closure() : torch::Tensor();
    StepAll(std::nullopt);
    return loss;
  }
  bool StepUnlessInf(const torch::Tensor& found_inf) override {
    if (kernels_ != OptimizerKernels::kFused) return false;
    torch::NoGradGuard no_grad;
    StepAll(found_inf);
    return true;
  }

 protected:
  virtual void Update(const Options& o, std::vector<torch::Tensor>& params,
                      const std::optional<torch::Tensor>& found_inf) = 0;
  const OptimizerKernels kernels_;

 private:
  void StepAll(const std::optional<torch::Tensor>& found_inf) {
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const Options&>(group.options());
      for (auto& params : detail::GroupWithGrads(group.params())) {
        std::optional<torch::Tensor> inf;
        if (found_inf) inf = found_inf->to(params.front().device());
        Update(o, params, inf);
      }
    }
  }
};

class MultiTensorSGD final : public MultiTensorOptimizer<torch::optim::SGDOptions> {
 public:
  MultiTensorSGD(std::vector<torch::Tensor> params, const torch::optim::SGDOptions& options,
                 OptimizerKernels kernels);

 private:
  void Update(const torch::optim::SGDOptions& o, std::vector<torch::Tensor>& params,
              const std::optional<torch::Tensor>& found_inf) override;
};

class MultiTensorAdam final : public MultiTensorOptimizer<torch::optim::AdamOptions> {
 public:
  MultiTensorAdam(std::vector<torch::Tensor> params, const torch::optim::AdamOptions& options,
                  OptimizerKernels kernels);
  bool fused() const { return kernels_ == OptimizerKernels::kFused; }
  // The fused kernel's device step count of `param` (undefined before its
  // first fused step), which a snapshot saves and a resume puts back.
  torch::Tensor FusedStep(const torch::Tensor& param) const;
  void SetFusedStep(const torch::Tensor& param, torch::Tensor step);

 private:
  void Update(const torch::optim::AdamOptions& o, std::vector<torch::Tensor>& params,
              const std::optional<torch::Tensor>& found_inf) override;
  std::map<void*, torch::Tensor> step_tensors_;  // fused: per-parameter step counts on the device
};

}  // namespace ddpbench
