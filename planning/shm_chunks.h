// The arithmetic of the shared-memory collectives (harness/shm_backend.h): a
// buffer larger than a rank's slot of the segment streams through it in
// chunks, each chunk's reduction is cut among the ranks so that each rank sums
// one share (every element in rank order, so every rank gets the same bits),
// and whether a group's ranks all sit on one host. Torch-free, tested alone.
#pragma once

#include <cstdint>
#include <vector>

namespace ddpbench {

struct Span {
  int64_t offset = 0, count = 0;
  bool operator==(const Span& o) const { return offset == o.offset && count == o.count; }
};

// [0, total) cut into spans of `capacity` elements (the last one shorter);
// none for total 0. Throws std::invalid_argument when capacity < 1 or total < 0.
std::vector<Span> Chunks(int64_t total, int64_t capacity);

// Rank `rank`'s share of `count` elements cut among `world` ranks as evenly as
// can be (the first count % world ranks one element more), in rank order.
Span ShareOf(int64_t count, int rank, int world);

// Whether global `ranks` all sit on one host when hosts hold `per_host`
// consecutive ranks each (every launcher numbers a node's ranks
// consecutively). per_host < 1 counts as 1.
bool OnOneHost(const std::vector<int>& ranks, int per_host);

}  // namespace ddpbench
