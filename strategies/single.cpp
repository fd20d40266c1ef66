// single: the whole model on one device. It is the reference that --verify
// compares every other strategy against, so it is the plainest possible step.
// With --cuda-graphs the same step is captured once and replayed.
#include <torch/torch.h>

#include <optional>

#include "base/config.h"
#include "harness/cuda_graph.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "strategies/registry.h"

namespace ddpbench {
namespace {

class SingleStrategy final : public Strategy {
 public:
  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    device_ = ctx.devices.front();
    model_ = BuildModel(ctx.model, config_->seed, device_);
    optimizer_ = MakeOptimizer(*config_, model_->parameters(), ctx.lr);
    scaler_ = std::make_unique<LossScaler>(config_->amp, device_);
    // One eager step first: cuDNN picks its algorithms and the optimizer
    // makes its state, outside the graph.
    if (config_->cuda_graphs) graph_ = std::make_unique<WholeStepGraph>(device_, /*eager_steps=*/1);
  }

  StepResult Step(const Batch& batch) override {
    model_->train();
    // Replayed steps are one graph launch: forward, backward and optimizer
    // are not timed apart (the row leaves those columns empty).
    return {RunTrainStep(graph_.get(), device_, batch.images, batch.labels,
                         [this](const torch::Tensor& images, const torch::Tensor& labels, bool timed) {
                           return Train(images, labels, timed);
                         })};
  }

  // One step on device tensors; `timed` brackets the phases with the timer's
  // CUDA events, which a graph capture cannot contain.
  torch::Tensor Train(const torch::Tensor& images, const torch::Tensor& labels, bool timed) {
    auto phase = [&](Phase p) { return timer_->MeasureIf(timed, p); };
    optimizer_->zero_grad();
    torch::Tensor loss;
    {
      auto scope = phase(Phase::kForward);
      AutocastGuard amp(config_->amp, device_);
      loss = ClassificationLoss(model_->forward(images), labels);
    }
    {
      auto scope = phase(Phase::kBackward);
      scaler_->Scale(loss).backward();
    }
    {
      auto scope = phase(Phase::kOptimizer);
      scaler_->Step(*optimizer_, model_->parameters());
    }
    return loss.detach();
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    return PredictLogits(model_, config_->amp, device_, images);
  }

  std::vector<torch::Tensor> Parameters() override { return model_->parameters(); }
  double OptimizerStateMb() override { return ddpbench::OptimizerStateMb(*optimizer_); }

  TensorMap SaveState() override { return SaveTrainingState(*model_, *optimizer_, *scaler_); }
  void LoadState(const TensorMap& state) override {
    StateReader reader(state);
    LoadTrainingState(reader, *model_, *optimizer_, *scaler_);
    reader.Finish();
  }

 private:
  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  torch::Device device_ = torch::kCPU;
  ResNet model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<WholeStepGraph> graph_;
};

}  // namespace

static std::unique_ptr<Strategy> MakeSingleStrategy() { return std::make_unique<SingleStrategy>(); }
DDPBENCH_REGISTER_STRATEGY("single", MakeSingleStrategy);

}  // namespace ddpbench
