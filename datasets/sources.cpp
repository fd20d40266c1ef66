// Dataset registry and the real-data batch sources. Files are found by their
// standard names, read once per process (a cache keyed by path, size and mtime,
// so train and test sources and every rank's source share one copy), and
// turned into batches the way torchvision's CIFAR/MNIST recipes do: uint8
// crop+flip (train only), float / 255, optional bilinear resize, per-channel
// normalisation. Every batch is a pure function of (seed, epoch, batch number),
// built on the CPU (identical bits whatever the device), so prefetch threads
// cannot change what a rank sees.
#include "datasets/internal.h"
#include "datasets/prefetch.h"
#include "harness/cuda_support.h"

#include <torch/torch.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>

namespace ddpbench {
namespace {

enum class Format { kSynthetic, kIdx, kCifar10, kCifar100, kImageFolder };

struct Traits {
  std::string name;
  Format format;
  std::string default_dir;  // empty: --data-dir is required
  int64_t channels, side, classes;
  std::vector<double> mean, std;
};

const std::vector<Traits>& AllTraits() {
  static const std::vector<Traits> traits = {
      {"synthetic", Format::kSynthetic, "", 0, 0, 0, {}, {}},
      {"mnist", Format::kIdx, "", 1, 28, 10, {0.1307}, {0.3081}},
      {"fashion-mnist", Format::kIdx, "/usr/share/datasets/fashion-mnist", 1, 28, 10, {0.2860}, {0.3530}},
      {"cifar10", Format::kCifar10, "", 3, 32, 10, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}},
      {"cifar100", Format::kCifar100, "", 3, 32, 100, {0.5071, 0.4865, 0.4409}, {0.2673, 0.2564, 0.2762}},
      {"imagefolder", Format::kImageFolder, "", 3, 224, 0, {}, {}},  // datasets/imagefolder.cpp
  };
  return traits;
}

// POSIX stat rather than std::filesystem: the torch wheel's libtorch.so
// exports std::filesystem symbols of its own that win symbol resolution and
// crash (remove_all jumps to address 0), so this code stays clear of them.
bool Stat(const std::string& path, struct stat* st) { return ::stat(path.c_str(), st) == 0; }
bool IsDirectory(const std::string& path) {
  struct stat st;
  return Stat(path, &st) && S_ISDIR(st.st_mode);
}
bool IsFile(const std::string& path) {
  struct stat st;
  return Stat(path, &st) && S_ISREG(st.st_mode);
}

std::string JoinNames(const std::vector<std::string>& names, const std::string& sep = ", ") {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : sep) + n;
  return out;
}

const Traits& Lookup(const std::string& name) {
  for (const auto& t : AllTraits()) {
    if (t.name == name) return t;
  }
  throw DataError("unknown dataset '" + name + "' (accepted: " + JoinNames(DatasetNames()) + ")");
}

// --- locating files ---------------------------------------------------------

std::vector<std::string> ExpectedNames(const Traits& t) {
  switch (t.format) {
    case Format::kIdx:
      return {"train-images-idx3-ubyte[.gz]", "train-labels-idx1-ubyte[.gz]",
              "t10k-images-idx3-ubyte[.gz]", "t10k-labels-idx1-ubyte[.gz]"};
    case Format::kCifar10:
      return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
              "data_batch_5.bin", "test_batch.bin"};
    case Format::kCifar100:
      return {"train.bin", "test.bin"};
    case Format::kImageFolder:
      return {"train/<class>/*.jpg|jpeg|png", "val/<class>/... (or --val-fraction)"};
    case Format::kSynthetic:
      break;
  }
  return {};
}

std::string DataDir(const DataSpec& spec, const Traits& t) {
  std::string dir = spec.data_dir.empty() ? t.default_dir : spec.data_dir;
  if (dir.empty()) {
    throw DataError("dataset '" + t.name + "' has no default directory: pass --data-dir, a directory holding " +
                    JoinNames(ExpectedNames(t)));
  }
  if (!IsDirectory(dir)) {
    throw DataError(dir + ": data directory for '" + t.name + "' does not exist or is not a directory (expected it to hold " +
                    JoinNames(ExpectedNames(t)) + ")");
  }
  return dir;
}

