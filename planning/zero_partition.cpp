#include "planning/zero_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace ddpbench {
namespace {

int64_t RoundUp(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

int64_t ZeroPartition::ShardNumel() const {
  int64_t n = 0;
  for (const auto& b : buckets) n += b.shard_numel;
  return n;
}

int ZeroPartition::OwnerOf(int64_t index) const {
  if (index < 0 || index >= total_numel)
    throw std::out_of_range(fmt::format("flat index {} outside [0, {})", index, total_numel));
  // The bucket whose range holds `index`: the last one starting at or before it.
  auto it = std::upper_bound(buckets.begin(), buckets.end(), index,
                             [](int64_t i, const ZeroBucket& b) { return i < b.offset; });
  const ZeroBucket& b = *std::prev(it);
  return static_cast<int>((index - b.offset) / b.shard_numel);
}

namespace {

void CheckCommon(const std::vector<int64_t>& numels, int world, int64_t align) {
  if (world < 1)
    throw std::invalid_argument(fmt::format("ZeRO partition: world size {} (must be >= 1)", world));
  if (align < 1)
    throw std::invalid_argument(fmt::format("ZeRO partition: alignment {} (must be >= 1)", align));
  for (size_t i = 0; i < numels.size(); ++i)
    if (numels[i] < 0)
      throw std::invalid_argument(fmt::format("ZeRO partition: parameter {} has {} elements", i, numels[i]));
}

// Lays the parameters out in input order, closing a bucket after parameter i
// when close_after(i, elements so far in the bucket, buckets closed so far).
template <typename CloseAfter>
ZeroPartition Layout(const std::vector<int64_t>& numels, int world, int64_t align, CloseAfter close_after) {
  ZeroPartition p;
  p.world = world;
  p.slots.resize(numels.size());
  ZeroBucket current;
  int64_t used = 0;  // elements of `current` before its padding
  auto close = [&] {
    // Padded so that every slice has the same length and starts aligned;
    // at least one element per rank so that no slice is empty.
    current.numel = RoundUp(std::max<int64_t>(used, 1), world * align);
    current.shard_numel = current.numel / world;
    p.total_numel = current.offset + current.numel;
    p.buckets.push_back(std::move(current));
    current = ZeroBucket{};
    current.offset = p.total_numel;
    used = 0;
  };
  for (size_t i = 0; i < numels.size(); ++i) {
    used = RoundUp(used, align);
    p.slots[i] = {static_cast<int64_t>(p.buckets.size()), current.offset + used, numels[i]};
    current.params.push_back(i);
    used += numels[i];
    if (close_after(i, used, p.buckets.size())) close();
  }
  if (!current.params.empty()) close();
  return p;
}

}  // namespace

ZeroPartition PartitionForZero(const std::vector<int64_t>& numels, int64_t element_bytes,
                               int64_t bucket_cap_bytes, int64_t first_bucket_cap_bytes, int world,
                               int64_t align) {
  CheckCommon(numels, world, align);
  if (element_bytes < 1)
    throw std::invalid_argument(
        fmt::format("ZeRO partition: element size {} bytes (must be >= 1)", element_bytes));
  if (bucket_cap_bytes < 1 || first_bucket_cap_bytes < 1)
    throw std::invalid_argument(fmt::format("ZeRO partition: bucket caps {} and {} bytes (must be >= 1)",
                                            bucket_cap_bytes, first_bucket_cap_bytes));
  return Layout(numels, world, align, [&](size_t, int64_t used, size_t closed) {
    const int64_t cap = closed == 0 ? first_bucket_cap_bytes : bucket_cap_bytes;
    return used * element_bytes >= cap;
  });
}

ZeroPartition PartitionForZeroByGroup(const std::vector<int64_t>& numels,
                                      const std::vector<int64_t>& group_of, int world, int64_t align) {
  CheckCommon(numels, world, align);
  if (group_of.size() != numels.size())
    throw std::invalid_argument(
        fmt::format("ZeRO partition: {} groups for {} parameters", group_of.size(), numels.size()));
  for (size_t i = 1; i < group_of.size(); ++i)
    if (group_of[i] < group_of[i - 1])
      throw std::invalid_argument(fmt::format("ZeRO partition: parameter {} is in group {} after group {}", i,
                                              group_of[i], group_of[i - 1]));
  return Layout(numels, world, align, [&](size_t i, int64_t, size_t) {
    return i + 1 == group_of.size() || group_of[i + 1] != group_of[i];
  });
}

}  // namespace ddpbench
