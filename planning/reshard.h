// Resharding a training state between two layouts, as arithmetic over named
// tensors: a snapshot written by one strategy and world is read back by
// another (ddp on 1 rank from zero2 on 2, zero3 on 3 from ddp on 4 ...).
// Every logical tensor ("model.layer1.0.conv1.weight", its momentum buffer)
// is seen flattened; a layout says which element ranges of it each rank's
// stored tensors hold and where. Resharding is then: for each piece the new
// layout wants on a rank, the ranges of the old layout's pieces that cover
// it. Torch-free (layouts in, slice copies out) so that the tests can check
// every layout against every other without tensors or processes; the
// snapshot code (harness/snapshot.h) applies the copies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planning/zero_partition.h"

namespace ddpbench {

// Elements [begin, begin + length) of the flattened logical tensor `logical`,
// held by rank `holder` in its stored tensor `stored` from `stored_offset` on.
struct ShardPiece {
  std::string logical;
  int64_t begin = 0;
  int64_t length = 0;
  int holder = 0;
  std::string stored;
  int64_t stored_offset = 0;
};

// One copy of a resharding: `length` elements from the old layout's stored
// tensor `from` of rank `holder` (starting at `from_offset`) into the new
// layout's stored tensor `to` (starting at `to_offset`).
struct SliceCopy {
  int holder = 0;
  std::string from;
  int64_t from_offset = 0;
  std::string to;
  int64_t to_offset = 0;
  int64_t length = 0;
};

// The copies that fill every piece of `want` from the pieces of `have`.
// Where several old pieces hold the same elements (a replicated tensor),
// the one of rank `prefer` is read, else the lowest rank's. Throws
// std::invalid_argument naming the logical tensor and element that no piece
// of `have` holds.
std::vector<SliceCopy> PlanReshard(const std::vector<ShardPiece>& have, const std::vector<ShardPiece>& want,
                                   int prefer);

// The ranks whose stored tensors a set of copies reads, ascending.
std::vector<int> HoldersRead(const std::vector<SliceCopy>& copies);

// Layouts strategies describe themselves by.
// Every tensor whole on rank `holder`, stored under its own name.
std::vector<ShardPiece> WholePieces(const std::map<std::string, int64_t>& numels, int holder);
// A pipeline's layers over its stage ranks (pmp/mp --stage-ranks): unit u's
// tensors (logical name -> numel) whole on the rank running stage
// stage_of[u], in each of `replicas` pipelines of `stages` consecutive ranks
// (rank = replica * stages + stage), stored as stored_prefix + name. Throws
// std::invalid_argument for a unit on no stage of the pipeline.
std::vector<ShardPiece> StagePieces(const std::vector<std::map<std::string, int64_t>>& unit_tensors,
                                    const std::vector<int>& stage_of, int stages, int replicas,
                                    const std::string& stored_prefix);
// The slices rank `rank` holds under a ZeRO partition: param i of `names`
// (in the partition's input order) is logical `names[i]`; bucket b's slice is
// stored as stored_of(b).
template <typename StoredOf>
std::vector<ShardPiece> ZeroPieces(const ZeroPartition& partition, const std::vector<std::string>& names, int rank,
                                   StoredOf stored_of) {
  std::vector<ShardPiece> pieces;
  for (size_t i = 0; i < partition.slots.size(); ++i) {
    const ZeroSlot& s = partition.slots[i];
    const ZeroBucket& b = partition.buckets[s.bucket];
    const int64_t lo = std::max(s.offset, b.SliceBegin(rank));
    const int64_t hi = std::min(s.offset + s.numel, b.SliceBegin(rank) + b.shard_numel);
    if (lo < hi) pieces.push_back({names[i], lo - s.offset, hi - lo, rank, stored_of(s.bucket), lo - b.SliceBegin(rank)});
  }
  return pieces;
}

}  // namespace ddpbench