std::string IdxFile(const std::string& dir, const std::string& base, const Traits& t) {
  for (const std::string& candidate : {dir + "/" + base, dir + "/" + base + ".gz"}) {
    if (IsFile(candidate)) return candidate;
  }
  throw DataError(dir + "/" + base + "[.gz]: missing file for '" + t.name + "' (expected " +
                  JoinNames(ExpectedNames(t)) + " in " + dir + ")");
}

std::vector<std::string> CifarFiles(const std::string& dir, const Traits& t, bool train) {
  const bool c100 = t.format == Format::kCifar100;
  const std::string subdir = c100 ? "cifar-100-binary" : "cifar-10-batches-bin";
  const std::vector<std::string> names =
      c100 ? std::vector<std::string>{train ? "train.bin" : "test.bin"}
      : train ? std::vector<std::string>{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                         "data_batch_4.bin", "data_batch_5.bin"}
              : std::vector<std::string>{"test_batch.bin"};
  // The directory itself, or the one the official archive unpacks to inside it.
  std::string base = dir;
  if (!IsFile(dir + "/" + names[0]) && IsDirectory(dir + "/" + subdir)) base = dir + "/" + subdir;
  std::vector<std::string> paths;
  for (const auto& name : names) {
    const std::string path = base + "/" + name;
    if (!IsFile(path)) {
      throw DataError(path + ": missing file for '" + t.name + "' (expected " + JoinNames(ExpectedNames(t)) +
                      " in " + dir + " or in " + dir + "/" + subdir + ")");
    }
    paths.push_back(path);
  }
  return paths;
}

// --- the in-process cache ---------------------------------------------------

// One entry per list of files; the key carries size and mtime so that a file
// rewritten in place (tests do this) is read again rather than served stale.
std::string CacheKey(const std::vector<std::string>& paths) {
  std::ostringstream key;
  for (const auto& p : paths) {
    struct stat st {};
    Stat(p, &st);
    key << p << '\0' << st.st_size << '\0' << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec << '\0';
  }
  return key.str();
}

std::shared_ptr<const ImageSet> LoadSet(const DataSpec& spec, const Traits& t, bool train) {
  const std::string dir = DataDir(spec, t);
  std::vector<std::string> paths;
  if (t.format == Format::kIdx) {
    const std::string prefix = train ? "train" : "t10k";
    paths = {IdxFile(dir, prefix + "-images-idx3-ubyte", t), IdxFile(dir, prefix + "-labels-idx1-ubyte", t)};
  } else {
    paths = CifarFiles(dir, t, train);
  }
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const ImageSet>> cache;
  // Held while reading: concurrent callers want the same files, and reading
  // them twice at once would only double the I/O.
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = CacheKey(paths);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto set = std::make_shared<ImageSet>(t.format == Format::kIdx
                                            ? ReadIdxPair(paths[0], paths[1])
                                            : ReadCifarFiles(paths, t.format == Format::kCifar100));
  cache.emplace(key, set);
  return set;
}

// --- batches ----------------------------------------------------------------

constexpr int64_t kPad = 4;

// What turns dataset rows into a batch. Immutable once made, so the prefetch
// threads share it freely.
struct Transform final : detail::BatchMaker {
  std::shared_ptr<const ImageSet> set;
  torch::Tensor mean, std;  // float [1, C, 1, 1]
  int64_t image_size = 0;   // 0: native
  bool augment = false;
  uint64_t seed = 0;
  bool pin = false;  // pin host memory (CUDA destinations only)
  bool channels_last = false;  // hand images over in NHWC strides

