// single: the whole model on one device. It is the reference that --verify
// compares every other strategy against, so it is the plainest possible step.
#include <torch/torch.h>

#include "harness/config.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "strategies/factories.h"

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
  }

  StepResult Step(const Batch& batch) override {
    model_->train();
    optimizer_->zero_grad();
    torch::Tensor loss;
    {
      auto scope = timer_->Measure(Phase::kForward);
      AutocastGuard amp(config_->amp, device_);
      auto logits = model_->forward(batch.images.to(device_));
      loss = ClassificationLoss(logits, batch.labels.to(device_));
    }
    {
      auto scope = timer_->Measure(Phase::kBackward);
      scaler_->Scale(loss).backward();
    }
    {
      auto scope = timer_->Measure(Phase::kOptimizer);
      scaler_->Step(*optimizer_, model_->parameters());
    }
    return {loss.detach()};
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
};

}  // namespace

std::unique_ptr<Strategy> MakeSingleStrategy() { return std::make_unique<SingleStrategy>(); }

}  // namespace ddpbench
