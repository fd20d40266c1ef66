// Datasets: synthetic tensors, IDX (MNIST / Fashion-MNIST) and CIFAR binary,
// behind one BatchSource interface. A source is made for one (rank, world) pair
// and yields that rank's batches; every source is deterministic given the seed,
// so any process can rebuild exactly what rank r saw at step s (the parity
// check relies on this).
#pragma once

#include "datasets/load_stages.h"

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddpbench {

// Bad or unreadable data: the message names the file and what is wrong.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Batch {
  torch::Tensor images;  // float32 [N, C, H, W], normalised, on the source's device
  torch::Tensor labels;  // int64 [N], on the source's device
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// An in-memory labelled image set, as read from disk.
struct ImageSet {
  torch::Tensor images;  // uint8 [N, C, H, W] on the CPU
  torch::Tensor labels;  // int64 [N] on the CPU
  int64_t num_classes = 0;
};

struct DataSpec {
  std::string name = "synthetic";  // synthetic|mnist|fashion-mnist|cifar10|cifar100|imagefolder
  std::string data_dir;            // empty: the dataset's default (if any)
  int64_t image_size = 0;          // 0: the dataset's native size; else resized square
  int64_t batch_size = 32;         // per rank (per source)
  uint64_t seed = 0;
  bool augment = false;            // random crop (pad 4) + horizontal flip, train only
  int prefetch = 2;                // batches prepared ahead on background threads
  torch::Device device = torch::kCPU;
  bool channels_last = false;      // images handed over in channels-last (NHWC) strides
  // Real data: this fraction of the training set (a fixed, seed-chosen subset)
  // is held out as the validation set and never trained on; 0: none.
  double val_fraction = 0;
  // The training batch the source starts at (a resumed run's next step).
  int64_t start_batch = 0;
  // ImageFolder only: decode threads per source (each builds whole batches,
  // up to two per thread ahead), and whether an undecodable image is counted
  // and replaced by the next readable one instead of stopping the run.
  int data_workers = 1;
  bool skip_bad_images = false;
  // ImageFolder on a CUDA device: JPEGs decoded there by nvJPEG (--decode=gpu).
  bool gpu_decode = false;
  // Synthetic only:
  int64_t synthetic_classes = 1000;
  int64_t synthetic_channels = 3;
  int64_t synthetic_size = 10000;  // notional train-set size, for --epochs
};

struct DatasetInfo {
  std::string name;
  bool real = false;  // false for synthetic: no accuracy is reported
  int64_t channels = 0, height = 0, width = 0, num_classes = 0;
  int64_t train_size = 0, test_size = 0;  // train_size: after the validation hold-out
  int64_t val_size = 0;
  int64_t skipped_files = 0;  // imagefolder: files that are not images, left out
};

// Names accepted by --dataset, for messages and --help.
const std::vector<std::string>& DatasetNames();

// Reads the dataset's metadata (and checks its files); throws DataError.
DatasetInfo DescribeDataset(const DataSpec& spec);

// What a source's builders did so far: the rate they sustain when never kept
// waiting is images / busy_s x workers.
struct LoaderStats {
  int workers = 0;           // builder threads (0: built on the consumer's thread)
  int64_t images = 0;        // images built
  double busy_s = 0;         // seconds spent building, summed over the threads
  int64_t bad_images = 0;    // undecodable images skipped (--skip-bad-images)
  int64_t taken = 0;         // batches the consumer took
  double wait_s = 0;         // seconds the consumer waited for them
  StageSeconds stage_s{};    // image loaders: busy seconds per LoadStage, summed over the threads
  // The figures between two readings of the same source.
  LoaderStats Since(const LoaderStats& before) const {
    StageSeconds stages{};
    for (int i = 0; i < kLoadStages; ++i) stages[i] = stage_s[i] - before.stage_s[i];
    return {workers, images - before.images, busy_s - before.busy_s, bad_images - before.bad_images,
            taken - before.taken, wait_s - before.wait_s, stages};
  }
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch Next() = 0;                  // blocks until the next batch is ready
  virtual int64_t BatchesPerEpoch() const = 0;
  virtual LoaderStats Stats() const { return {}; }
};

// Training batches for `rank` of `world`: a DistributedSampler share of every
// epoch (padded as torch's DistributedSampler does), reshuffled per epoch with
// seed + epoch, full batches only (drop_last), endless across epochs. Batch k
// is a pure function of k, so spec.start_batch = k yields what the k-th call
// of a source started at 0 would.
std::unique_ptr<BatchSource> MakeTrainSource(const DataSpec& spec, int rank, int world);
// Test batches for `rank` of `world`: a disjoint, unpadded share of the test
// set (indices rank, rank + world, ...), no shuffling or augmentation, the last
// batch may be short; after BatchesPerEpoch() batches Next() returns an empty
// Batch. Synthetic data has no test set: returns nullptr.
std::unique_ptr<BatchSource> MakeTestSource(const DataSpec& spec, int rank, int world);
// The held-out validation batches (spec.val_fraction of the training set),
// shared out and batched as the test set is; nullptr when there are none.
std::unique_ptr<BatchSource> MakeValSource(const DataSpec& spec, int rank, int world);

// The training-set rows held out for validation: a seed-chosen
// round(fraction * size) of 0..size-1, ascending (exposed for tests).
std::vector<int64_t> ValidationRows(int64_t size, double fraction, uint64_t seed);

// --- building blocks, exposed for tests ----------------------------------
ImageSet ReadIdxPair(const std::string& images_path, const std::string& labels_path);
ImageSet ReadCifarFiles(const std::vector<std::string>& paths, bool cifar100);

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world, bool shuffle,
                     uint64_t seed, bool drop_last = false);
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> Indices() const;  // this rank's indices for the epoch
  int64_t NumSamples() const { return num_samples_; }

 private:
  int64_t size_;
  int rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace ddpbench