  // Random crop (zero padding kPad) and horizontal flip per sample, decided by
  // hash(seed, epoch, dataset index): a sample's augmentation does not depend
  // on which rank or batch it lands in.
  torch::Tensor Augment(const torch::Tensor& images, const std::vector<int64_t>& rows, int64_t epoch) const {
    const int64_t h = images.size(2), w = images.size(3);
    const torch::Tensor padded = torch::constant_pad_nd(images, {kPad, kPad, kPad, kPad}, 0);
    torch::Tensor out = torch::empty_like(images);
    for (size_t i = 0; i < rows.size(); ++i) {
      const uint64_t r = detail::HashCombine(detail::HashCombine(detail::SplitMix64(seed), static_cast<uint64_t>(epoch)),
                                             static_cast<uint64_t>(rows[i]));
      const int64_t dy = static_cast<int64_t>(r % (2 * kPad + 1));
      const int64_t dx = static_cast<int64_t>((r >> 16) % (2 * kPad + 1));
      torch::Tensor crop = padded[static_cast<int64_t>(i)].narrow(1, dy, h).narrow(2, dx, w);
      if ((r >> 32) & 1) crop = crop.flip({2});
      out[static_cast<int64_t>(i)].copy_(crop);
    }
    return out;
  }

  Batch Make(const std::vector<int64_t>& rows, int64_t epoch, bool train) const override {
    const torch::Tensor index =
        torch::from_blob(const_cast<int64_t*>(rows.data()), {static_cast<int64_t>(rows.size())}, torch::kLong);
    torch::Tensor images = set->images.index_select(0, index);
    Batch batch;
    batch.labels = set->labels.index_select(0, index);
    if (train && augment) images = Augment(images, rows, epoch);
    torch::Tensor x = images.to(torch::kFloat).div_(255.0);
    if (image_size > 0 && (image_size != x.size(2) || image_size != x.size(3))) {
      namespace F = torch::nn::functional;
      x = F::interpolate(x, F::InterpolateFuncOptions()
                                .size(std::vector<int64_t>{image_size, image_size})
                                .mode(torch::kBilinear)
                                .align_corners(false));
    }
    x.sub_(mean).div_(std);
    if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    if (pin) {
      x = x.pin_memory();
      batch.labels = batch.labels.pin_memory();
    }
    batch.images = std::move(x);
    return batch;
  }
};

std::shared_ptr<const detail::BatchMaker> MakeTransform(const DataSpec& spec, const Traits& t,
                                                        std::shared_ptr<const ImageSet> set) {
  auto made = std::make_shared<Transform>();
  Transform& tr = *made;
  tr.set = std::move(set);
  const auto c = static_cast<int64_t>(t.mean.size());
  tr.mean = torch::tensor(t.mean, torch::kFloat).view({1, c, 1, 1});
  tr.std = torch::tensor(t.std, torch::kFloat).view({1, c, 1, 1});
  tr.image_size = spec.image_size;
  tr.augment = spec.augment;
  tr.seed = spec.seed;
  tr.pin = spec.device.is_cuda();
  tr.channels_last = spec.channels_last;
  return made;
}

// CUDA: the pinned batch is copied on a side stream that the training
// stream waits for through an event, so the copy overlaps the GPU work
// queued before it and the host never waits.
Batch ToDevice(Batch batch, const torch::Device& device) {
  if (!batch.labels.defined() || device.is_cpu()) return batch;
  if (device.is_cuda()) {
    batch.images = CopyToDeviceOnSideStream(batch.images, device.index());
    batch.labels = CopyToDeviceOnSideStream(batch.labels, device.index());
    return batch;
  }
  batch.images = batch.images.to(device);
  batch.labels = batch.labels.to(device);
  return batch;
}

