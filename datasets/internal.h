// Private to datasets/: the pieces the public readers, the sources and the
// synthetic generator share. Kept out of dataset.h so that the public header
// stays a lean interface (no zlib, no threads).
#pragma once

#include "datasets/dataset.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddpbench::detail {

// The whole (decompressed) content of `path`. gzip files are inflated; plain
// files are read as they are. A path ending in ".gz" must be gzip. Throws
// DataError naming the path when the file cannot be opened or the gzip stream
// is corrupt or cut short.
std::string ReadFileBytes(const std::string& path);

// SplitMix64's finaliser: a cheap, well-mixed hash for deterministic per-sample
// decisions (augmentation) and for deriving generator seeds.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
inline uint64_t HashCombine(uint64_t h, uint64_t v) { return SplitMix64(h ^ SplitMix64(v)); }

// Synthetic data (datasets/synthetic.cpp).
DatasetInfo DescribeSynthetic(const DataSpec& spec);
std::unique_ptr<BatchSource> MakeSyntheticTrainSource(const DataSpec& spec, int rank, int world);

// Checks the fields every source relies on; std::invalid_argument otherwise.
void ValidateSpec(const DataSpec& spec);
void ValidateRankWorld(int rank, int world);

}  // namespace ddpbench::detail
