// The cuDNN half of the fused BatchNorm(+add)+ReLU (fused_norm.h): the only
// place that includes cuDNN's headers, compiled to refusals when the build has
// no cuDNN. Internal to models/.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

namespace ddpbench::cudnn_bn {

struct Forward {
  torch::Tensor y, save_mean, save_invvar, reserve;
};

bool Available();

// y = relu(bn(x) + z) with cuDNN's CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION (or
// BN_ACTIVATION when z is undefined) in persistent NHWC mode, updating the
// running statistics with `factor`. nullopt with `why` set when cuDNN does
// not serve this case; nothing has been written then.
std::optional<Forward> TryForward(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& weight,
                                  const torch::Tensor& bias, torch::Tensor& running_mean,
                                  torch::Tensor& running_var, double factor, double eps, std::string& why);

// Gradients of x, z (undefined without z), weight and bias.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> Backward(
    const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& dy, bool has_z, const torch::Tensor& weight,
    const torch::Tensor& bias, const Forward& saved, double eps);

}  // namespace ddpbench::cudnn_bn
