// Tests for the ImageFolder dataset (datasets/imagefolder.cpp and
// image_transforms.cpp): the scan gives torchvision's classes, labels and
// order on a made-up tree (tests/data/imagefolder_order.txt, checked against
// torchvision by tests/python/imagefolder_order_test.py); each bad layout has
// its message; crop and flip geometry against hand-computed cases; samples
// are a pure function of (seed, epoch, index), also after a resume; what
// --decode=gpu offers nvJPEG and its refusals.
#include "app/cli.h"
#include "datasets/batch_pool.h"
#include "datasets/dataset.h"
#include "datasets/gpu_decode.h"
#include "datasets/image_transforms.h"
#include "datasets/internal.h"
#include "harness/cuda_support.h"
#include "tests/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <sys/stat.h>

#include <chrono>
#include <sstream>
#include <thread>

namespace ddpbench {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

const std::string kData = std::string(DDPBENCH_SOURCE_DIR) + "/tests/data/";

void MakeDirs(const std::string& path) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    ::mkdir(path.substr(0, at).c_str(), 0755);
  ::mkdir(path.c_str(), 0755);
}

// Creates `rel` under `root` holding `bytes` (its folders too).
void Put(const std::string& root, const std::string& rel, const std::string& bytes = "") {
  MakeDirs(root + "/" + rel.substr(0, rel.rfind('/')));
  WriteFile(root + "/" + rel, bytes);
}

std::vector<std::string> DataLines(const std::string& name) {
  std::istringstream in(ReadFile(kData + name));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

std::string DataErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ImageFolderScanTest, ClassesLabelsAndOrderAreTorchvisions) {
  TempDir dir;
  for (const auto& rel : DataLines("imagefolder_tree.txt")) Put(dir.path(), rel);
  const detail::FolderIndex train = detail::ScanImageFolder(dir.File("train"), {});
  const detail::FolderIndex val = detail::ScanImageFolder(dir.File("val"), train.classes);
  EXPECT_EQ(train.classes, (std::vector<std::string>{"B", "a", "a-b", "a_b", "c"}));
  std::vector<std::string> got;
  for (const auto* index : {&train, &val}) {
    for (size_t i = 0; i < index->files.size(); ++i)
      got.push_back(std::to_string(index->labels[i]) + " " + index->files[i].substr(dir.path().size() + 1));
  }
  EXPECT_EQ(got, DataLines("imagefolder_order.txt"));
  EXPECT_EQ(train.skipped, 2);  // notes.txt, k.gif
  EXPECT_EQ(val.skipped, 0);
}

TEST(ImageFolderScanTest, BadLayoutsHaveOneMessageEach) {
  TempDir dir;
  MakeDirs(dir.File("none"));
  Put(dir.path(), "none/loose.jpg");
  EXPECT_THAT(DataErrorOf([&] { detail::ScanImageFolder(dir.File("none"), {}); }), HasSubstr("none: no class folders"));
  Put(dir.path(), "empty/cat/1.jpg");
  Put(dir.path(), "empty/dog/readme.txt");
  EXPECT_THAT(DataErrorOf([&] { detail::ScanImageFolder(dir.File("empty"), {}); }),
              HasSubstr("empty/dog: class folder with no .jpg, .jpeg or .png files (1 other files)"));
  Put(dir.path(), "val/cow/1.jpg");
  EXPECT_THAT(DataErrorOf([&] { detail::ScanImageFolder(dir.File("val"), {"cat", "dog"}); }),
              HasSubstr("val/cow: class 'cow' is not one of train/'s 2 classes (cat, dog)"));
  DataSpec spec;
  spec.name = "imagefolder";
  EXPECT_THAT(DataErrorOf([&] { DescribeDataset(spec); }), HasSubstr("needs --data-dir=DIR"));
  spec.data_dir = dir.path();
  EXPECT_THAT(DataErrorOf([&] { DescribeDataset(spec); }), HasSubstr("/train: no such folder"));
  Put(dir.path(), "train/cat/1.jpg");
  std::remove(dir.File("val/cow/1.jpg").c_str());
  ::rmdir(dir.File("val/cow").c_str());
  ::rmdir(dir.File("val").c_str());
  EXPECT_THAT(DataErrorOf([&] { DescribeDataset(spec); }), HasSubstr("/val: no such folder; add val/<class>/ folders, or hold out"));
}

