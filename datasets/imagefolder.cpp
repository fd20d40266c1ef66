// The ImageFolder dataset: DIR/train/<class>/... and
// DIR/val/<class>/... read by torchvision's rules (classes are the sorted
// subfolder names; files are found by walking each class folder, sorted by
// folder path and then by name; extensions .jpg, .jpeg and .png in any case,
// other files skipped and counted). Samples are decoded and transformed by a
// pool of threads (the prefetching sources of sources.cpp, data_workers
// threads, two batches per thread ahead). For a GPU they travel as uint8
// (a quarter of the bytes over the bus) and are normalised on the device;
// for a CPU device each worker normalises its own batch in one pass through
// a table of the 256 values per channel, so that the training thread is
// not the one doing it for every worker, into memory reused batch after
// batch (datasets/batch_pool.h). Every sample is a pure function of
// (seed, epoch, index). Each worker's time is clocked per stage (read,
// header, decode, resize, normalise, collate) for the row's figures. With
// --decode=gpu a worker reads the files and draws the crops, and nvJPEG
// decodes, crops and resizes the batch on the device (datasets/gpu_decode.h;
// its decode stage holds that wait), the CPU decoding what nvJPEG refuses.
#include "datasets/batch_pool.h"
#include "datasets/gpu_decode.h"
#include "datasets/image_transforms.h"
#include "datasets/internal.h"

#include <torch/torch.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cctype>
#include <iterator>
#include <map>
#include <mutex>

namespace ddpbench {
namespace detail {
namespace {

constexpr int64_t kDefaultImageSize = 224;

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The entries of a directory (not . and ..), sorted; symbolic links followed.
void ListDir(const std::string& dir, std::vector<std::string>* dirs, std::vector<std::string>* files) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw DataError(dir + ": cannot open the folder");
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    (IsDir(dir + "/" + name) ? dirs : files)->push_back(name);
  }
  ::closedir(d);
  std::sort(dirs->begin(), dirs->end());
  std::sort(files->begin(), files->end());
}

bool IsImageName(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    const std::string e = ext;
    if (lower.size() > e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

// Every folder under `dir` (itself included) with its files, ordered as
// torchvision's sorted(os.walk(dir)) orders them: by folder path.
void Walk(const std::string& dir, std::vector<std::pair<std::string, std::vector<std::string>>>* out, int depth = 0) {
  if (depth > 32) throw DataError(dir + ": folders nested more than 32 deep (a symbolic link loop?)");
  std::vector<std::string> dirs, files;
  ListDir(dir, &dirs, &files);
  out->emplace_back(dir, std::move(files));
  for (const auto& sub : dirs) Walk(dir + "/" + sub, out, depth + 1);
}

std::string Joined(const std::vector<std::string>& names, size_t most = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i) out += (i ? ", " : "") + names[i];
  return names.size() > most ? out + ", ..." : out;
}

}  // namespace

FolderIndex ScanImageFolder(const std::string& root, const std::vector<std::string>& known_classes) {
  FolderIndex index;
  std::vector<std::string> class_dirs, loose;
  ListDir(root, &class_dirs, &loose);
  if (class_dirs.empty())
    throw DataError(root + ": no class folders (expected " + root + "/<class>/ holding .jpg, .jpeg or .png files)");
  index.classes = known_classes.empty() ? class_dirs : known_classes;
  std::map<std::string, int64_t> label_of;
  for (size_t i = 0; i < index.classes.size(); ++i) label_of[index.classes[i]] = static_cast<int64_t>(i);
  index.skipped = static_cast<int64_t>(loose.size());
  for (const auto& name : class_dirs) {
    const auto label = label_of.find(name);
    if (label == label_of.end())
      throw DataError(root + "/" + name + ": class '" + name + "' is not one of train/'s " +
                      std::to_string(index.classes.size()) + " classes (" + Joined(index.classes) + ")");
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    Walk(root + "/" + name, &folders);
    std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    int64_t found = 0, other = 0;
    for (const auto& [folder, files] : folders) {
      for (const auto& f : files) {
        if (!IsImageName(f)) {
          ++other;
          continue;
        }
        index.files.push_back(folder + "/" + f);
        index.labels.push_back(label->second);
        ++found;
      }
    }
    index.skipped += other;
    if (found == 0)
      throw DataError(root + "/" + name + ": class folder with no .jpg, .jpeg or .png files (" + std::to_string(other) +
                      " other files)");
  }
  return index;
}

namespace {

struct Folders {
  std::string root;
  std::shared_ptr<const FolderIndex> train, val;  // val: null without DIR/val
};

// Scanned once per process and root (train, test and every rank's sources share it).
Folders ScanRoot(const DataSpec& spec) {
  if (spec.data_dir.empty())
    throw DataError("dataset 'imagefolder' needs --data-dir=DIR, a folder holding train/<class>/ and val/<class>/");
  const std::string& root = spec.data_dir;
  if (!IsDir(root + "/train"))
    throw DataError(root + "/train: no such folder (an ImageFolder dataset is DIR/train/<class>/ image files, "
                    "with DIR/val/<class>/ or --val-fraction for evaluation)");
  static std::mutex mu;
  static std::map<std::string, Folders> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(root);
  if (it != cache.end()) return it->second;
  Folders f{root, std::make_shared<const FolderIndex>(ScanImageFolder(root + "/train", {})), nullptr};
  if (IsDir(root + "/val")) f.val = std::make_shared<const FolderIndex>(ScanImageFolder(root + "/val", f.train->classes));
  cache.emplace(root, f);
  return f;
}

// One thread's clock over a batch: each Mark(stage) adds the time since the
// previous mark to that stage's total.
class StageClock {
 public:
  using Totals = std::array<std::atomic<int64_t>, kLoadStages>;  // nanoseconds
  explicit StageClock(Totals* totals) : totals_(totals), last_(std::chrono::steady_clock::now()) {}
  void Mark(LoadStage stage) {
    const auto now = std::chrono::steady_clock::now();
    (*totals_)[static_cast<int>(stage)] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  Totals* totals_;
  std::chrono::steady_clock::time_point last_;
};

// Decodes and transforms the samples of one folder index into uint8 batches.
class ImageFolderMaker final : public BatchMaker {
 public:
  ImageFolderMaker(const DataSpec& spec, std::shared_ptr<const FolderIndex> index)
      : index_(std::move(index)),
        size_(spec.image_size > 0 ? spec.image_size : kDefaultImageSize),
        seed_(spec.seed),
        skip_bad_(spec.skip_bad_images),
        pin_(spec.device.is_cuda()),
        in_worker_(!spec.device.is_cuda()),
        channels_last_(spec.channels_last),
        workers_(spec.data_workers),
        gpu_decode_(spec.gpu_decode),
        device_index_(spec.device.has_index() ? spec.device.index() : 0),
        mean_(torch::tensor(kImageNetMean, torch::kFloat).view({1, 3, 1, 1}).to(spec.device)),
        std_(torch::tensor(kImageNetStd, torch::kFloat).view({1, 3, 1, 1}).to(spec.device)) {}

