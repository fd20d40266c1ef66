// See data_only.h.
#include "app/data_only.h"

#include "strategies/strategy.h"

namespace ddpbench {
namespace {

class DataOnly final : public Strategy {
 public:
  void Setup(const RunContext&) override {}
  StepResult Step(const Batch& batch) override {
    // Reading one label waits for a device copy still in flight, as a model's first use would.
    return {torch::zeros({}, torch::kDouble).add_(batch.labels.defined() ? 0 * batch.labels[0].item<double>() : 0)};
  }
  torch::Tensor Predict(const torch::Tensor& images) override { return torch::zeros({images.size(0), 1}); }
  std::vector<torch::Tensor> Parameters() override { return {}; }
  TensorMap SaveState() override { return {}; }
  void LoadState(const TensorMap&) override {}
};

}  // namespace

std::unique_ptr<Strategy> MakeDataOnlyStrategy() { return std::make_unique<DataOnly>(); }

}  // namespace ddpbench
