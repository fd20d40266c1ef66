// Fused BatchNorm (+ residual add) + ReLU, the ResNet blocks' epilogue under
// --fuse=bn-add-relu: relu(bn(x) + z) as one autograd node whose backward gives
// the gradients of x, z, the weight and the bias together. On CUDA it calls
// cuDNN's persistent NHWC kernels (one pass over the activations in each
// direction instead of three); wherever cuDNN refuses a case (a data type, a
// layout, a CPU tensor) the same node runs ATen's batch-norm kernels, which is
// also the float64 reference that the tests compare against the unfused model.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace torch::nn {
class BatchNorm2dImpl;
}

namespace ddpbench {

// relu(bn(x) + z), or relu(bn(x)) when z is undefined. In training mode the
// batch statistics normalise and the running statistics (and
// num_batches_tracked) move exactly as torch::nn::BatchNorm2d moves them; in
// eval mode it is the unfused expression with the running statistics.
torch::Tensor BatchNormAddRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& z);

// Which implementation served the fused calls of this process so far: the
// row's `fuse` column says so, and why cuDNN was passed over when it was.
struct FusedNormUse {
  int64_t cudnn_calls = 0, aten_calls = 0;
  std::string why_aten;  // the first reason cuDNN was not used ("" if it always was)
};
FusedNormUse FusedNormUsage();
void ResetFusedNormUsage();

// Whether this build can call cuDNN's fused kernels at all (CUDA LibTorch and
// cuDNN's headers found at configure time).
bool FusedNormHasCudnn();

}  // namespace ddpbench