  Batch Make(const std::vector<int64_t>& rows, int64_t epoch, bool train) const override {
    if (gpu_decode_) return MakeOnGpu(rows, epoch, train);
    StageClock clock(&stage_ns_);
    const auto n = static_cast<int64_t>(rows.size());
    torch::Tensor images = torch::empty({n, 3, size_, size_}, torch::kUInt8);
    torch::Tensor labels = torch::empty({n}, torch::kLong);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = Sample(rows[static_cast<size_t>(i)], epoch, train, images[i], &clock);
      labels[i] = index_->labels[static_cast<size_t>(row)];
      clock.Mark(LoadStage::kCollate);
    }
    if (in_worker_) {
      Batch batch{Normalise(images), labels};
      clock.Mark(LoadStage::kNormalise);
      return batch;
    }
    if (pin_) {
      images = images.pin_memory();
      labels = labels.pin_memory();
    }
    clock.Mark(LoadStage::kCollate);
    return {images, labels};
  }

  // --decode=gpu: files read and crops drawn here, the batch decoded on the
  // device; a file nvJPEG refuses is decoded here as without the flag.
  Batch MakeOnGpu(const std::vector<int64_t>& rows, int64_t epoch, bool train) const {
    StageClock clock(&stage_ns_);
    std::vector<int64_t> used(rows.size());  // the row each sample came from
    std::vector<std::string> bytes(rows.size());
    std::vector<GpuDecodeJob> jobs(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) used[i] = Plan(rows[i], epoch, train, &bytes[i], &jobs[i], &clock);
    const auto on_cpu = [&](const std::vector<int64_t>& refused) {
      clock.Mark(LoadStage::kDecode);  // nvJPEG's share so far; the CPU's stages follow
      torch::Tensor host = torch::empty({static_cast<int64_t>(refused.size()), 3, size_, size_}, torch::kUInt8);
      for (size_t j = 0; j < refused.size(); ++j) {
        int64_t& row = used[static_cast<size_t>(refused[j])];
        row = Sample(row, epoch, train, host[static_cast<int64_t>(j)], &clock);
      }
      return host;
    };
    DecoderLease decoder(this);
    torch::Tensor images = decoder->Decode(jobs, size_, on_cpu);
    clock.Mark(LoadStage::kDecode);
    torch::Tensor labels = torch::empty({static_cast<int64_t>(rows.size())}, torch::kLong);
    for (size_t i = 0; i < used.size(); ++i) labels[static_cast<int64_t>(i)] = index_->labels[static_cast<size_t>(used[i])];
    labels = labels.pin_memory();
    clock.Mark(LoadStage::kCollate);
    return {images, labels};
  }

