// The partition of the trainable parameters that the sharded strategies
// (zero1, zero2, zero3) share, as pure functions so that the tests can check
// it without a process group.
//
// All trainable parameters are laid out in one flat buffer. zero1 and zero2
// lay them out in the order their gradients become ready (reverse model order)
// and cut the buffer into buckets by size (up to the bucket cap, a bucket
// closes once it reaches it, as DDP's compute_bucket_assignment_by_size does);
// zero3 lays them out in model order, one bucket per model unit (the unit it
// gathers before the unit's forward). Each bucket is padded to a multiple
// of world x alignment and split into `world` equal, contiguous slices, and
// rank r owns slice r of every bucket. So every element (parameter or padding)
// has exactly one owner, every rank owns exactly the same number of elements
// (balanced by bytes up to the padding), and a bucket's reduce-scatter and
// all-gather work on equal chunks. Parameters start at multiples of the
// alignment, so each parameter, and each slice, stays aligned in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddpbench {

struct ZeroSlot {
  int64_t bucket = 0;  // the bucket holding the parameter
  int64_t offset = 0;  // first element in the flat buffer
  int64_t numel = 0;
};

struct ZeroBucket {
  int64_t offset = 0;          // first element in the flat buffer
  int64_t numel = 0;           // padded length: world x shard_numel
  int64_t shard_numel = 0;     // elements of each rank's slice
  std::vector<size_t> params;  // indices into the partition's input, in layout order

  // Rank r's slice is [SliceBegin(r), SliceBegin(r) + shard_numel).
  int64_t SliceBegin(int rank) const { return offset + rank * shard_numel; }
};

struct ZeroPartition {
  int world = 1;
  std::vector<ZeroBucket> buckets;  // in flat-buffer (and launch) order
  std::vector<ZeroSlot> slots;      // one per input parameter, in input order
  int64_t total_numel = 0;          // flat buffer length, padding included

  // Elements each rank owns (the same for every rank): the optimizer state it
  // holds is this many elements per state tensor.
  int64_t ShardNumel() const;
  // The rank owning flat element `index` (0 <= index < total_numel).
  int OwnerOf(int64_t index) const;
};

// `numels`: element counts of the trainable parameters in gradient-ready order
// (0 allowed); `element_bytes`: bytes per element; caps in bytes (the first
// bucket may have its own, smaller cap so that communication starts early);
// `align`: elements to align parameters and slices to (1: none).
// Throws std::invalid_argument on a world below 1, a negative size, a
// non-positive cap, element size or alignment.
ZeroPartition PartitionForZero(const std::vector<int64_t>& numels, int64_t element_bytes,
                               int64_t bucket_cap_bytes, int64_t first_bucket_cap_bytes, int world,
                               int64_t align = 1);

// One bucket per group: `group_of[i]` is the group (e.g. the model unit) of
// parameter i, non-decreasing; a bucket closes where the group changes.
// Throws std::invalid_argument as PartitionForZero, and on a group list of
// another length or a decreasing one.
ZeroPartition PartitionForZeroByGroup(const std::vector<int64_t>& numels,
                                      const std::vector<int64_t>& group_of, int world, int64_t align = 1);

}  // namespace ddpbench
