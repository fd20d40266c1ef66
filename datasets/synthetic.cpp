// Synthetic data: no I/O and (almost) no per-step cost, so a synthetic run
// measures the training strategy alone. A small pool of batches is drawn once
// from a CPU generator seeded by (seed, rank) — the same bits on every machine
// and device — moved to the device, and then cycled.
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
    auto gen = at::make_generator<at::CPUGeneratorImpl>(HashCombine(SplitMix64(spec.seed), static_cast<uint64_t>(rank)));
    const int64_t side = Side(spec);
    const int64_t pool = std::min(kPoolBatches, batches_per_epoch_);
    for (int64_t i = 0; i < pool; ++i) {
      Batch b;
      b.images = torch::randn({spec.batch_size, spec.synthetic_channels, side, side}, gen, torch::kFloat)
                     .to(spec.device);
      if (spec.channels_last) b.images = b.images.contiguous(at::MemoryFormat::ChannelsLast);
      b.labels = torch::randint(0, spec.synthetic_classes, {spec.batch_size}, gen, torch::kLong).to(spec.device);
      pool_.push_back(std::move(b));
    }
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