// --- geometry ----------------------------------------------------------------

TEST(ImageTransformTest, RandomResizedCropFallsBackToTheCentralBox) {
  // 10 x 1000: no area of 8-100% fits at ratio 3/4-4/3, so every key gives
  // torchvision's fallback: full height, width round(10 * 4/3) = 13, centred.
  for (uint64_t key : {0ULL, 1ULL, 12345ULL}) EXPECT_EQ(RandomResizedCropBox(10, 1000, key), (CropBox{0, 493, 10, 13}));
  EXPECT_EQ(RandomResizedCropBox(1000, 10, 7), (CropBox{493, 0, 13, 10}));
}

TEST(ImageTransformTest, RandomResizedCropStaysInsideAndInTheLimits) {
  for (uint64_t key = 0; key < 500; ++key) {
    const CropBox b = RandomResizedCropBox(375, 500, key);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, 375);
    ASSERT_LE(b.left + b.width, 500);
    const double area = static_cast<double>(b.height * b.width) / (375 * 500);
    EXPECT_GE(area, 0.075) << key;  // 0.08 less rounding
    EXPECT_EQ(RandomResizedCropBox(375, 500, key), b);  // a pure function of the key
  }
}

// The scale (crop area / image area) and log aspect ratio of 10,000 crops of
// a 375 x 500 image (keys 0..9999), each as 10 equal bins over torchvision's
// limits (values rounded just outside go to the end bins), the crops that
// fell back to the central box last: the lines of
// tests/data/crop_histograms.txt, which tests/python/crop_statistics_test.py
// compares with torchvision's RandomResizedCrop.get_params.
std::vector<std::string> CropHistograms() {
  constexpr int kBins = 10;
  std::vector<int> scale(kBins), ratio(kBins);
  int fallback = 0;
  auto bin = [](double x, double lo, double hi) { return std::clamp(static_cast<int>((x - lo) / (hi - lo) * kBins), 0, kBins - 1); };
  for (uint64_t key = 0; key < 10000; ++key) {
    const CropBox b = RandomResizedCropBox(375, 500, key);
    ++scale[bin(static_cast<double>(b.height * b.width) / (375 * 500), 0.08, 1.0)];
    ++ratio[bin(std::log(static_cast<double>(b.width) / b.height), std::log(3.0 / 4), std::log(4.0 / 3))];
    fallback += b == CropBox{0, 0, 375, 500};
  }
  auto line = [](const char* name, const std::vector<int>& counts) {
    std::string s = name;
    for (int c : counts) s += " " + std::to_string(c);
    return s;
  };
  return {line("scale", scale), line("log_ratio", ratio), "fallback " + std::to_string(fallback)};
}

TEST(ImageTransformTest, CropStatisticsAreTheCommittedOnes) {
  EXPECT_EQ(CropHistograms(), DataLines("crop_histograms.txt"))
      << "RandomResizedCropBox's draws changed: check them against torchvision with "
         "tests/python/crop_statistics_test.py after writing the new lines to tests/data/crop_histograms.txt";
}

TEST(ImageTransformTest, EvalCropIsResizeThenCentreCrop) {
  // 500 x 375 -> Resize(256) = 341 x 256 -> CenterCrop(224) at (16, 58) -> full-size box.
  EXPECT_EQ(EvalCropBox(375, 500, 224), (CropBox{23, 85, 328, 328}));
  EXPECT_EQ(EvalCropBox(500, 375, 224), (CropBox{85, 23, 328, 328}));
  EXPECT_EQ(EvalCropBox(256, 256, 224), (CropBox{16, 16, 224, 224}));
}

RgbImage Known() {
  RgbImage image;
  image.height = 30;
  image.width = 40;
  const std::string px = ReadFile(kData + "images/known.rgb");
  image.pixels.assign(px.begin(), px.end());
  return image;
}

