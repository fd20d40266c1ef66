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

// Turns dataset rows into a batch on the host, a pure function of (rows,
// epoch, train) that prefetch threads may call at once; OnDevice finishes a
// batch once it is on the source's device (a uint8 batch is normalised there).
class BatchMaker {
 public:
  virtual ~BatchMaker() = default;
  virtual Batch Make(const std::vector<int64_t>& rows, int64_t epoch, bool train) const = 0;
  virtual Batch OnDevice(Batch batch) const { return batch; }
  virtual int64_t BadImages() const { return 0; }
  virtual StageSeconds StageTotals() const { return {}; }  // image makers: busy seconds per stage
};

// The sources of datasets/sources.cpp over any maker: training batches of
// `rows` (sampled, shuffled per epoch, endless) and one pass over `rows`.
// `threads` builders, `ahead` batches ahead (0: spec.prefetch for both).
std::unique_ptr<BatchSource> MakeTrainSourceWith(const DataSpec& spec, int rank, int world,
                                                 std::shared_ptr<const BatchMaker> maker, std::vector<int64_t> rows,
                                                 int threads, int ahead);
std::unique_ptr<BatchSource> MakeEvalSourceWith(const DataSpec& spec, int rank, int world,
                                                std::shared_ptr<const BatchMaker> maker,
                                                const std::vector<int64_t>& rows, int threads, int ahead);

// Every row of 0..size-1 not in `held_out` (ascending; held_out sorted), and all of them.
std::vector<int64_t> Complement(int64_t size, const std::vector<int64_t>& held_out);
std::vector<int64_t> AllRows(int64_t size);

// ImageFolder (datasets/imagefolder.cpp): train/<class>/, val/<class>/.
struct FolderIndex {
  std::vector<std::string> classes;  // label i is classes[i]
  std::vector<std::string> files;    // paths, in torchvision's order
  std::vector<int64_t> labels;
  int64_t skipped = 0;               // files that are not .jpg, .jpeg or .png
};
// The classes and files of one split's folder (known_classes: train's, for
// val/; empty: the sorted subfolders). Throws DataError naming the folder.
FolderIndex ScanImageFolder(const std::string& root, const std::vector<std::string>& known_classes);
DatasetInfo DescribeImageFolder(const DataSpec& spec);
std::unique_ptr<BatchSource> MakeImageFolderSource(const DataSpec& spec, int rank, int world, const std::string& split);

// Synthetic data (datasets/synthetic.cpp).
DatasetInfo DescribeSynthetic(const DataSpec& spec);
std::unique_ptr<BatchSource> MakeSyntheticTrainSource(const DataSpec& spec, int rank, int world);

// Checks the fields every source relies on; std::invalid_argument otherwise.
void ValidateSpec(const DataSpec& spec);
void ValidateRankWorld(int rank, int world);

}  // namespace ddpbench::detail