class TrainSource final : public BatchSource {
 public:
  // rows: the dataset rows trained on (all but the validation hold-out).
  TrainSource(const DataSpec& spec, int rank, int world, std::shared_ptr<const detail::BatchMaker> maker,
              std::vector<int64_t> rows, int threads, int ahead)
      : maker_(std::move(maker)),
        rows_(std::move(rows)),
        sampler_(static_cast<int64_t>(rows_.size()), rank, world, /*shuffle=*/true, spec.seed, /*drop_last=*/false),
        batch_size_(spec.batch_size),
        device_(spec.device) {
    batches_per_epoch_ = sampler_.NumSamples() / batch_size_;
    if (batches_per_epoch_ == 0) {
      throw DataError("'" + spec.name + "': batch size " + std::to_string(batch_size_) +
                      " is larger than rank " + std::to_string(rank) + "'s share of the training set (" +
                      std::to_string(sampler_.NumSamples()) + " samples of " + std::to_string(rows_.size()) +
                      " over " + std::to_string(world) + " ranks): no full batch per epoch");
    }
    queue_ = std::make_unique<detail::PrefetchQueue>([this](int64_t k) { return Build(k); }, -1, threads,
                                                     spec.start_batch, ahead);
  }

  Batch Next() override {
    const auto start = std::chrono::steady_clock::now();
    Batch batch = queue_->Next();
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++taken_;
    return maker_->OnDevice(ToDevice(std::move(batch), device_));
  }
  int64_t BatchesPerEpoch() const override { return batches_per_epoch_; }
  LoaderStats Stats() const override {
    return {queue_->Threads(), queue_->Built() * batch_size_, queue_->BusySeconds(), maker_->BadImages(), taken_,
            wait_s_, maker_->StageTotals()};
  }

 private:
  std::shared_ptr<const std::vector<int64_t>> EpochIndices(int64_t epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = epochs_.find(epoch);
    if (it != epochs_.end()) return it->second;
    // Workers never run more than `prefetch` batches ahead, so older epochs
    // are done with (and recomputing one would give the same order anyway).
    while (!epochs_.empty() && epochs_.begin()->first < epoch - 1) epochs_.erase(epochs_.begin());
    DistributedSampler sampler = sampler_;
    sampler.SetEpoch(epoch);
    auto indices = std::make_shared<const std::vector<int64_t>>(sampler.Indices());
    epochs_.emplace(epoch, indices);
    return indices;
  }

  Batch Build(int64_t k) {
    const int64_t epoch = k / batches_per_epoch_, b = k % batches_per_epoch_;
    const auto indices = EpochIndices(epoch);
    std::vector<int64_t> batch_rows(static_cast<size_t>(batch_size_));
    for (int64_t i = 0; i < batch_size_; ++i) batch_rows[i] = rows_[(*indices)[b * batch_size_ + i]];
    return maker_->Make(batch_rows, epoch, /*train=*/true);
  }

  const std::shared_ptr<const detail::BatchMaker> maker_;
  const std::vector<int64_t> rows_;
  const DistributedSampler sampler_;
  const int64_t batch_size_;
  const torch::Device device_;
  int64_t batches_per_epoch_ = 0;
  int64_t taken_ = 0;   // consumer thread only
  double wait_s_ = 0;   // consumer thread only
  std::mutex mu_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> epochs_;
  std::unique_ptr<detail::PrefetchQueue> queue_;  // last: stopped before the rest goes
};

// One pass over fixed rows (the test set, or the validation hold-out): rank r
// takes rows r, r + world, ... in order.
class EvalSource final : public BatchSource {
 public:
  EvalSource(const DataSpec& spec, int rank, int world, std::shared_ptr<const detail::BatchMaker> maker,
             const std::vector<int64_t>& rows, int threads, int ahead)
      : maker_(std::move(maker)), batch_size_(spec.batch_size), device_(spec.device) {
    for (size_t i = static_cast<size_t>(rank); i < rows.size(); i += static_cast<size_t>(world))
      share_.push_back(rows[i]);
    const auto share = static_cast<int64_t>(share_.size());
    batches_per_epoch_ = (share + batch_size_ - 1) / batch_size_;
    queue_ = std::make_unique<detail::PrefetchQueue>([this](int64_t k) { return Build(k); },
                                                     batches_per_epoch_, threads, 0, ahead);
  }

