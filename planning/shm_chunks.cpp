// Chunks, shares and hosts of the shared-memory collectives (shm_chunks.h).
#include "planning/shm_chunks.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ddpbench {

std::vector<Span> Chunks(int64_t total, int64_t capacity) {
  if (capacity < 1 || total < 0)
    throw std::invalid_argument("shared-memory chunks: total " + std::to_string(total) + ", capacity " +
                                std::to_string(capacity) + " (capacity must be >= 1, total >= 0)");
  std::vector<Span> spans;
  for (int64_t at = 0; at < total; at += capacity) spans.push_back({at, std::min(capacity, total - at)});
  return spans;
}

Span ShareOf(int64_t count, int rank, int world) {
  const int64_t base = count / world, extra = count % world;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

bool OnOneHost(const std::vector<int>& ranks, int per_host) {
  if (per_host < 1) per_host = 1;
  for (int r : ranks)
    if (r / per_host != ranks.front() / per_host) return false;
  return true;
}

}  // namespace ddpbench
