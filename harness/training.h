// The pieces of a training step that every strategy shares, so that the maths
// is written once: model construction from the run's seed, the optimizer,
// the loss, mixed precision (autocast), fp16 loss scaling, and the snapshot
// state of a model, its optimizer and its scaler.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/state_map.h"
#include "models/autocast.h"
#include "models/resnet.h"

namespace torch::optim {
class Optimizer;
}

namespace ddpbench {

struct RunConfig;

// torch::manual_seed(seed), then a ResNet on `device` in options.dtype: every
// strategy starts from bit-identical weights.
ResNet BuildModel(const ResNetOptions& options, uint64_t seed, torch::Device device);

// The optimizer kernels a run uses on `device`: --optimizer-impl, where auto
// is fused on CUDA and the per-parameter loop on CPU.
std::string ResolveOptimizerImpl(const RunConfig& config, torch::Device device);

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const RunConfig& config,
                                                       std::vector<torch::Tensor> params, double lr);
// Bytes of optimizer state (momentum buffers, Adam moments) held, in MiB.
double OptimizerStateMb(torch::optim::Optimizer& optimizer);

// Logits of `images` in eval mode under --amp, no autograd; the model is put
// back in train mode.
torch::Tensor PredictLogits(ResNet& model, const std::string& amp, torch::Device device,
                            const torch::Tensor& images);

// Mean cross-entropy in float32, or float64 for float64 logits (logits may be
// reduced precision under AMP).
torch::Tensor ClassificationLoss(const torch::Tensor& logits, const torch::Tensor& labels);

// Autocast for --amp=bf16|fp16 on `device`'s type while alive (thread-local,
// so each worker thread of a strategy opens its own).
class AutocastGuard {
 public:
  AutocastGuard(const std::string& amp, torch::Device device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  ScopedAutocast scope_;
};

// Dynamic loss scaling for --amp=fp16, on ATen's own AMP kernels (the ones
// torch.amp.GradScaler calls). A no-op for off/bf16.
class LossScaler {
 public:
  LossScaler(const std::string& amp, torch::Device device);
  bool enabled() const { return enabled_; }
  torch::Tensor Scale(const torch::Tensor& loss) const;
  // Unscales the gradients in place; returns a 1-element float tensor that is
  // non-zero when any gradient is inf/NaN (reduce it across ranks if needed).
  torch::Tensor Unscale(const std::vector<torch::Tensor>& params);
  // Steps `optimizer` unless found_inf, then updates the scale.
  void StepAndUpdate(torch::optim::Optimizer& optimizer, const torch::Tensor& found_inf);
  // The optimizer step of one device's parameters: unscale, step unless a
  // gradient overflowed, update the scale (fp16); a plain step otherwise.
  void Step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params);
  // Snapshots: the scale and the growth tracker as prefix + "scale" and
  // prefix + "growth" (fp16 only; nothing otherwise), and back.
  void Save(TensorMap& out, const std::string& prefix) const;
  void Load(StateReader& reader, const std::string& prefix);

 private:
  bool enabled_ = false;
  torch::Tensor scale_, growth_tracker_;
};

// The state of one model trained by one optimizer and one loss scaler
// (single, dp's device 0, ddp): "model.<name>", "optim.<param name>.<field>",
// "scaler.scale"/"scaler.growth" (state_map.h); the reader is not finished.
TensorMap SaveTrainingState(const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const LossScaler& scaler);
void LoadTrainingState(StateReader& reader, const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                       LossScaler& scaler);

}  // namespace ddpbench
