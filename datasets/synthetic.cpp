// Synthetic data: no I/O and (almost) no per-step cost, so a synthetic run
// measures the training strategy alone. A small pool of batches is drawn once
// and cycled; each image and label is drawn from a CPU generator seeded by
// (seed, its global sample index) — the same bits on every machine and device,
// and the same global batch whatever the world: rank r of a world of W holds
// samples k*W*B + r*B + [0, B) of the pool's k-th global batch, so a run
// resumed on another world (same global batch) trains on the same images.
#include "datasets/internal.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace ddpbench::detail {
namespace {

constexpr int64_t kDefaultSide = 224;
constexpr int64_t kPoolBatches = 4;

int64_t Side(const DataSpec& spec) { return spec.image_size > 0 ? spec.image_size : kDefaultSide; }

void CheckSynthetic(const DataSpec& spec) {
  if (spec.synthetic_classes < 1 || spec.synthetic_channels < 1 || spec.synthetic_size < 1) {
    throw std::invalid_argument("synthetic data needs classes, channels and size >= 1, got " +
                                std::to_string(spec.synthetic_classes) + ", " +
                                std::to_string(spec.synthetic_channels) + ", " +
                                std::to_string(spec.synthetic_size));
  }
}

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(const DataSpec& spec, int rank, int world) : next_(spec.start_batch) {
    batches_per_epoch_ = std::max<int64_t>(1, spec.synthetic_size / world / spec.batch_size);
    const int64_t global_batch = spec.batch_size * world;
    const int64_t pool = std::min(kPoolBatches, batches_per_epoch_);
    for (int64_t k = 0; k < pool; ++k) pool_.push_back(DrawBatch(spec, k * global_batch + rank * spec.batch_size));
  }

  // Samples first, first + 1, ... of the notional data set, each from its own generator.
  static Batch DrawBatch(const DataSpec& spec, int64_t first) {
    const int64_t side = Side(spec);
    std::vector<torch::Tensor> images, labels;
    for (int64_t i = first; i < first + spec.batch_size; ++i) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(HashCombine(SplitMix64(spec.seed), static_cast<uint64_t>(i)));
      images.push_back(torch::randn({spec.synthetic_channels, side, side}, gen, torch::kFloat));
      labels.push_back(torch::randint(0, spec.synthetic_classes, {1}, gen, torch::kLong));
    }
    Batch b;
    b.images = torch::stack(images).to(spec.device);
    if (spec.channels_last) b.images = b.images.contiguous(at::MemoryFormat::ChannelsLast);
    b.labels = torch::cat(labels).to(spec.device);
    return b;
  }

  Batch Next() override { return pool_[static_cast<size_t>(next_++ % static_cast<int64_t>(pool_.size()))]; }
  int64_t BatchesPerEpoch() const override { return batches_per_epoch_; }

 private:
  std::vector<Batch> pool_;
  int64_t next_;
  int64_t batches_per_epoch_ = 1;
};

}  // namespace

DatasetInfo DescribeSynthetic(const DataSpec& spec) {
  CheckSynthetic(spec);
  DatasetInfo info;
  info.name = "synthetic";
  info.real = false;
  info.channels = spec.synthetic_channels;
  info.height = info.width = Side(spec);
  info.num_classes = spec.synthetic_classes;
  info.train_size = spec.synthetic_size;
  info.test_size = 0;
  return info;
}

std::unique_ptr<BatchSource> MakeSyntheticTrainSource(const DataSpec& spec, int rank, int world) {
  CheckSynthetic(spec);
  return std::make_unique<SyntheticSource>(spec, rank, world);
}

}  // namespace ddpbench::detail
