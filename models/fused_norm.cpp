// See fused_norm.h. One autograd node for relu(bn(x) + z): the forward keeps
// x, the output and the batch statistics; the backward masks the incoming
// gradient by the output's sign once, hands that to z, and takes batch norm's
// backward of it. cuDNN does all of it in its own kernels where it can.
#include "models/fused_norm.h"

#include <torch/torch.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "models/conv_bn.h"
#include "models/fused_norm_cudnn.h"

namespace ddpbench {
namespace {

std::atomic<int64_t> g_cudnn_calls{0}, g_aten_calls{0};
std::mutex g_why_mutex;
std::string g_why_aten;

// Cases cuDNN itself refused (by data type, with or without the residual),
// with its reason: not asked again in this process.
std::mutex g_refused_mutex;
std::map<std::pair<int, bool>, std::string> g_refused;

std::optional<std::string> RefusedBefore(const torch::Tensor& x, bool has_z) {
  std::lock_guard<std::mutex> lock(g_refused_mutex);
  auto it = g_refused.find({static_cast<int>(x.scalar_type()), has_z});
  return it == g_refused.end() ? std::nullopt : std::optional<std::string>(it->second);
}

void NoteRefused(const torch::Tensor& x, bool has_z, const std::string& why) {
  if (why.rfind("cuDNN:", 0) != 0) return;  // a tensor's layout or device, not the case
  std::lock_guard<std::mutex> lock(g_refused_mutex);
  g_refused[{static_cast<int>(x.scalar_type()), has_z}] = why;
}

void NoteAten(const std::string& why) {
  ++g_aten_calls;
  std::lock_guard<std::mutex> lock(g_why_mutex);
  if (g_why_aten.empty()) g_why_aten = why;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class BatchNormAddReluFn : public torch::autograd::Function<BatchNormAddReluFn> {
 public:
  // running_mean/var are updated in place (they are buffers, not inputs of
  // the gradient); `factor` is the exponential average factor of this call.
  // A custom function's tensor inputs must all be defined: without a
  // residual `z_or_x` is x again and `has_z` false (its gradient slot stays
  // empty).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& z_or_x, bool has_z,
                               const torch::Tensor& weight, const torch::Tensor& bias, torch::Tensor running_mean,
                               torch::Tensor running_var, double factor, double eps) {
    const torch::Tensor z = has_z ? z_or_x : torch::Tensor();
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["has_z"] = has_z;
    std::string why;
    if (auto refused = RefusedBefore(x, z.defined())) {
      why = *refused;
    } else if (auto f = cudnn_bn::TryForward(x, z, weight, bias, running_mean, running_var, factor, eps, why)) {
      ++g_cudnn_calls;
      ctx->saved_data["cudnn"] = true;
      ctx->save_for_backward({x, f->y, weight, bias, f->save_mean, f->save_invvar, f->reserve});
      return f->y;
    } else {
      NoteRefused(x, z.defined(), why);
    }
    NoteAten(why);
    ctx->saved_data["cudnn"] = false;
    auto [y, mean, invstd] = at::native_batch_norm(x, weight, bias, running_mean, running_var, /*training=*/true,
                                                    factor, eps);
    if (z.defined()) y.add_(z);
    y.relu_();
    ctx->save_for_backward({x, y, weight, running_mean, running_var, mean, invstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool has_z = ctx->saved_data["has_z"].toBool();
    torch::Tensor dx, dz, dw, db;
    if (ctx->saved_data["cudnn"].toBool()) {
      cudnn_bn::Forward saved{s[1], s[4], s[5], s[6]};
      std::tie(dx, dz, dw, db) = cudnn_bn::Backward(s[0], s[1], grads[0], has_z, s[2], s[3], saved, eps);
    } else {
      // ReLU's backward (as PyTorch's: the gradient where the output is
      // positive), which is also the residual's gradient.
      torch::Tensor g = at::threshold_backward(grads[0], s[1], 0);
      std::tie(dx, dw, db) = at::native_batch_norm_backward(g, s[0], s[2], s[3], s[4], s[5], s[6],
                                                            /*train=*/true, eps, {true, true, true});
      if (has_z) dz = g;
    }
    return {dx, dz, torch::Tensor(), dw, db, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor BatchNormAddRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& z) {
  const auto& o = bn.options;
  if (!bn.is_training() || !o.track_running_stats() || !o.affine()) {
    torch::Tensor y = bn.forward(x);
    return z.defined() ? y.add_(z).relu_() : y.relu_();
  }
  const double factor = CountBatchFactor(bn);
  return BatchNormAddReluFn::apply(x, z.defined() ? z : x, z.defined(), bn.weight, bn.bias, bn.running_mean, bn.running_var, factor, o.eps());
}

FusedNormUse FusedNormUsage() {
  FusedNormUse u;
  u.cudnn_calls = g_cudnn_calls.load();
  u.aten_calls = g_aten_calls.load();
  std::lock_guard<std::mutex> lock(g_why_mutex);
  u.why_aten = g_why_aten;
  return u;
}

void ResetFusedNormUsage() {
  g_cudnn_calls = 0;
  g_aten_calls = 0;
  std::lock_guard<std::mutex> lock(g_why_mutex);
  g_why_aten.clear();
}

bool FusedNormHasCudnn() { return cudnn_bn::Available(); }

}  // namespace ddpbench
