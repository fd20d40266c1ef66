// torch.utils.data.DistributedSampler, line for line (torch 2.11,
// torch/utils/data/distributed.py), so that a C++ run feeds rank r exactly the
// samples a PyTorch DDP run with the same seed would: the shuffle is
// torch.randperm on a CPU generator seeded with seed + epoch, the padding
// repeats indices from the start, and rank r takes every world-th index.
#include "datasets/internal.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace ddpbench {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : size_(dataset_size), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed),
      drop_last_(drop_last) {
  if (world < 1) {
    throw std::invalid_argument("DistributedSampler: world size must be >= 1, got " +
                                std::to_string(world));
  }
  if (rank < 0 || rank >= world) {
    throw std::invalid_argument("DistributedSampler: rank must be in [0, " + std::to_string(world) +
                                "), got rank " + std::to_string(rank) + " of world " +
                                std::to_string(world));
  }
  if (dataset_size < 1) {
    throw std::invalid_argument("DistributedSampler: dataset size must be >= 1, got " +
                                std::to_string(dataset_size));
  }
  // torch: if drop_last and len % num_replicas != 0:
  //            num_samples = ceil((len - num_replicas) / num_replicas)
  //        else: num_samples = ceil(len / num_replicas)
  // (Python's ceil of a negative fraction is 0, hence the max.)
  if (drop_last_ && size_ % world_ != 0) {
    const int64_t excess = size_ - world_;
    num_samples_ = excess <= 0 ? 0 : (excess + world_ - 1) / world_;
  } else {
    num_samples_ = (size_ + world_ - 1) / world_;
  }
}

std::vector<int64_t> DistributedSampler::Indices() const {
  std::vector<int64_t> indices(static_cast<size_t>(size_));
  if (shuffle_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    const torch::Tensor perm = torch::randperm(size_, gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    indices.assign(p, p + size_);
  } else {
    for (int64_t i = 0; i < size_; ++i) indices[i] = i;
  }

  const int64_t total = num_samples_ * world_;
  if (!drop_last_) {
    // Pad by repeating from the start; if more padding than data is needed,
    // torch repeats the whole list (indices * ceil(padding / len))[:padding].
    indices.reserve(static_cast<size_t>(total));
    for (int64_t i = 0; static_cast<int64_t>(indices.size()) < total; ++i) {
      const int64_t repeat = indices[static_cast<size_t>(i % size_)];
      indices.push_back(repeat);
    }
  } else {
    indices.resize(static_cast<size_t>(total));
  }

  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(indices[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace ddpbench
