#include "app/parity.h"

#include <torch/torch.h>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "strategies/registry.h"

namespace ddpbench {
namespace {

// The batches of `inner` with float64 images (labels unchanged).
class Float64Source final : public BatchSource {
 public:
  explicit Float64Source(std::unique_ptr<BatchSource> inner) : inner_(std::move(inner)) {}
  Batch Next() override {
    Batch b = inner_->Next();
    b.images = b.images.to(torch::kDouble);
    return b;
  }
  int64_t BatchesPerEpoch() const override { return inner_->BatchesPerEpoch(); }

 private:
  std::unique_ptr<BatchSource> inner_;
};

std::unique_ptr<BatchSource> MakeParitySource(const DataSpec& data, int rank, int world) {
  return std::make_unique<Float64Source>(MakeTrainSource(data, rank, world));
}

}  // namespace

ParityResult RunParityCheck(const StrategyEntry& entry, const RunContext& ctx, const DataSpec& spec) {
  const RunConfig& base = *ctx.config;
  RunConfig config = base;
  config.amp = "off";  // reduced precision is not the same maths
  ResNetOptions model = ctx.model;
  // BatchNorm sees other samples than single's: the strategy's micro-batches
  // or replicas, or the replicas of a mesh (pipelines replicated by data
  // parallelism), each normalising over its share of the global batch.
  const bool norm_differs = entry.info.batch_norm_differs || ctx.dist->data_world() > 1;
  if (norm_differs && model.norm == NormKind::kBatch) model.norm = NormKind::kGroup;
  config.norm = NormKindName(model.norm);
  if (model.norm != NormKind::kBatch) model.fuse = NormFuse::kOff;  // only BatchNorm fuses
  config.fuse = NormFuseName(model.fuse);

  ParityResult result;
  result.steps = config.verify_steps;
  // Float64: summing a batch in chunks (dp, pmp, ddp, zero1) rounds
  // differently from summing it whole; in float32 that 1e-7 can flip a ReLU
  // within a few steps and jump to 1e-4..1e-3 (PyTorch itself does the same).
  // In float64 the rounding is ~1e-16, so any visible difference is maths.
  model.dtype = torch::kDouble;
  result.model = base.model + " norm=" + config.norm + (model.fuse == NormFuse::kOff ? "" : " fuse=" + config.fuse) +
                 " amp=off dtype=float64";

  DataSpec data = spec;
  data.augment = base.augment;
  data.prefetch = 0;

  PhaseTimer timer(ctx.devices.front());
  RunContext run = ctx;
  run.config = &config;
  run.model = model;
  run.timer = &timer;

  // The strategy under test, on this process's own batches.
  auto strategy = entry.make();
  strategy->Setup(run);
  auto source = MakeParitySource(data, ctx.dist->data_rank(), ctx.dist->data_world());
  for (int64_t s = 0; s < config.verify_steps; ++s) strategy->Step(source->Next());
  auto params = strategy->Parameters();

  if (ctx.dist->is_root()) {
    // The reference: one device, the global batch (every rank's batch, in
    // rank order), the same learning rate.
    DistContext solo;
    solo.device = ctx.devices.front();
    RunConfig ref_config = config;
    ref_config.cuda_graphs = false;  // the reference is the eager step
    RunContext ref = run;
    if (const ResNetOptions* built = strategy->BuiltModel()) ref.model.half_blocks = built->half_blocks;
    ref.model.fuse = NormFuse::kOff;  // the reference is torchvision's maths: a fusion is checked against it
    ref_config.fuse = "off";
    ref.config = &ref_config;
    ref.dist = &solo;
    ref.devices = {ctx.devices.front()};
    auto reference = ReferenceStrategy().make();
    reference->Setup(ref);
    std::vector<std::unique_ptr<BatchSource>> sources;
    for (int r = 0; r < ctx.dist->data_world(); ++r)
      sources.push_back(MakeParitySource(data, r, ctx.dist->data_world()));
    for (int64_t s = 0; s < config.verify_steps; ++s) {
      std::vector<torch::Tensor> images, labels;
      for (auto& src : sources) {
        Batch b = src->Next();
        images.push_back(b.images.to(ctx.devices.front()));
        labels.push_back(b.labels.to(ctx.devices.front()));
      }
      reference->Step({torch::cat(images), torch::cat(labels)});
    }
    auto expected = reference->Parameters();
    TORCH_CHECK(expected.size() == params.size(), "parity: the strategy has ", params.size(),
                " parameters, the reference ", expected.size());
    double diff = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      auto a = params[i].detach().to(torch::kCPU, torch::kDouble);
      auto b = expected[i].detach().to(torch::kCPU, torch::kDouble);
      TORCH_CHECK(a.sizes() == b.sizes(), "parity: parameter ", i, " has shape ", a.sizes(),
                  " but the reference has ", b.sizes());
      diff = std::max(diff, (a - b).abs().max().item<double>());
    }
    result.max_abs_diff = diff;
  }
  ctx.dist->Barrier();
  return result;
}

}  // namespace ddpbench