  Batch Next() override {
    Batch batch = queue_->Next();
    return batch.size() ? maker_->OnDevice(ToDevice(std::move(batch), device_)) : batch;
  }
  int64_t BatchesPerEpoch() const override { return batches_per_epoch_; }

 private:
  Batch Build(int64_t k) const {
    const auto begin = share_.begin() + k * batch_size_;
    const auto end = share_.begin() + std::min<int64_t>((k + 1) * batch_size_, static_cast<int64_t>(share_.size()));
    return maker_->Make(std::vector<int64_t>(begin, end), /*epoch=*/0, /*train=*/false);
  }

  const std::shared_ptr<const detail::BatchMaker> maker_;
  const int64_t batch_size_;
  const torch::Device device_;
  std::vector<int64_t> share_;
  int64_t batches_per_epoch_ = 0;
  std::unique_ptr<detail::PrefetchQueue> queue_;  // last: stopped before the rest goes
};

}  // namespace

namespace detail {

std::unique_ptr<BatchSource> MakeTrainSourceWith(const DataSpec& spec, int rank, int world,
                                                 std::shared_ptr<const BatchMaker> maker, std::vector<int64_t> rows,
                                                 int threads, int ahead) {
  return std::make_unique<TrainSource>(spec, rank, world, std::move(maker), std::move(rows), threads, ahead);
}

std::unique_ptr<BatchSource> MakeEvalSourceWith(const DataSpec& spec, int rank, int world,
                                                std::shared_ptr<const BatchMaker> maker,
                                                const std::vector<int64_t>& rows, int threads, int ahead) {
  return std::make_unique<EvalSource>(spec, rank, world, std::move(maker), rows, threads, ahead);
}

void ValidateSpec(const DataSpec& spec) {
  if (spec.batch_size < 1) {
    throw std::invalid_argument("batch size must be >= 1, got " + std::to_string(spec.batch_size));
  }
  if (spec.image_size < 0) {
    throw std::invalid_argument("image size must be >= 0 (0: native), got " + std::to_string(spec.image_size));
  }
  if (spec.prefetch < 0) {
    throw std::invalid_argument("prefetch must be >= 0, got " + std::to_string(spec.prefetch));
  }
}

void ValidateRankWorld(int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument("invalid rank " + std::to_string(rank) + " of world " + std::to_string(world) +
                                " (need world >= 1 and 0 <= rank < world)");
  }
}

// Every row of 0..size-1 not in `held_out` (ascending).
std::vector<int64_t> Complement(int64_t size, const std::vector<int64_t>& held_out) {
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(size) - held_out.size());
  size_t h = 0;
  for (int64_t i = 0; i < size; ++i) {
    if (h < held_out.size() && held_out[h] == i) {
      ++h;
      continue;
    }
    rows.push_back(i);
  }
  return rows;
}

std::vector<int64_t> AllRows(int64_t size) { return Complement(size, {}); }

}  // namespace detail

namespace {

void CheckFraction(double fraction) {
  if (!(fraction >= 0 && fraction < 1))
    throw std::invalid_argument("validation fraction must be in [0, 1), got " + std::to_string(fraction));
}

}  // namespace

std::vector<int64_t> ValidationRows(int64_t size, double fraction, uint64_t seed) {
  CheckFraction(fraction);
  const auto count = static_cast<int64_t>(std::llround(fraction * static_cast<double>(size)));
  // Rows ranked by a hash of (seed, row): a fixed, uniform pick of `count`.
  std::vector<std::pair<uint64_t, int64_t>> ranked;
  ranked.reserve(static_cast<size_t>(size));
  const uint64_t key = detail::HashCombine(detail::SplitMix64(seed), 0x76616cULL);  // "val"
  for (int64_t i = 0; i < size; ++i) ranked.emplace_back(detail::HashCombine(key, static_cast<uint64_t>(i)), i);
  std::partial_sort(ranked.begin(), ranked.begin() + count, ranked.end());
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < count; ++i) rows.push_back(ranked[static_cast<size_t>(i)].second);
  std::sort(rows.begin(), rows.end());
  return rows;
}