TEST(ImageTransformTest, CropResizeAtTheSameSizeIsTheCropAndFlipMirrorsIt) {
  const RgbImage image = Known();
  const torch::Tensor all = torch::from_blob(const_cast<uint8_t*>(image.pixels.data()), {30, 40, 3}, torch::kUInt8);
  const torch::Tensor want = all.narrow(0, 5, 20).narrow(1, 7, 20).permute({2, 0, 1});
  const torch::Tensor got = CropResize(image, CropBox{5, 7, 20, 20}, 20, false);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{3, 20, 20}));
  EXPECT_TRUE(torch::equal(got.contiguous(), want.contiguous()));
  EXPECT_TRUE(torch::equal(CropResize(image, CropBox{5, 7, 20, 20}, 20, true).contiguous(), want.flip({2}).contiguous()));
  // The same pixels as an image decoded at 1/2: the full-size box maps to half of it.
  RgbImage half = image;
  half.scale_denom = 2;
  const torch::Tensor via_scale = CropResize(half, CropBox{10, 14, 40, 40}, 20, false);
  EXPECT_TRUE(torch::equal(via_scale.contiguous(), want.contiguous()));
}

TEST(ImageTransformTest, SamplesArePureFunctionsOfTheKey) {
  const std::string bytes = ReadFile(kData + "images/baseline.jpg");
  const torch::Tensor a = TrainSample("a.jpg", bytes, 16, 42), b = TrainSample("a.jpg", bytes, 16, 42);
  EXPECT_TRUE(torch::equal(a, b));
  int differ = 0;
  for (uint64_t key = 1; key < 9; ++key) differ += !torch::equal(a, TrainSample("a.jpg", bytes, 16, 42 + key));
  EXPECT_GE(differ, 7);
  EXPECT_EQ(a.dtype(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(EvalSample("a.jpg", bytes, 16), EvalSample("a.jpg", bytes, 16)));
}

// A freed batch's memory is the next batch's of the same size; other sizes
// get their own, and no more than `keep` buffers wait.
TEST(BatchPoolTest, FreedBatchesAreReused) {
  auto pool = detail::BatchPool::Make(1);
  torch::Tensor a = pool->EmptyFloat({2, 3, 4, 5}, /*channels_last=*/true);
  EXPECT_TRUE(a.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{2, 3, 4, 5}));
  void* first = a.data_ptr();
  a = torch::Tensor();
  EXPECT_EQ(pool->Free(), 1u);
  torch::Tensor b = pool->EmptyFloat({2, 3, 4, 5}, false);
  EXPECT_EQ(b.data_ptr(), first);
  EXPECT_TRUE(b.is_contiguous());
  torch::Tensor c = pool->EmptyFloat({1, 3, 4, 5}, false);
  EXPECT_NE(c.data_ptr(), first);
  b = torch::Tensor();
  c = torch::Tensor();
  EXPECT_EQ(pool->Free(), 1u);  // kept one, freed the other
}

// --- sources -----------------------------------------------------------------

// An ImageFolder of the fixture images in 2 classes, 6 images each (train) and 2 (val).
DataSpec SmallFolder(const std::string& root) {
  const char* images[] = {"baseline.jpg", "progressive.jpg", "subsampled.jpg", "gray.jpg", "cmyk.jpg", "rgb.png"};
  for (const char* cls : {"one", "two"}) {
    for (int i = 0; i < 6; ++i)
      Put(root, std::string("train/") + cls + "/" + std::to_string(i) + "_" + images[i],
          ReadFile(kData + "images/" + images[i]));
    Put(root, std::string("val/") + cls + "/v.png", ReadFile(kData + "images/gray_png.png"));
  }
  DataSpec spec;
  spec.name = "imagefolder";
  spec.data_dir = root;
  spec.image_size = 16;
  spec.batch_size = 4;
  spec.seed = 5;
  spec.data_workers = 2;
  return spec;
}

