// See fused_norm_cudnn.h. cuDNN's legacy batch-norm API (deprecated in cuDNN 9
// but shipped, and what PyTorch's own cuDNN batch norm still calls) is the one
// that fuses the residual add and the ReLU into the persistent NHWC kernels;
// the graph API's successor needs cudnn-frontend, which the wheel lacks.
#include "models/fused_norm_cudnn.h"

#include <fmt/format.h>

#include <stdexcept>

#ifdef DDPBENCH_WITH_CUDNN
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <cudnn.h>

#include <stdexcept>
#include <torch/torch.h>
#endif

namespace ddpbench::cudnn_bn {

#ifdef DDPBENCH_WITH_CUDNN
namespace {

// The deprecated entry points are the point of this file.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

void Check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(fmt::format("cuDNN {}: {}", what, cudnnGetErrorString(status)));
}

// One cuDNN descriptor, destroyed with its owner.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct Desc {
  T d{};
  Desc() { Check(Create(&d), "create descriptor"); }
  ~Desc() { Destroy(d); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using ActDesc = Desc<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

std::optional<cudnnDataType_t> DataType(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return CUDNN_DATA_HALF;
    case at::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case at::kFloat: return CUDNN_DATA_FLOAT;
    default: return std::nullopt;
  }
}

// The descriptors of one call: activations (NHWC), the per-channel float
// tensors, and the ReLU.
struct Descs {
  TensorDesc act, channel;
  ActDesc relu;
  explicit Descs(const torch::Tensor& x, cudnnDataType_t type) {
    const int n = static_cast<int>(x.size(0)), c = static_cast<int>(x.size(1)),
              h = static_cast<int>(x.size(2)), w = static_cast<int>(x.size(3));
    Check(cudnnSetTensor4dDescriptor(act.d, CUDNN_TENSOR_NHWC, type, n, c, h, w), "activation descriptor");
    Check(cudnnSetTensor4dDescriptor(channel.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, c, 1, 1),
          "channel descriptor");
    Check(cudnnSetActivationDescriptor(relu.d, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
          "ReLU descriptor");
  }
};

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

cudnnHandle_t HandleOnCurrentStream() {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  Check(cudnnSetStream(handle, at::cuda::getCurrentCUDAStream()), "set stream");
  return handle;
}

// Why cuDNN cannot take these tensors, or "" when it may.
std::string Unservable(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& weight) {
  if (!x.is_cuda()) return "the tensors are not on a CUDA device";
  if (x.dim() != 4) return fmt::format("a {}-D input (cuDNN's fused kernels take 4-D)", x.dim());
  if (!DataType(x.scalar_type())) return fmt::format("{} activations", c10::toString(x.scalar_type()));
  if (!x.is_contiguous(at::MemoryFormat::ChannelsLast))
    return "activations not in channels_last (cuDNN fuses NHWC only: use --memory-format=channels_last)";
  if (weight.scalar_type() != at::kFloat) return fmt::format("{} norm weights", c10::toString(weight.scalar_type()));
  if (z.defined() && (z.scalar_type() != x.scalar_type() || z.sizes() != x.sizes()))
    return "a residual of another type or shape";
  return "";
}

// Why cuDNN itself refused a case (what RefusedBefore caches by its prefix).
std::string Refusal(cudnnStatus_t s, const torch::Tensor& x, bool has_z) {
  return fmt::format("cuDNN: {} for {} {}", cudnnGetErrorString(s), c10::toString(x.scalar_type()),
                     has_z ? "bn-add-relu" : "bn-relu");
}

}  // namespace

bool Available() { return true; }

std::optional<Forward> TryForward(const torch::Tensor& x, const torch::Tensor& z_in, const torch::Tensor& weight,
                                  const torch::Tensor& bias, torch::Tensor& running_mean,
                                  torch::Tensor& running_var, double factor, double eps, std::string& why) {
  why = Unservable(x, z_in, weight);
  if (!why.empty()) return std::nullopt;
  const torch::Tensor z = z_in.defined() ? z_in.contiguous(at::MemoryFormat::ChannelsLast) : z_in;
  const cudnnBatchNormOps_t ops = z.defined() ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  Descs d(x, *DataType(x.scalar_type()));
  cudnnHandle_t handle = HandleOnCurrentStream();
  size_t work_bytes = 0, reserve_bytes = 0;
  cudnnStatus_t s = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      handle, kMode, ops, d.act.d, z.defined() ? d.act.d : nullptr, d.act.d, d.channel.d, d.relu.d, &work_bytes);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, ops, d.relu.d, d.act.d, &reserve_bytes);
  if (s != CUDNN_STATUS_SUCCESS) {
    why = Refusal(s, x, z.defined());
    return std::nullopt;
  }
  Forward f;
  const auto bytes = x.options().dtype(at::kByte);
  const auto channels = weight.options();
  f.y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  f.save_mean = at::empty({x.size(1)}, channels);
  f.save_invvar = at::empty({x.size(1)}, channels);
  f.reserve = at::empty({static_cast<int64_t>(reserve_bytes)}, bytes);
  torch::Tensor work = at::empty({static_cast<int64_t>(work_bytes)}, bytes);
  const float one = 1.f, zero = 0.f;
  s = cudnnBatchNormalizationForwardTrainingEx(
      handle, kMode, ops, &one, &zero, d.act.d, x.data_ptr(), z.defined() ? d.act.d : nullptr,
      z.defined() ? z.data_ptr() : nullptr, d.act.d, f.y.data_ptr(), d.channel.d, weight.data_ptr(), bias.data_ptr(),
      factor, running_mean.data_ptr(), running_var.data_ptr(), eps, f.save_mean.data_ptr(), f.save_invvar.data_ptr(),
      d.relu.d, work.data_ptr(), work_bytes, f.reserve.data_ptr(), reserve_bytes);
  if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) {
    why = Refusal(s, x, z.defined());
    return std::nullopt;
  }
  Check(s, "fused batch-norm forward");
  return f;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> Backward(
    const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& dy_in, bool has_z, const torch::Tensor& weight,
    const torch::Tensor& bias, const Forward& saved, double eps) {
  const torch::Tensor dy = dy_in.contiguous(at::MemoryFormat::ChannelsLast);
  const cudnnBatchNormOps_t ops = has_z ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  Descs d(x, *DataType(x.scalar_type()));
  cudnnHandle_t handle = HandleOnCurrentStream();
  size_t work_bytes = 0;
  Check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, kMode, ops, d.act.d, d.act.d, d.act.d,
                                                          has_z ? d.act.d : nullptr, d.act.d, d.channel.d, d.relu.d,
                                                          &work_bytes),
        "fused batch-norm backward workspace");
  torch::Tensor work = at::empty({static_cast<int64_t>(work_bytes)}, x.options().dtype(at::kByte));
  torch::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  torch::Tensor dz = has_z ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : torch::Tensor();
  torch::Tensor dw = at::empty_like(weight), db = at::empty_like(weight);
  const float one = 1.f, zero = 0.f;
  Check(cudnnBatchNormalizationBackwardEx(
            handle, kMode, ops, &one, &zero, &one, &zero, d.act.d, x.data_ptr(), d.act.d, y.data_ptr(), d.act.d,
            dy.data_ptr(), has_z ? d.act.d : nullptr, has_z ? dz.data_ptr() : nullptr, d.act.d, dx.data_ptr(),
            d.channel.d, weight.data_ptr(), bias.data_ptr(), dw.data_ptr(), db.data_ptr(), eps,
            saved.save_mean.data_ptr(), saved.save_invvar.data_ptr(), d.relu.d, work.data_ptr(), work_bytes,
            saved.reserve.data_ptr(), static_cast<size_t>(saved.reserve.numel())),
        "fused batch-norm backward");
  return {dx, dz, dw, db};
}

#else

bool Available() { return false; }

std::optional<Forward> TryForward(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                  const torch::Tensor&, torch::Tensor&, torch::Tensor&, double, double,
                                  std::string& why) {
  why = "this ddpbench was built without cuDNN";
  return std::nullopt;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> Backward(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, bool, const torch::Tensor&,
    const torch::Tensor&, const Forward&, double) {
  throw std::logic_error("cuDNN batch-norm backward without cuDNN");
}

#endif

}  // namespace ddpbench::cudnn_bn
