// dp: DataParallel as PyTorch's nn.DataParallel does it, in one process that
// drives --gpus devices. Each step (1) replicates device 0's current weights
// to every other device, (2) scatters the batch (--batch-size per device),
// (3) runs the replicas' forwards at the same time, (4) gathers the outputs
// on device 0 and computes the loss there, (5) back-propagates every replica
// at the same time and (6) reduces the gradients into device 0's parameters
// (replica order, as PyTorch's ReduceAdd), where the optimizer steps.
//
// Why not torch::nn::parallel::data_parallel: (a) its replicate() clones the
// whole module every step, and a ResNet clone re-runs the weight
// initialisation, which would be timed as part of every step; the replicas
// here are built once and only their weights are copied each step; (b) its
// parallel_apply runs replicas on the intra-op thread pool, which is one
// thread on a CPU logical device (so the replicas would run one after the
// other) and does not carry autocast's thread-local state into those threads;
// (c) its single backward through ReduceAdd runs every CPU replica's backward
// on the calling thread. Here every device has a persistent worker thread
// (device_workers.h) that runs its replica's forward and backward; on CUDA
// the workers use each device's default stream, as PyTorch's DataParallel.
// BatchNorm statistics are per replica, so --verify uses GroupNorm.
// A snapshot holds device 0's model, optimizer and scaler only: every step
// starts by copying device 0's parameters and buffers into the replicas.
#include <torch/torch.h>

#include "base/config.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "strategies/device_workers.h"
#include "strategies/registry.h"

namespace ddpbench {
namespace {

class DataParallelStrategy final : public Strategy {
 public:
  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    devices_ = ctx.devices;
    model_ = BuildModel(ctx.model, config_->seed, devices_.front());
    optimizer_ = MakeOptimizer(*config_, model_->parameters(), ctx.lr);
    scaler_ = std::make_unique<LossScaler>(config_->amp, devices_.front());
    workers_ = std::make_unique<DeviceWorkers>(devices_, /*own_streams=*/false);
    // Replica 0 is device 0's model itself (as in PyTorch); the others are
    // made once, each in its device's thread (one at a time: a clone draws
    // from the global RNG and puts it back).
    replicas_.assign(devices_.size(), ResNet(nullptr));
    replicas_[0] = model_;
    for (int i = 1; i < workers_->size(); ++i) {
      workers_->Run(i, [&] {
        replicas_[i] = ResNet(std::dynamic_pointer_cast<ResNetImpl>(model_->clone(devices_[i])));
      });
    }
  }

  StepResult Step(const Batch& batch) override {
    const int n = Replicas(batch.size());
    const torch::Device main = devices_.front();
    model_->train();
    optimizer_->zero_grad();
    auto images = batch.images.tensor_split(n);
    Broadcast(n);

    // Scatter and the replicas' forwards, at the same time.
    std::vector<torch::Tensor> outputs(n);
    std::vector<Handoff> sent(n);
    workers_->RunAll([&](int i) {
      auto scope = timer_->Measure(Phase::kForward, devices_[i]);
      AutocastGuard amp(config_->amp, devices_[i]);
      outputs[i] = replicas_[i]->forward(Receive(Send(images[i], /*host=*/true), devices_[i]));
      sent[i] = Send(outputs[i].detach());
    }, n);

    // Gather on device 0; the loss and its gradient for each replica's output.
    std::vector<torch::Tensor> gathered(n);
    {
      auto scope = timer_->Measure(Phase::kCommunication, main);
      for (int i = 0; i < n; ++i) gathered[i] = Receive(sent[i], main).requires_grad_();
    }
    torch::Tensor loss;
    {
      auto scope = timer_->Measure(Phase::kForward, main);
      AutocastGuard amp(config_->amp, main);
      loss = ClassificationLoss(torch::cat(gathered), batch.labels.to(main));
    }
    {
      auto scope = timer_->Measure(Phase::kBackward, main);
      scaler_->Scale(loss).backward();
      for (int i = 0; i < n; ++i) sent[i] = Send(gathered[i].grad());
    }

    // The replicas' backwards, at the same time.
    std::vector<std::vector<Handoff>> grads(n);
    workers_->RunAll([&](int i) {
      auto scope = timer_->Measure(Phase::kBackward, devices_[i]);
      outputs[i].backward(Receive(sent[i], devices_[i]));
      outputs[i] = torch::Tensor();
      if (i == 0) return;  // device 0's gradients are already in place
      for (auto& p : replicas_[i]->parameters()) grads[i].push_back(Send(p.grad()));
    }, n);

    // Reduce into device 0's parameters, replica by replica.
    {
      auto scope = timer_->Measure(Phase::kCommunication, main);
      auto params = model_->parameters();
      for (int i = 1; i < n; ++i) {
        for (size_t k = 0; k < params.size(); ++k) {
          if (!grads[i][k].tensor.defined()) continue;
          torch::Tensor g = Receive(grads[i][k], main);
          if (params[k].grad().defined()) params[k].mutable_grad().add_(g);
          else params[k].mutable_grad() = g;
        }
      }
    }

    {
      auto scope = timer_->Measure(Phase::kOptimizer, main);
      scaler_->Step(*optimizer_, model_->parameters());
    }
    return {loss.detach()};
  }

  // Evaluation the DataParallel way too: current weights to every replica,
  // the batch scattered, the logits gathered on device 0.
  torch::Tensor Predict(const torch::Tensor& images) override {
    const int n = Replicas(images.size(0));
    Broadcast(n);
    auto chunks = images.tensor_split(n);
    std::vector<Handoff> sent(n);
    workers_->RunAll([&](int i) {
      torch::NoGradGuard no_grad;
      replicas_[i]->eval();
      AutocastGuard amp(config_->amp, devices_[i]);
      sent[i] = Send(replicas_[i]->forward(Receive(Send(chunks[i], /*host=*/true), devices_[i])));
      replicas_[i]->train();
    }, n);
    std::vector<torch::Tensor> logits;
    for (auto& h : sent) logits.push_back(Receive(h, devices_.front()));
    return torch::cat(logits);
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
  int Replicas(int64_t batch) const { return static_cast<int>(std::min<int64_t>(devices_.size(), batch)); }

  // Device 0's current parameters and buffers into replicas 1..n-1 (in their
  // threads); their old gradients are dropped.
  void Broadcast(int n) {
    workers_->RunAll([&](int i) {
      if (i == 0) return;
      auto scope = timer_->Measure(Phase::kCommunication, devices_[i]);
      torch::NoGradGuard no_grad;
      auto from = model_->parameters();
      auto to = replicas_[i]->parameters();
      for (size_t k = 0; k < to.size(); ++k) {
        to[k].copy_(from[k]);
        to[k].mutable_grad() = torch::Tensor();
      }
      auto from_buffers = model_->buffers();
      auto to_buffers = replicas_[i]->buffers();
      for (size_t k = 0; k < to_buffers.size(); ++k) to_buffers[k].copy_(from_buffers[k]);
    }, n);
  }

  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  std::vector<torch::Device> devices_;
  ResNet model_{nullptr};
  std::vector<ResNet> replicas_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<DeviceWorkers> workers_;
};

}  // namespace

static std::unique_ptr<Strategy> MakeDpStrategy() { return std::make_unique<DataParallelStrategy>(); }
DDPBENCH_REGISTER_STRATEGY("dp", MakeDpStrategy);

}  // namespace ddpbench
