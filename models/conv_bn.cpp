// See conv_bn.h. The statistics are the sums a convolution epilogue can
// produce in one pass (sum and sum of squares), so the variance is
// E[y^2] - E[y]^2 as the fused kernels compute it, not a second pass over
// the activations; in float64 the two agree to round-off.
#include "models/conv_bn.h"

#include <torch/torch.h>

#include <atomic>

namespace ddpbench {
namespace {
std::atomic<int64_t> g_calls{0};
}

ChannelStats GenStats(const torch::Tensor& y) {
  ChannelStats s;
  s.sum = y.sum({0, 2, 3});
  s.sum_sq = (y * y).sum({0, 2, 3});
  s.count = y.numel() / y.size(1);
  return s;
}

double CountBatchFactor(torch::nn::BatchNorm2dImpl& bn) {
  torch::NoGradGuard no_grad;
  bn.num_batches_tracked += 1;
  const auto& momentum = bn.options.momentum();
  return momentum.has_value() ? *momentum : 1.0 / bn.num_batches_tracked.item<double>();
}

namespace {

ScaleShift Fold(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& mean, const torch::Tensor& var) {
  const double eps = bn.options.eps();
  torch::Tensor invstd = (var + eps).rsqrt();
  if (!bn.options.affine()) return {invstd, -mean * invstd};
  torch::Tensor scale = bn.weight * invstd;
  return {scale, bn.bias - mean * scale};
}

}  // namespace

ScaleShift BnFinalize(torch::nn::BatchNorm2dImpl& bn, const ChannelStats& stats) {
  const bool tracked = bn.options.track_running_stats();
  if (!bn.is_training() && tracked) return Fold(bn, bn.running_mean, bn.running_var);
  TORCH_CHECK(stats.count > 1, "conv-bn: BatchNorm needs more than one value per channel in training, got ",
              stats.count);
  torch::Tensor mean = stats.sum / static_cast<double>(stats.count);
  torch::Tensor var = stats.sum_sq / static_cast<double>(stats.count) - mean * mean;
  if (tracked) {
    const double factor = CountBatchFactor(bn);
    const double unbias = static_cast<double>(stats.count) / static_cast<double>(stats.count - 1);
    torch::NoGradGuard no_grad;
    bn.running_mean.mul_(1.0 - factor).add_(mean.detach(), factor);
    bn.running_var.mul_(1.0 - factor).add_(var.detach() * unbias, factor);
  }
  return Fold(bn, mean, var);
}

torch::Tensor ApplyScaleShift(const torch::Tensor& y, const ScaleShift& ss, const torch::Tensor& z, bool relu) {
  const auto channel = [](const torch::Tensor& t) { return t.view({1, -1, 1, 1}); };
  torch::Tensor out = y * channel(ss.scale) + channel(ss.shift);
  if (z.defined()) out.add_(z);
  if (relu) out.relu_();
  return out;
}

torch::Tensor ConvBnAct(torch::nn::Conv2dImpl& conv, torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                        const torch::Tensor& z, bool relu) {
  ++g_calls;
  torch::Tensor y = conv.forward(x);
  return ApplyScaleShift(y, BnFinalize(bn, GenStats(y)), z, relu);
}

int64_t ConvBnCalls() { return g_calls.load(); }
void ResetConvBnCalls() { g_calls = 0; }

}  // namespace ddpbench