  // On the device: uint8 -> float, / 255, ImageNet mean and std.
  Batch OnDevice(Batch batch) const override {
    if (batch.images.defined() && !in_worker_) batch.images = Normalise(batch.images);
    return batch;
  }

  int64_t BadImages() const override { return bad_.load(); }
  StageSeconds StageTotals() const override {
    StageSeconds s{};
    for (int i = 0; i < kLoadStages; ++i) s[i] = static_cast<double>(stage_ns_[i].load()) * 1e-9;
    return s;
  }

 private:
  // uint8 [N, 3, H, W] as float (x / 255 - mean) / std, in the run's memory format.
  torch::Tensor Normalise(const torch::Tensor& images) const {
    if (in_worker_) {
      std::vector<int64_t> sizes(images.sizes().begin(), images.sizes().end());
      return NormaliseImageNetOnHost(images, channels_last_, pool_->EmptyFloat(sizes, channels_last_));
    }
    torch::Tensor x = images.to(torch::kFloat).div_(255.0).sub_(mean_).div_(std_);
    return channels_last_ ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
  }

  // The first row from `row` on for which use(row) does not throw
  // DataError: `row` itself, or with --skip-bad-images the next readable one
  // (each one passed over counted).
  template <typename Use>
  int64_t FirstUsable(int64_t row, const Use& use) const {
    const auto total = static_cast<int64_t>(index_->files.size());
    for (int64_t tried = 0;; ++tried) {
      const int64_t r = (row + tried) % total;
      try {
        use(r);
        return r;
      } catch (const DataError&) {
        if (!skip_bad_) throw;
        ++bad_;
        if (tried + 1 >= total) throw DataError(index_->files.front() + " ...: no image of the folder could be decoded");
      }
    }
  }

  // Every random choice of row r's sample in `epoch`.
  uint64_t KeyOf(int64_t epoch, int64_t r) const {
    return HashCombine(HashCombine(SplitMix64(seed_), static_cast<uint64_t>(epoch)), static_cast<uint64_t>(r));
  }

  // Writes row's sample into `out`; returns the row used.
  int64_t Sample(int64_t row, int64_t epoch, bool train, torch::Tensor out, StageClock* clock) const {
    const StageMark mark = [clock](LoadStage stage) { clock->Mark(stage); };
    return FirstUsable(row, [&](int64_t r) {
      const std::string& path = index_->files[static_cast<size_t>(r)];
      const std::string bytes = ReadFileBytes(path);
      clock->Mark(LoadStage::kRead);
      const uint64_t key = KeyOf(epoch, r);
      out.copy_(train ? TrainSample(path, bytes, size_, key, mark) : EvalSample(path, bytes, size_, mark));
    });
  }

  // --decode=gpu: row's bytes and its crop (drawn from the header, as the CPU
  // path draws it) into *bytes and *job; returns the row used.
  int64_t Plan(int64_t row, int64_t epoch, bool train, std::string* bytes, GpuDecodeJob* job, StageClock* clock) const {
    return FirstUsable(row, [&](int64_t r) {
      const std::string& path = index_->files[static_cast<size_t>(r)];
      *bytes = ReadFileBytes(path);
      clock->Mark(LoadStage::kRead);
      const ImageHeader header = ReadImageHeader(path, *bytes);
      const uint64_t key = KeyOf(epoch, r);
      job->bytes = bytes;
      job->box = train ? RandomResizedCropBox(header.height, header.width, key)
                       : EvalCropBox(header.height, header.width, size_);
      job->flip = train && FlipOf(key);
      clock->Mark(LoadStage::kHeader);
    });
  }

