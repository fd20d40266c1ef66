// The recomputing autograd node behind --recompute (recompute.h).
#include "models/recompute.h"

#include "models/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ddpbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class RecomputeNode : public torch::autograd::Function<RecomputeNode> {
 public:
  // `unit` and `module` are the same unit (Recomputable* and Module*, as
  // integers: the node's saved data; the unit outlives the step's graph, as
  // its parameters do).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList params,
                               int64_t unit, int64_t module) {
    ctx->save_for_backward({x});
    // The forward's autocast state, put back around the recomputed forward
    // (backward runs on autograd's thread, where autocast is off).
    const at::DeviceType type = x.device().type();
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["module"] = module;
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(type);
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(at::autocast::get_autocast_dtype(type));
    // With a graph, as the recomputation will run it (the same kernels, so
    // the same bits), dropped as soon as the output is taken.
    torch::AutoGradMode grad(true);
    return reinterpret_cast<Recomputable*>(unit)->Run(x.detach().requires_grad_(x.requires_grad())).detach();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* unit = reinterpret_cast<Recomputable*>(ctx->saved_data["unit"].toInt());
    auto* module = reinterpret_cast<torch::nn::Module*>(ctx->saved_data["module"].toInt());
    const torch::Tensor saved = ctx->get_saved_variables().front();
    const std::optional<at::ScalarType> autocast =
        ctx->saved_data["autocast"].toBool()
            ? std::optional<at::ScalarType>(static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()))
            : std::nullopt;
    const bool input_grad = saved.requires_grad();
    torch::Tensor x = saved.detach().requires_grad_(input_grad);
    std::vector<torch::Tensor> buffers;  // as the first forward left them
    for (const auto& b : module->buffers()) buffers.push_back(b.clone());
    torch::Tensor y;
    {
      torch::AutoGradMode grad(true);
      const ScopedAutocast restored(saved.device().type(), autocast);
      y = unit->Run(x);
    }
    variable_list inputs;
    if (input_grad) inputs.push_back(x);
    const std::vector<torch::Tensor> params = module->parameters();
    for (const auto& p : params)
      if (p.requires_grad()) inputs.push_back(p);
    const variable_list grads =
        torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    {  // after the gradients: the recomputed graph saved the buffers it updated
      torch::NoGradGuard no_grad;
      size_t i = 0;
      for (auto& b : module->buffers()) b.copy_(buffers[i++]);
    }
    variable_list out{input_grad ? grads[0] : torch::Tensor()};
    size_t k = input_grad ? 1 : 0;
    for (const auto& p : params) out.push_back(p.requires_grad() ? grads[k++] : torch::Tensor());
    out.push_back(torch::Tensor());  // unit
    out.push_back(torch::Tensor());  // module
    return out;
  }
};

}  // namespace

torch::Tensor Recomputable::Forward(torch::nn::Module& self, const torch::Tensor& x) {
  if (!recompute_ || !self.is_training() || !torch::GradMode::is_enabled()) return Run(x);
  const std::vector<torch::Tensor> params = self.parameters();  // inputs, so that their gradients flow out
  return RecomputeNode::apply(x, at::TensorList(params), reinterpret_cast<int64_t>(this),
                              reinterpret_cast<int64_t>(&self));
}

}  // namespace ddpbench
