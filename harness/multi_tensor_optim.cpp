// See multi_tensor_optim.h. Parameters are grouped by (device, dtype), as
// torch.optim's _group_tensors_by_device_and_dtype does, because each fused or
// foreach call takes tensors of one device and one dtype.
#include "harness/multi_tensor_optim.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace ddpbench {

using torch::Tensor;

std::vector<std::vector<Tensor>> detail::GroupWithGrads(const std::vector<Tensor>& params) {
  std::map<std::tuple<int, int, int>, size_t> index;  // (device type, device index, dtype)
  std::vector<std::vector<Tensor>> groups;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    auto key = std::make_tuple(static_cast<int>(p.device().type()), static_cast<int>(p.device().index()),
                               static_cast<int>(p.scalar_type()));
    auto [it, added] = index.emplace(key, groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(p);
  }
  return groups;
}

namespace {

std::vector<Tensor> Grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  return grads;
}

}  // namespace

OptimizerKernels ParseOptimizerKernels(const std::string& name) {
  if (name == "per-param") return OptimizerKernels::kPerParam;
  if (name == "foreach") return OptimizerKernels::kForeach;
  if (name == "fused") return OptimizerKernels::kFused;
  throw std::invalid_argument("--optimizer-impl=" + name + ": accepted values: per-param|foreach|fused");
}

// ---------------------------------------------------------------- SGD

MultiTensorSGD::MultiTensorSGD(std::vector<Tensor> params, const torch::optim::SGDOptions& options,
                               OptimizerKernels kernels)
    : MultiTensorOptimizer(std::move(params), options, kernels) {
  if (options.nesterov() || options.dampening() != 0)
    throw std::invalid_argument("multi-tensor SGD: nesterov and dampening are not supported");
}

void MultiTensorSGD::Update(const torch::optim::SGDOptions& o, std::vector<Tensor>& params,
                            const std::optional<Tensor>& found_inf) {
  std::vector<Tensor> grads = Grads(params), bufs;
  bool first = false;
  if (o.momentum() != 0) {
    for (auto& p : params) {
      auto& slot = state_[p.unsafeGetTensorImpl()];
      if (!slot) {
        first = true;
        auto st = std::make_unique<torch::optim::SGDParamState>();
        st->momentum_buffer(torch::empty_like(p));
        slot = std::move(st);
      }
      bufs.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
    }
  }
  if (kernels_ == OptimizerKernels::kFused) {
    at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                    /*maximize=*/false, first, /*grad_scale=*/std::nullopt, found_inf);
    return;
  }
  if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
  if (o.momentum() != 0) {
    if (first) {
      for (size_t i = 0; i < bufs.size(); ++i) bufs[i].copy_(grads[i]);
    } else {
      at::_foreach_mul_(bufs, o.momentum());
      at::_foreach_add_(bufs, grads, 1 - o.dampening());
    }
    grads = bufs;
  }
  at::_foreach_add_(params, grads, -o.lr());
}

// ---------------------------------------------------------------- Adam

MultiTensorAdam::MultiTensorAdam(std::vector<Tensor> params, const torch::optim::AdamOptions& options,
                                 OptimizerKernels kernels)
    : MultiTensorOptimizer(std::move(params), options, kernels) {
  if (options.amsgrad()) throw std::invalid_argument("multi-tensor Adam: amsgrad is not supported");
}

Tensor MultiTensorAdam::FusedStep(const Tensor& param) const {
  auto it = step_tensors_.find(param.unsafeGetTensorImpl());
  return it == step_tensors_.end() ? Tensor() : it->second;
}

void MultiTensorAdam::SetFusedStep(const Tensor& param, Tensor step) {
  step_tensors_[param.unsafeGetTensorImpl()] = std::move(step);
}

void MultiTensorAdam::Update(const torch::optim::AdamOptions& o, std::vector<Tensor>& params,
                             const std::optional<Tensor>& found_inf) {
  std::vector<Tensor> grads = Grads(params), avgs, sqs, steps;
  int64_t step = 0;
  for (auto& p : params) {
    auto& slot = state_[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto st = std::make_unique<torch::optim::AdamParamState>();
      st->exp_avg(torch::zeros_like(p));
      st->exp_avg_sq(torch::zeros_like(p));
      slot = std::move(st);
    }
    auto& st = static_cast<torch::optim::AdamParamState&>(*slot);
    st.step(st.step() + 1);  // host count: the foreach path's bias correction
    step = st.step();
    avgs.push_back(st.exp_avg());
    sqs.push_back(st.exp_avg_sq());
  }
  const auto [beta1, beta2] = o.betas();
  if (kernels_ == OptimizerKernels::kFused) {
    // The fused kernel reads the step count from a device tensor per parameter.
    for (auto& p : params) {
      auto& t = step_tensors_[p.unsafeGetTensorImpl()];
      if (!t.defined()) t = torch::zeros({}, p.options().dtype(torch::kFloat));
      steps.push_back(t);
    }
    at::_foreach_add_(steps, 1);
    at::_fused_adam_(params, grads, avgs, sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(), beta1, beta2,
                     o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false, std::nullopt, found_inf);
    if (found_inf) at::_foreach_add_(steps, found_inf->reshape({}), -1);  // a skipped step does not count
    return;
  }
  const double bias1 = 1 - std::pow(beta1, step), bias2 = 1 - std::pow(beta2, step);
  if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
  at::_foreach_mul_(avgs, beta1);
  at::_foreach_add_(avgs, grads, 1 - beta1);
  at::_foreach_mul_(sqs, beta2);
  at::_foreach_addcmul_(sqs, grads, grads, 1 - beta2);
  auto denom = at::_foreach_sqrt(sqs);
  at::_foreach_div_(denom, std::sqrt(bias2));
  at::_foreach_add_(denom, o.eps());
  at::_foreach_addcdiv_(params, avgs, denom, -o.lr() / bias1);
}

}  // namespace ddpbench