TEST(ImageFolderSourceTest, DescribesAndFeedsNormalisedBatches) {
  TempDir dir;
  const DataSpec spec = SmallFolder(dir.path());
  const DatasetInfo info = DescribeDataset(spec);
  EXPECT_EQ(info.num_classes, 2);
  EXPECT_EQ(info.train_size, 12);
  EXPECT_EQ(info.test_size, 2);
  EXPECT_EQ(info.height, 16);
  auto source = MakeTrainSource(spec, 0, 1);
  EXPECT_EQ(source->BatchesPerEpoch(), 3);
  const Batch batch = source->Next();
  EXPECT_EQ(batch.images.sizes(), (std::vector<int64_t>{4, 3, 16, 16}));
  EXPECT_EQ(batch.images.dtype(), torch::kFloat);
  // ImageNet normalisation: 0 maps to -mean/std, 255 to (1 - mean)/std.
  EXPECT_GE(batch.images.min().item<float>(), -0.485f / 0.229f - 1e-4f);
  EXPECT_LE(batch.images.max().item<float>(), (1 - 0.406f) / 0.225f + 1e-4f);
  auto test = MakeTestSource(spec, 0, 1);
  ASSERT_NE(test, nullptr);
  EXPECT_EQ(test->Next().labels.size(0), 2);
  // The workers build ahead until the prefetch queue is full; a build in
  // flight has clocked some stages but not yet its busy time, so the totals
  // are compared once nothing has moved for 200 ms (the workers are waiting).
  auto same = [](const LoaderStats& a, const LoaderStats& b) {
    return a.images == b.images && a.busy_s == b.busy_s && a.stage_s == b.stage_s;
  };
  LoaderStats stats = source->Stats();
  for (int tries = 0; tries < 100; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const LoaderStats later = source->Stats();
    if (same(stats, later)) break;
    stats = later;
  }
  EXPECT_EQ(stats.workers, 2);
  // Every stage of the workers' time is clocked, and together they are no
  // more than the time they were busy (how much less depends on the
  // machine's load: not checked here).
  double staged = 0;
  for (int i = 0; i < kLoadStages; ++i) {
    EXPECT_GT(stats.stage_s[i], 0) << kLoadStageNames[i];
    staged += stats.stage_s[i];
  }
  EXPECT_LE(staged, stats.busy_s);
}

// On a CPU device the workers normalise through a table of each channel's
// 256 values: bit for bit what the tensor operations give, in either memory format.
TEST(ImageTransformTest, NormalisingByTableIsTheTensorOperationsBitForBit) {
  torch::manual_seed(3);
  const torch::Tensor images = torch::randint(0, 256, {2, 3, 5, 7}, torch::kUInt8);
  const torch::Tensor mean = torch::tensor(kImageNetMean, torch::kFloat).view({1, 3, 1, 1});
  const torch::Tensor stdev = torch::tensor(kImageNetStd, torch::kFloat).view({1, 3, 1, 1});
  const torch::Tensor expected = images.to(torch::kFloat).div_(255.0).sub_(mean).div_(stdev);
  const torch::Tensor plain = NormaliseImageNetOnHost(images, false);
  EXPECT_TRUE(plain.is_contiguous());
  EXPECT_TRUE(torch::equal(plain, expected));
  const torch::Tensor last = NormaliseImageNetOnHost(images, true);
  EXPECT_TRUE(last.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(last, expected));
  EXPECT_THROW(NormaliseImageNetOnHost(images.to(torch::kFloat), false), c10::Error);
}

TEST(ImageFolderSourceTest, ResumedSourceContinuesBitIdenticallyAndRanksDiffer) {
  TempDir dir;
  DataSpec spec = SmallFolder(dir.path());
  auto from_zero = MakeTrainSource(spec, 0, 1);
  std::vector<Batch> seen;
  for (int k = 0; k < 5; ++k) seen.push_back(from_zero->Next());  // into the second epoch
  spec.start_batch = 4;
  spec.data_workers = 1;  // the worker count changes nothing
  auto resumed = MakeTrainSource(spec, 0, 1);
  const Batch again = resumed->Next();
  EXPECT_TRUE(torch::equal(again.images, seen[4].images));
  EXPECT_TRUE(torch::equal(again.labels, seen[4].labels));
  spec.start_batch = 0;
  spec.batch_size = 2;
  const Batch r0 = MakeTrainSource(spec, 0, 2)->Next(), r1 = MakeTrainSource(spec, 1, 2)->Next();
  EXPECT_FALSE(torch::equal(r0.images, r1.images));
}

