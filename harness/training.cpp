#include "harness/training.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "base/config.h"
#include "harness/multi_tensor_optim.h"

namespace ddpbench {

ResNet BuildModel(const ResNetOptions& options, uint64_t seed, torch::Device device) {
  torch::manual_seed(seed);
  ResNet model(options);
  if (options.dtype != torch::kFloat) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.set_data(p.data().to(options.dtype));
    for (auto& b : model->buffers())
      if (b.is_floating_point()) b.set_data(b.data().to(options.dtype));
  }
  model->to(device);
  if (options.channels_last) {
    torch::NoGradGuard no_grad;
    // A fresh channels_last copy rather than contiguous(ChannelsLast): a 1x1
    // kernel counts as channels_last with its contiguous strides, but the
    // gradients convolution hands back carry real NHWC strides, and a
    // mismatch makes autograd (and DDP's bucket copy) re-stride every step.
    for (auto& p : model->parameters())
      if (p.dim() == 4)
        p.set_data(at::empty_like(p.data(), at::MemoryFormat::ChannelsLast).copy_(p.data()));
  }
  return model;
}

std::string ResolveOptimizerImpl(const RunConfig& config, torch::Device device) {
  if (config.optimizer_impl != "auto") return config.optimizer_impl;
  return device.is_cuda() ? "fused" : "per-param";
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const RunConfig& config,
                                                       std::vector<torch::Tensor> params, double lr) {
  const std::string impl =
      ResolveOptimizerImpl(config, params.empty() ? torch::Device(torch::kCPU) : params.front().device());
  if (impl != "per-param") {
    const OptimizerKernels kernels = ParseOptimizerKernels(impl);
    if (config.optimizer == "adam")
      return std::make_unique<MultiTensorAdam>(
          std::move(params), torch::optim::AdamOptions(lr).weight_decay(config.weight_decay), kernels);
    return std::make_unique<MultiTensorSGD>(
        std::move(params),
        torch::optim::SGDOptions(lr).momentum(config.momentum).weight_decay(config.weight_decay), kernels);
  }
  if (config.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        std::move(params), torch::optim::AdamOptions(lr).weight_decay(config.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      std::move(params),
      torch::optim::SGDOptions(lr).momentum(config.momentum).weight_decay(config.weight_decay));
}

double OptimizerStateMb(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) bytes += t.numel() * t.element_size();
  };
  for (auto& [key, state] : optimizer.state()) {
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      add(sgd->momentum_buffer());
    } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      add(adam->exp_avg());
      add(adam->exp_avg_sq());
      add(adam->max_exp_avg_sq());
    }
  }
  return bytes / (1024.0 * 1024.0);
}

torch::Tensor PredictLogits(ResNet& model, const std::string& amp, torch::Device device,
                            const torch::Tensor& images) {
  torch::NoGradGuard no_grad;
  model->eval();
  AutocastGuard autocast(amp, device);
  auto logits = model->forward(images.to(device));
  model->train();
  return logits;
}

torch::Tensor ClassificationLoss(const torch::Tensor& logits, const torch::Tensor& labels) {
  // Float32 at least: reduced-precision logits are widened, Double kept.
  return torch::nn::functional::cross_entropy(
      logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat), labels);
}

AutocastGuard::AutocastGuard(const std::string& amp, torch::Device device)
    : scope_(device.type(), amp == "off" ? std::nullopt
                                         : std::optional<c10::ScalarType>(amp == "bf16" ? at::kBFloat16 : at::kHalf)) {}

AutocastGuard::~AutocastGuard() = default;

LossScaler::LossScaler(const std::string& amp, torch::Device device) : enabled_(amp == "fp16") {
  if (!enabled_) return;
  auto f = torch::TensorOptions().dtype(torch::kFloat).device(device);
  scale_ = torch::full({1}, 65536.0, f);
  growth_tracker_ = torch::zeros({1}, f.dtype(torch::kInt));
}

torch::Tensor LossScaler::Scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.device()) : loss;
}

torch::Tensor LossScaler::Unscale(const std::vector<torch::Tensor>& params) {
  auto found_inf = torch::zeros({1}, scale_.options());
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) {
    auto inv_scale = scale_.reciprocal();
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  }
  return found_inf;
}

void LossScaler::StepAndUpdate(torch::optim::Optimizer& optimizer, const torch::Tensor& found_inf) {
  // A fused optimizer skips an overflowed step on the device; otherwise the
  // host has to read the flag (one synchronisation).
  auto* skipping = dynamic_cast<DeviceSkippingOptimizer*>(&optimizer);
  if (!(skipping && skipping->StepUnlessInf(found_inf)) && found_inf.item<float>() == 0.0f) optimizer.step();
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, 2.0, 0.5, 2000);
}

void LossScaler::Step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  if (enabled_) StepAndUpdate(optimizer, Unscale(params));
  else optimizer.step();
}

void LossScaler::Save(TensorMap& out, const std::string& prefix) const {
  if (!enabled_) return;
  out[prefix + "scale"] = scale_;
  out[prefix + "growth"] = growth_tracker_;
}

void LossScaler::Load(StateReader& reader, const std::string& prefix) {
  if (!enabled_) return;
  reader.CopyInto(prefix + "scale", scale_);
  reader.CopyInto(prefix + "growth", growth_tracker_);
}

TensorMap SaveTrainingState(const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const LossScaler& scaler) {
  TensorMap out;
  SaveModule(out, "model.", model);
  SaveOptimizer(out, "optim.", optimizer, ParameterNames(optimizer, model));
  scaler.Save(out, "scaler.");
  return out;
}

void LoadTrainingState(StateReader& reader, const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                       LossScaler& scaler) {
  reader.LoadModule("model.", model);
  reader.LoadOptimizer("optim.", optimizer, ParameterNames(optimizer, model));
  scaler.Load(reader, "scaler.");
}

}  // namespace ddpbench