namespace {

// The training rows of `set` after the hold-out.
std::vector<int64_t> TrainRows(const DataSpec& spec, int64_t size) {
  return detail::Complement(size, ValidationRows(size, spec.val_fraction, spec.seed));
}

}  // namespace

const std::vector<std::string>& DatasetNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& t : AllTraits()) out.push_back(t.name);
    return out;
  }();
  return names;
}

DatasetInfo DescribeDataset(const DataSpec& spec) {
  const Traits& t = Lookup(spec.name);
  detail::ValidateSpec(spec);
  if (t.format == Format::kSynthetic) return detail::DescribeSynthetic(spec);
  if (t.format == Format::kImageFolder) return detail::DescribeImageFolder(spec);
  const auto train = LoadSet(spec, t, true);
  const auto test = LoadSet(spec, t, false);
  DatasetInfo info;
  info.name = t.name;
  info.real = true;
  info.channels = train->images.size(1);
  info.height = spec.image_size > 0 ? spec.image_size : train->images.size(2);
  info.width = spec.image_size > 0 ? spec.image_size : train->images.size(3);
  info.num_classes = t.classes;
  info.val_size = static_cast<int64_t>(ValidationRows(train->labels.size(0), spec.val_fraction, spec.seed).size());
  info.train_size = train->labels.size(0) - info.val_size;
  info.test_size = test->labels.size(0);
  return info;
}

std::unique_ptr<BatchSource> MakeTrainSource(const DataSpec& spec, int rank, int world) {
  const Traits& t = Lookup(spec.name);
  detail::ValidateSpec(spec);
  detail::ValidateRankWorld(rank, world);
  if (t.format == Format::kSynthetic) return detail::MakeSyntheticTrainSource(spec, rank, world);
  if (t.format == Format::kImageFolder) return detail::MakeImageFolderSource(spec, rank, world, "train");
  auto set = LoadSet(spec, t, true);
  std::vector<int64_t> rows = TrainRows(spec, set->labels.size(0));
  return std::make_unique<TrainSource>(spec, rank, world, MakeTransform(spec, t, std::move(set)), std::move(rows),
                                       spec.prefetch, 0);
}

std::unique_ptr<BatchSource> MakeTestSource(const DataSpec& spec, int rank, int world) {
  const Traits& t = Lookup(spec.name);
  detail::ValidateSpec(spec);
  detail::ValidateRankWorld(rank, world);
  if (t.format == Format::kSynthetic) return nullptr;
  if (t.format == Format::kImageFolder) return detail::MakeImageFolderSource(spec, rank, world, "test");
  auto set = LoadSet(spec, t, false);
  const std::vector<int64_t> rows = detail::AllRows(set->labels.size(0));
  return std::make_unique<EvalSource>(spec, rank, world, MakeTransform(spec, t, std::move(set)), rows, spec.prefetch, 0);
}

std::unique_ptr<BatchSource> MakeValSource(const DataSpec& spec, int rank, int world) {
  const Traits& t = Lookup(spec.name);
  detail::ValidateSpec(spec);
  detail::ValidateRankWorld(rank, world);
  if (t.format == Format::kSynthetic || spec.val_fraction <= 0) return nullptr;
  if (t.format == Format::kImageFolder) return detail::MakeImageFolderSource(spec, rank, world, "val");
  auto set = LoadSet(spec, t, true);
  const std::vector<int64_t> rows = ValidationRows(set->labels.size(0), spec.val_fraction, spec.seed);
  if (rows.empty()) return nullptr;
  return std::make_unique<EvalSource>(spec, rank, world, MakeTransform(spec, t, std::move(set)), rows, spec.prefetch, 0);
}

}  // namespace ddpbench