  // One worker's nvJPEG decoder, taken from the maker's (made on first use)
  // and given back when done: each worker thread decodes with its own.
  class DecoderLease {
   public:
    explicit DecoderLease(const ImageFolderMaker* maker) : maker_(maker) {
      std::lock_guard<std::mutex> lock(maker_->decoders_mu_);
      if (!maker_->decoders_.empty()) {
        decoder_ = std::move(maker_->decoders_.back());
        maker_->decoders_.pop_back();
      }
      if (!decoder_) decoder_ = std::make_unique<GpuJpegDecoder>(maker_->device_index_);
    }
    ~DecoderLease() {
      std::lock_guard<std::mutex> lock(maker_->decoders_mu_);
      maker_->decoders_.push_back(std::move(decoder_));
    }
    GpuJpegDecoder* operator->() const { return decoder_.get(); }

   private:
    const ImageFolderMaker* maker_;
    std::unique_ptr<GpuJpegDecoder> decoder_;
  };

  std::shared_ptr<const FolderIndex> index_;
  const int64_t size_;
  const uint64_t seed_;
  const bool skip_bad_, pin_, in_worker_, channels_last_;
  const int workers_;
  const bool gpu_decode_;
  const int device_index_;
  const torch::Tensor mean_, std_;
  mutable std::atomic<int64_t> bad_{0};
  mutable StageClock::Totals stage_ns_{};
  // The float batches' memory, reused: enough for every batch queued (2 per
  // worker), being built (1 per worker) and held by the loop (2).
  mutable std::mutex decoders_mu_;
  mutable std::vector<std::unique_ptr<GpuJpegDecoder>> decoders_;  // --decode=gpu: the idle ones
  const std::shared_ptr<BatchPool> pool_ = BatchPool::Make(static_cast<size_t>(3 * std::max(1, workers_) + 2));
};

void NeedEvaluationSet(const Folders& f, const DataSpec& spec) {
  if (!f.val && spec.val_fraction <= 0)
    throw DataError(f.root + "/val: no such folder; add val/<class>/ folders, or hold out part of train/ with "
                    "--val-fraction (e.g. 0.1)");
}

}  // namespace

DatasetInfo DescribeImageFolder(const DataSpec& spec) {
  const Folders f = ScanRoot(spec);
  NeedEvaluationSet(f, spec);
  const auto n = static_cast<int64_t>(f.train->files.size());
  const auto held = static_cast<int64_t>(ValidationRows(n, spec.val_fraction, spec.seed).size());
  DatasetInfo info;
  info.name = "imagefolder";
  info.real = true;
  info.channels = 3;
  info.height = info.width = spec.image_size > 0 ? spec.image_size : kDefaultImageSize;
  info.num_classes = static_cast<int64_t>(f.train->classes.size());
  info.train_size = n - held;
  info.val_size = f.val ? held : 0;
  info.test_size = f.val ? static_cast<int64_t>(f.val->files.size()) : held;
  info.skipped_files = f.train->skipped + (f.val ? f.val->skipped : 0);
  return info;
}

std::unique_ptr<BatchSource> MakeImageFolderSource(const DataSpec& spec, int rank, int world, const std::string& split) {
  const Folders f = ScanRoot(spec);
  NeedEvaluationSet(f, spec);
  const auto n = static_cast<int64_t>(f.train->files.size());
  const std::vector<int64_t> held = ValidationRows(n, spec.val_fraction, spec.seed);
  const int workers = std::max(1, spec.data_workers);
  auto train_maker = [&] { return std::make_shared<ImageFolderMaker>(spec, f.train); };
  if (split == "train")
    return MakeTrainSourceWith(spec, rank, world, train_maker(), Complement(n, held), workers, 2 * workers);
  if (split == "test" && f.val)
    return MakeEvalSourceWith(spec, rank, world, std::make_shared<ImageFolderMaker>(spec, f.val),
                              AllRows(static_cast<int64_t>(f.val->files.size())), workers, 2 * workers);
  // The held-out part of train/: the test set without val/, the validation set with it.
  if ((split == "test") == !f.val && !held.empty())
    return MakeEvalSourceWith(spec, rank, world, train_maker(), held, workers, 2 * workers);
  return nullptr;
}

}  // namespace detail
}  // namespace ddpbench