TEST(ImageFolderSourceTest, BadImageStopsTheRunOrIsSkippedAndCounted) {
  TempDir dir;
  DataSpec spec = SmallFolder(dir.path());
  Put(dir.path(), "train/one/0_baseline.jpg", "not an image at all");
  spec.batch_size = 12;
  EXPECT_THAT(DataErrorOf([&] { MakeTrainSource(spec, 0, 1)->Next(); }),
              HasSubstr("train/one/0_baseline.jpg: neither JPEG nor PNG"));
  spec.skip_bad_images = true;
  auto source = MakeTrainSource(spec, 0, 1);
  EXPECT_EQ(source->Next().images.size(0), 12);
  EXPECT_GE(source->Stats().bad_images, 1);  // more once the next epoch's batch is prefetched
}

// --decode=gpu (datasets/gpu_decode.h) without a GPU: which files are
// offered to nvJPEG at all (whole JPEGs; a cut-short one, a PNG, an empty
// file go to the CPU decoder, which names them), that the binary says whether
// it has nvJPEG as CMake found it, and the messages where it cannot start.
TEST(GpuDecodeTest, OffersOnlyWholeJpegs) {
  for (const char* name : {"baseline.jpg", "progressive.jpg", "subsampled.jpg", "gray.jpg", "cmyk.jpg"})
    EXPECT_TRUE(LooksLikeWholeJpeg(ReadFile(kData + "images/" + name))) << name;
  const std::string jpeg = ReadFile(kData + "images/" + "baseline.jpg");
  EXPECT_TRUE(LooksLikeWholeJpeg(jpeg + std::string(16, '\0')));  // padded after the end marker
  EXPECT_FALSE(LooksLikeWholeJpeg(jpeg.substr(0, jpeg.size() - 2)));  // the end marker cut off
  EXPECT_FALSE(LooksLikeWholeJpeg(jpeg.substr(0, jpeg.size() / 2)));
  EXPECT_FALSE(LooksLikeWholeJpeg(jpeg + std::string(64, '\0')));  // too much after it: the CPU decides
  EXPECT_FALSE(LooksLikeWholeJpeg(ReadFile(kData + "images/" + "rgb.png")));
  EXPECT_FALSE(LooksLikeWholeJpeg(ReadFile(kData + "images/" + "png_named.jpg")));
  EXPECT_FALSE(LooksLikeWholeJpeg(""));
  EXPECT_FALSE(LooksLikeWholeJpeg(jpeg.substr(0, 3)));
}

TEST(GpuDecodeTest, BinaryKnowsWhetherItHasNvjpeg) {
  EXPECT_EQ(GpuDecodeBuilt(), static_cast<bool>(DDPBENCH_HAVE_NVJPEG))
      << "CMake " << (DDPBENCH_HAVE_NVJPEG ? "found" : "did not find") << " nvJPEG";
}

TEST(GpuDecodeTest, DecoderSaysWhatIsMissing) {
  if (GpuDecodeBuilt() && CudaAvailable()) GTEST_SKIP() << "nvJPEG and a CUDA device are here: the decoder starts";
  try {
    GpuJpegDecoder decoder(0);
    ADD_FAILURE() << "a decoder started without " << (GpuDecodeBuilt() ? "a CUDA device" : "nvJPEG");
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(GpuDecodeBuilt() ? "--decode=gpu: no CUDA device 0 here"
                                                     : "--decode=gpu: this binary was built without nvJPEG"));
  }
}

TEST(GpuDecodeTest, RefusalsNameWhatIsAccepted) {
  EXPECT_THAT(GpuDecodeRefusal("cpu"), HasSubstr("--decode=gpu with --device=cpu"));
  EXPECT_THAT(GpuDecodeRefusal("cpu"), HasSubstr("accepted: --decode=cpu (the default) or --device=cuda"));
  EXPECT_THAT(GpuDecodeRefusal("cuda"), HasSubstr("built without nvJPEG"));
  EXPECT_THAT(GpuDecodeRefusal("cuda"), HasSubstr("accepted: --decode=cpu"));
}

}  // namespace
}  // namespace ddpbench
