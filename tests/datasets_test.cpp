// Tests for datasets/: tiny files in the real IDX and CIFAR formats (plain and
// gzip) written to a temporary directory, corrupt copies of them, the sampler
// against PyTorch's own output, and the sources' determinism and shutdown.
// Everything but the optional real Fashion-MNIST check runs on a few KB.
#include "datasets/dataset.h"
#include "tests/test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <future>
#include <set>
#include <thread>

namespace ddpbench {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

// --- writing files in the real formats ----------------------------------------

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// Pixel (i, r, c) of the test images; pixel (i, 0, 0) == i so a batch row can
// be traced back to its dataset index.
uint8_t Pixel(int64_t i, int64_t r, int64_t c) { return static_cast<uint8_t>((i + 3 * r + 5 * c) % 256); }
int64_t Label(int64_t i) { return (i * 7 + 1) % 10; }

std::string IdxImages(int64_t n, int64_t rows, int64_t cols, uint32_t magic = 2051) {
  std::string s = BigEndian(magic) + BigEndian(n) + BigEndian(rows) + BigEndian(cols);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) s.push_back(static_cast<char>(Pixel(i, r, c)));
  return s;
}

std::string IdxLabels(int64_t n) {
  std::string s = BigEndian(2049) + BigEndian(n);
  for (int64_t i = 0; i < n; ++i) s.push_back(static_cast<char>(Label(i)));
  return s;
}

void WriteGzip(const std::string& path, const std::string& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())), static_cast<int>(content.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

constexpr int64_t kSide = 8, kTrain = 50, kTest = 23;

// An MNIST-style directory: train as gzip, test as plain files.
void WriteIdxDir(const std::string& dir) {
  WriteGzip(dir + "/train-images-idx3-ubyte.gz", IdxImages(kTrain, kSide, kSide));
  WriteGzip(dir + "/train-labels-idx1-ubyte.gz", IdxLabels(kTrain));
  WriteFile(dir + "/t10k-images-idx3-ubyte", IdxImages(kTest, kSide, kSide));
  WriteFile(dir + "/t10k-labels-idx1-ubyte", IdxLabels(kTest));
}

// CIFAR records: label byte(s) then 3072 pixels in C,H,W order.
uint8_t CifarPixel(int64_t rec, int64_t c, int64_t h, int64_t w) {
  return static_cast<uint8_t>((rec * 11 + c * 101 + h * 7 + w) % 256);
}
std::string CifarRecords(int64_t first, int64_t n, bool cifar100) {
  std::string s;
  for (int64_t i = first; i < first + n; ++i) {
    if (cifar100) {
      s.push_back(static_cast<char>(i % 20));        // coarse
      s.push_back(static_cast<char>((i * 13) % 100));  // fine
    } else {
      s.push_back(static_cast<char>(i % 10));
    }
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 32; ++h)
        for (int64_t w = 0; w < 32; ++w) s.push_back(static_cast<char>(CifarPixel(i, c, h, w)));
  }
  return s;
}

// (std::filesystem is avoided here: the torch wheel's libtorch.so exports
// crashing copies of its functions.)

// Runs f, expects a DataError whose message contains every one of `parts`.
template <typename F>
void ExpectDataError(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no DataError thrown";
  } catch (const DataError& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

DataSpec IdxSpec(const std::string& dir) {
  DataSpec spec;
  spec.name = "mnist";
  spec.data_dir = dir;
  spec.batch_size = 4;
  spec.seed = 7;
  spec.prefetch = 0;
  return spec;
}

// Dataset index of each row of a normalised MNIST batch (from pixel (0, 0)).
std::vector<int64_t> RowIndices(const Batch& b) {
  const torch::Tensor px = (b.images.select(1, 0).select(1, 0).select(1, 0) * 0.3081 + 0.1307) * 255;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < b.size(); ++i) out.push_back(std::lround(px[i].item<double>()));
  return out;
}

// --- IDX -------------------------------------------------------------------

TEST(IdxTest, PlainAndGzipRoundTrip) {
  TempDir dir;
  WriteFile(dir.File("img"), IdxImages(5, 3, 4));
  WriteFile(dir.File("lbl"), IdxLabels(5));
  WriteGzip(dir.File("img.gz"), IdxImages(5, 3, 4));
  WriteGzip(dir.File("lbl.gz"), IdxLabels(5));
  for (const auto& [images, labels] : {std::pair{dir.File("img"), dir.File("lbl")},
                                       std::pair{dir.File("img.gz"), dir.File("lbl.gz")}}) {
    SCOPED_TRACE(images);
    const ImageSet set = ReadIdxPair(images, labels);
    ASSERT_EQ(set.images.sizes(), (std::vector<int64_t>{5, 1, 3, 4}));
    ASSERT_EQ(set.images.dtype(), torch::kUInt8);
    ASSERT_EQ(set.labels.dtype(), torch::kInt64);
    EXPECT_EQ(set.num_classes, 10);
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(set.labels[i].item<int64_t>(), Label(i));
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(set.images[i][0][r][c].item<uint8_t>(), Pixel(i, r, c));
    }
  }
}

TEST(IdxTest, DescribeDatasetSizes) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  DatasetInfo info = DescribeDataset(spec);
  EXPECT_EQ(info.name, "mnist");
  EXPECT_TRUE(info.real);
  EXPECT_EQ(info.channels, 1);
  EXPECT_EQ(info.height, kSide);
  EXPECT_EQ(info.width, kSide);
  EXPECT_EQ(info.num_classes, 10);
  EXPECT_EQ(info.train_size, kTrain);
  EXPECT_EQ(info.test_size, kTest);
  spec.image_size = 20;
  info = DescribeDataset(spec);
  EXPECT_EQ(info.channels, 1);
  EXPECT_EQ(info.height, 20);
  EXPECT_EQ(info.width, 20);
}

TEST(IdxTest, CacheRereadsRewrittenFiles) {
  TempDir dir;
  WriteIdxDir(dir.path());
  EXPECT_EQ(DescribeDataset(IdxSpec(dir.path())).train_size, kTrain);
  EXPECT_EQ(DescribeDataset(IdxSpec(dir.path())).train_size, kTrain);  // served from the cache
  // Rewritten in place with another size: read again, not served stale.
  WriteGzip(dir.File("train-images-idx3-ubyte.gz"), IdxImages(kTrain + 6, kSide, kSide));
  WriteGzip(dir.File("train-labels-idx1-ubyte.gz"), IdxLabels(kTrain + 6));
  EXPECT_EQ(DescribeDataset(IdxSpec(dir.path())).train_size, kTrain + 6);
}

TEST(IdxTest, WrongMagic) {
  TempDir dir;
  WriteFile(dir.File("img"), IdxImages(5, 3, 4, /*magic=*/2049));
  WriteFile(dir.File("lbl"), IdxLabels(5));
  ExpectDataError([&] { ReadIdxPair(dir.File("img"), dir.File("lbl")); },
                  {dir.File("img"), "wrong magic number 2049", "expected 2051"});
  // Labels and images swapped: the label file's magic is checked too.
  WriteFile(dir.File("img2"), IdxImages(5, 3, 4));
  ExpectDataError([&] { ReadIdxPair(dir.File("img2"), dir.File("img2")); },
                  {dir.File("img2"), "wrong magic number 2051", "expected 2049"});
}

TEST(IdxTest, TruncatedImageFile) {
  TempDir dir;
  const std::string images = IdxImages(5, 3, 4);  // 16 + 60 bytes
  WriteFile(dir.File("img"), images.substr(0, images.size() - 7));
  WriteFile(dir.File("lbl"), IdxLabels(5));
  ExpectDataError([&] { ReadIdxPair(dir.File("img"), dir.File("lbl")); },
                  {dir.File("img"), "truncated", "expected 76 bytes", "found 69"});
  WriteFile(dir.File("img"), images.substr(0, 10));  // not even a header
  ExpectDataError([&] { ReadIdxPair(dir.File("img"), dir.File("lbl")); },
                  {dir.File("img"), "truncated", "found 10"});
}

TEST(IdxTest, TruncatedLabelFile) {
  TempDir dir;
  WriteFile(dir.File("img"), IdxImages(5, 3, 4));
  WriteFile(dir.File("lbl"), IdxLabels(5).substr(0, 11));
  ExpectDataError([&] { ReadIdxPair(dir.File("img"), dir.File("lbl")); },
                  {dir.File("lbl"), "truncated", "expected 13 bytes", "found 11"});
}

TEST(IdxTest, LabelOutOfRange) {
  TempDir dir;
  std::string labels = IdxLabels(5);
  labels[8 + 3] = 12;
  WriteFile(dir.File("img"), IdxImages(5, 3, 4));
  WriteFile(dir.File("lbl"), labels);
  ExpectDataError([&] { ReadIdxPair(dir.File("img"), dir.File("lbl")); },
                  {dir.File("lbl"), "out of range", "index 3", "12", "< 10"});
}

TEST(IdxTest, ImageLabelCountMismatch) {
  TempDir dir;
  WriteFile(dir.File("img"), IdxImages(5, 3, 4));
  WriteFile(dir.File("lbl"), IdxLabels(4));
  ExpectDataError([&] { ReadIdxPair(dir.File("img"), dir.File("lbl")); },
                  {dir.File("lbl"), "4 labels", "5 images", "counts differ"});
}

TEST(IdxTest, MissingFileAndDir) {
  TempDir dir;
  WriteIdxDir(dir.path());
  ASSERT_EQ(::unlink(dir.File("t10k-labels-idx1-ubyte").c_str()), 0);
  ExpectDataError([&] { DescribeDataset(IdxSpec(dir.path())); },
                  {dir.File("t10k-labels-idx1-ubyte"), "missing", "train-images-idx3-ubyte[.gz]"});
  ExpectDataError([&] { MakeTestSource(IdxSpec(dir.path()), 0, 1); }, {"t10k-labels-idx1-ubyte", "missing"});
  ExpectDataError([&] { DescribeDataset(IdxSpec(dir.File("nowhere"))); },
                  {dir.File("nowhere"), "does not exist"});
  ExpectDataError([&] { ReadIdxPair(dir.File("absent"), dir.File("absent2")); },
                  {dir.File("absent"), "cannot open"});
  // MNIST has no default directory.
  ExpectDataError([&] { DescribeDataset(IdxSpec("")); }, {"mnist", "--data-dir"});
}

TEST(IdxTest, CorruptGzip) {
  TempDir dir;
  WriteGzip(dir.File("img.gz"), IdxImages(40, 8, 8));
  WriteFile(dir.File("lbl"), IdxLabels(40));
  const std::string good = testing::ReadFile(dir.File("img.gz"));
  ASSERT_GT(good.size(), 40u);
  // Cut short.
  WriteFile(dir.File("img.gz"), good.substr(0, good.size() / 2));
  ExpectDataError([&] { ReadIdxPair(dir.File("img.gz"), dir.File("lbl")); }, {dir.File("img.gz"), "corrupt gzip"});
  // Garbage in the deflate stream.
  std::string bad = good;
  for (size_t i = 12; i < bad.size() - 8; i += 3) bad[i] = static_cast<char>(~bad[i]);
  WriteFile(dir.File("img.gz"), bad);
  ExpectDataError([&] { ReadIdxPair(dir.File("img.gz"), dir.File("lbl")); }, {dir.File("img.gz"), "corrupt gzip"});
  // Named .gz but not gzip at all.
  WriteFile(dir.File("img.gz"), IdxImages(40, 8, 8));
  ExpectDataError([&] { ReadIdxPair(dir.File("img.gz"), dir.File("lbl")); }, {dir.File("img.gz"), "not a gzip"});
}

// --- CIFAR -----------------------------------------------------------------

TEST(CifarTest, Cifar10LabelsAndLayout) {
  TempDir dir;
  WriteFile(dir.File("a.bin"), CifarRecords(0, 3, false));
  WriteFile(dir.File("b.bin"), CifarRecords(3, 2, false));
  const ImageSet set = ReadCifarFiles({dir.File("a.bin"), dir.File("b.bin")}, false);
  ASSERT_EQ(set.images.sizes(), (std::vector<int64_t>{5, 3, 32, 32}));
  EXPECT_EQ(set.num_classes, 10);
  const auto img = set.images.accessor<uint8_t, 4>();
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(set.labels[i].item<int64_t>(), i % 10);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 32; ++h)
        for (int64_t w = 0; w < 32; ++w) ASSERT_EQ(img[i][c][h][w], CifarPixel(i, c, h, w)) << i << c << h << w;
  }
}

TEST(CifarTest, Cifar100UsesFineLabel) {
  TempDir dir;
  WriteFile(dir.File("train.bin"), CifarRecords(0, 9, true));
  const ImageSet set = ReadCifarFiles({dir.File("train.bin")}, true);
  EXPECT_EQ(set.num_classes, 100);
  ASSERT_EQ(set.labels.size(0), 9);
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(set.labels[i].item<int64_t>(), (i * 13) % 100);
  EXPECT_EQ(set.images[8][2][31][31].item<uint8_t>(), CifarPixel(8, 2, 31, 31));
}

TEST(CifarTest, WrongSizeAndBadLabel) {
  TempDir dir;
  WriteFile(dir.File("x.bin"), CifarRecords(0, 2, false) + "xyz");
  ExpectDataError([&] { ReadCifarFiles({dir.File("x.bin")}, false); },
                  {dir.File("x.bin"), "6149 bytes", "multiple of the record size 3073"});
  // A CIFAR-10 file read as CIFAR-100 has the wrong record size.
  WriteFile(dir.File("y.bin"), CifarRecords(0, 3, false));
  ExpectDataError([&] { ReadCifarFiles({dir.File("y.bin")}, true); }, {dir.File("y.bin"), "3074"});
  std::string bad = CifarRecords(0, 2, false);
  bad[3073] = 10;
  WriteFile(dir.File("z.bin"), bad);
  ExpectDataError([&] { ReadCifarFiles({dir.File("z.bin")}, false); },
                  {dir.File("z.bin"), "out of range", "record 1", "10"});
}

TEST(CifarTest, DescribeFindsArchiveSubdirAndNamesMissingFiles) {
  TempDir dir;
  const std::string sub = dir.File("cifar-10-batches-bin");
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  for (int i = 1; i <= 5; ++i) WriteFile(sub + "/data_batch_" + std::to_string(i) + ".bin", CifarRecords(i, 2, false));
  DataSpec spec;
  spec.name = "cifar10";
  spec.data_dir = dir.path();
  ExpectDataError([&] { DescribeDataset(spec); }, {"test_batch.bin", "missing"});
  WriteFile(sub + "/test_batch.bin", CifarRecords(0, 3, false));
  DatasetInfo info = DescribeDataset(spec);
  EXPECT_EQ(info.train_size, 10);
  EXPECT_EQ(info.test_size, 3);
  EXPECT_EQ(info.channels, 3);
  EXPECT_EQ(info.height, 32);
  EXPECT_EQ(info.num_classes, 10);

  TempDir dir100;
  WriteFile(dir100.File("train.bin"), CifarRecords(0, 4, true));
  WriteFile(dir100.File("test.bin"), CifarRecords(0, 2, true));
  spec.name = "cifar100";
  spec.data_dir = dir100.path();
  spec.image_size = 64;
  info = DescribeDataset(spec);
  EXPECT_EQ(info.num_classes, 100);
  EXPECT_EQ(info.train_size, 4);
  EXPECT_EQ(info.height, 64);
  // CIFAR test batches are normalised with the CIFAR-100 statistics.
  spec.prefetch = 0;
  spec.image_size = 0;
  const Batch b = MakeTestSource(spec, 0, 1)->Next();
  ASSERT_EQ(b.size(), 2);
  EXPECT_NEAR(b.images[1][2][0][0].item<float>(), (CifarPixel(1, 2, 0, 0) / 255.0 - 0.4409) / 0.2762, 1e-5);
  EXPECT_EQ(b.labels[1].item<int64_t>(), 13);
}

TEST(DatasetTest, NamesAndUnknownName) {
  EXPECT_EQ(DatasetNames(), (std::vector<std::string>{"synthetic", "mnist", "fashion-mnist", "cifar10", "cifar100", "imagefolder"}));
  DataSpec spec;
  spec.name = "imagenet";
  ExpectDataError([&] { DescribeDataset(spec); },
                  {"imagenet", "synthetic, mnist, fashion-mnist, cifar10, cifar100, imagefolder"});
  ExpectDataError([&] { MakeTrainSource(spec, 0, 1); }, {"imagenet"});
}

// --- sampler ---------------------------------------------------------------

TEST(SamplerTest, MatchesPyTorchOrder) {
  // From PyTorch 2.11: g = torch.Generator(); g.manual_seed(0);
  // torch.randperm(10, generator=g).tolist() — the order DistributedSampler
  // uses for seed 0, epoch 0.
  const std::vector<int64_t> perm0 = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};
  EXPECT_EQ(DistributedSampler(10, 0, 1, true, 0).Indices(), perm0);
  // seed + epoch: (seed 0, epoch 1) is torch's manual_seed(1) permutation.
  DistributedSampler s(10, 0, 1, true, 0);
  s.SetEpoch(1);
  EXPECT_EQ(s.Indices(), (std::vector<int64_t>{5, 6, 1, 2, 0, 8, 9, 3, 7, 4}));
  // [list(DistributedSampler(range(10), num_replicas=4, rank=r, seed=0)) for r in range(4)]
  const std::vector<std::vector<int64_t>> padded = {{4, 3, 6}, {1, 9, 2}, {7, 0, 4}, {5, 8, 1}};
  // ... and with drop_last=True.
  const std::vector<std::vector<int64_t>> dropped = {{4, 3}, {1, 9}, {7, 0}, {5, 8}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(DistributedSampler(10, r, 4, true, 0).Indices(), padded[r]);
    EXPECT_EQ(DistributedSampler(10, r, 4, true, 0, true).Indices(), dropped[r]);
  }
}

TEST(SamplerTest, PaddingAndDropLastLikeTorch) {
  // Unshuffled, from torch: n=2, world=5 -> [[0], [1], [0], [1], [0]];
  // n=11, world=3, drop_last -> [[0, 3, 6], [1, 4, 7], [2, 5, 8]].
  const std::vector<int64_t> expect5 = {0, 1, 0, 1, 0};
  for (int r = 0; r < 5; ++r) EXPECT_EQ(DistributedSampler(2, r, 5, false, 0).Indices(), std::vector<int64_t>{expect5[r]});
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(DistributedSampler(11, r, 3, false, 0, true).Indices(), (std::vector<int64_t>{r, r + 3, r + 6}));
  }
  EXPECT_EQ(DistributedSampler(3, 0, 4, false, 0, true).NumSamples(), 0);
  EXPECT_EQ(DistributedSampler(8, 1, 4, false, 0, true).NumSamples(), 2);
}

TEST(SamplerTest, ShareProperties) {
  for (const auto& [n, world] : std::vector<std::pair<int64_t, int>>{{12, 4}, {10, 3}, {7, 1}, {3, 5}, {1, 4}, {101, 8}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world));
    const int64_t per_rank = (n + world - 1) / world;
    // The full shuffled order, rebuilt from the ranks' shares.
    std::vector<int64_t> order(static_cast<size_t>(per_rank * world));
    std::multiset<int64_t> all;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(n, r, world, true, 3);
      s.SetEpoch(2);
      const auto idx = s.Indices();
      ASSERT_EQ(static_cast<int64_t>(idx.size()), per_rank);
      EXPECT_EQ(s.NumSamples(), per_rank);
      for (size_t j = 0; j < idx.size(); ++j) {
        EXPECT_GE(idx[j], 0);
        EXPECT_LT(idx[j], n);
        order[j * world + r] = idx[j];
        all.insert(idx[j]);
      }
      EXPECT_EQ(idx, s.Indices());  // same seed + epoch, same order
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << i;  // covers everything
    if (n % world == 0) EXPECT_EQ(static_cast<int64_t>(std::set<int64_t>(all.begin(), all.end()).size()), n);
    // Padding repeats the order from its start.
    for (int64_t k = n; k < per_rank * world; ++k) EXPECT_EQ(order[k], order[k % n]);
  }
  DistributedSampler a(100, 0, 2, true, 5), b(100, 0, 2, true, 5);
  b.SetEpoch(1);
  EXPECT_NE(a.Indices(), b.Indices());
  EXPECT_EQ(DistributedSampler(5, 1, 2, false, 0).Indices(), (std::vector<int64_t>{1, 3, 0}));
}

TEST(SamplerTest, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0, true, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 4, 4, true, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, -1, 4, true, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(0, 0, 1, true, 0), std::invalid_argument);
  try {
    DistributedSampler(10, 5, 3, true, 0);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 5"));
    EXPECT_THAT(e.what(), HasSubstr("world 3"));
  }
}

// --- sources ---------------------------------------------------------------

bool SameBatch(const Batch& a, const Batch& b) {
  return a.images.sizes() == b.images.sizes() && torch::equal(a.images, b.images) && torch::equal(a.labels, b.labels);
}

TEST(SourceTest, TrainFollowsSamplerAndNormalises) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  auto src = MakeTrainSource(spec, 1, 2);
  // 50 samples over 2 ranks: 25 each, 6 full batches of 4, the 25th dropped.
  EXPECT_EQ(src->BatchesPerEpoch(), 6);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    DistributedSampler sampler(kTrain, 1, 2, true, spec.seed);
    sampler.SetEpoch(epoch);
    const auto expected = sampler.Indices();
    for (int64_t b = 0; b < 6; ++b) {
      const Batch batch = src->Next();
      ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{4, 1, kSide, kSide}));
      ASSERT_EQ(batch.images.dtype(), torch::kFloat);
      const auto rows = RowIndices(batch);
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t idx = expected[b * 4 + i];
        EXPECT_EQ(rows[i], idx);
        EXPECT_EQ(batch.labels[i].item<int64_t>(), Label(idx));
        EXPECT_NEAR(batch.images[i][0][2][5].item<float>(), (Pixel(idx, 2, 5) / 255.0 - 0.1307) / 0.3081, 1e-5);
      }
    }
  }
}

TEST(SourceTest, TrainDeterministicAndPrefetchInvariant) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.augment = true;
  spec.image_size = 12;
  auto sync = MakeTrainSource(spec, 0, 1);
  spec.prefetch = 3;
  auto again = MakeTrainSource(spec, 0, 1);
  auto threaded = MakeTrainSource(spec, 0, 1);
  EXPECT_EQ(threaded->BatchesPerEpoch(), 12);
  // 30 batches: across two epoch boundaries.
  for (int k = 0; k < 30; ++k) {
    const Batch a = sync->Next();
    ASSERT_EQ(a.images.sizes(), (std::vector<int64_t>{4, 1, 12, 12}));
    EXPECT_TRUE(SameBatch(a, threaded->Next())) << "batch " << k;
    if (k < 3) EXPECT_TRUE(SameBatch(a, again->Next())) << "batch " << k;
  }
  spec.seed = 8;
  auto other = MakeTrainSource(spec, 0, 1);
  auto first = MakeTrainSource(IdxSpec(dir.path()), 0, 1);
  EXPECT_FALSE(torch::equal(other->Next().labels, first->Next().labels));
}

TEST(SourceTest, AugmentIsCropOfPaddedImageOrItsMirror) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.batch_size = 10;
  spec.augment = true;
  auto src = MakeTrainSource(spec, 0, 1);
  DistributedSampler sampler(kTrain, 0, 1, true, spec.seed);
  const auto order = sampler.Indices();
  const Batch batch = src->Next();
  int changed = 0;
  for (int64_t i = 0; i < 10; ++i) {
    const torch::Tensor original = torch::tensor(std::vector<uint8_t>([&] {
      std::vector<uint8_t> px;
      for (int64_t r = 0; r < kSide; ++r)
        for (int64_t c = 0; c < kSide; ++c) px.push_back(Pixel(order[i], r, c));
      return px;
    }())).view({1, kSide, kSide}).to(torch::kFloat);
    const torch::Tensor got = (batch.images[i] * 0.3081 + 0.1307) * 255;
    const torch::Tensor padded = torch::constant_pad_nd(original, {4, 4, 4, 4}, 0);
    bool found = false;
    for (int64_t dy = 0; dy <= 8 && !found; ++dy)
      for (int64_t dx = 0; dx <= 8 && !found; ++dx) {
        const torch::Tensor crop = padded.narrow(1, dy, kSide).narrow(2, dx, kSide);
        found = torch::allclose(got, crop, 0, 1e-3) || torch::allclose(got, crop.flip({2}), 0, 1e-3);
      }
    EXPECT_TRUE(found) << "row " << i;
    changed += !torch::allclose(got, original, 0, 1e-3);
  }
  EXPECT_GT(changed, 0);
}

TEST(SourceTest, DestroyingAfterOneBatchDoesNotHang) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.prefetch = 4;
  auto done = std::async(std::launch::async, [&] {
    for (int i = 0; i < 20; ++i) {
      auto src = MakeTrainSource(spec, 0, 1);
      EXPECT_EQ(src->Next().size(), 4);
      auto test = MakeTestSource(spec, 0, 1);
    }
  });
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "source destructor hung";
    std::_Exit(1);  // a joined-forever thread cannot be recovered from
  }
}

TEST(SourceTest, BatchLargerThanShareIsAnError) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.batch_size = 20;
  ExpectDataError([&] { MakeTrainSource(spec, 0, 4); }, {"batch size 20", "13 samples"});
  spec.batch_size = 0;
  EXPECT_THROW(MakeTrainSource(spec, 0, 1), std::invalid_argument);
  spec.batch_size = 4;
  EXPECT_THROW(MakeTrainSource(spec, 2, 2), std::invalid_argument);
}

TEST(SourceTest, TestSharesCoverTestSetOnce) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.augment = true;  // must not apply to test batches
  spec.prefetch = 2;
  const int world = 3;
  std::vector<int> seen(kTest, 0);
  for (int r = 0; r < world; ++r) {
    auto src = MakeTestSource(spec, r, world);
    const int64_t share = (kTest - r + world - 1) / world;  // 8, 8, 7
    ASSERT_EQ(src->BatchesPerEpoch(), (share + 3) / 4);
    int64_t expect = r;
    for (int64_t b = 0; b < src->BatchesPerEpoch(); ++b) {
      const Batch batch = src->Next();
      EXPECT_EQ(batch.size(), std::min<int64_t>(4, share - b * 4));
      for (int64_t idx : RowIndices(batch)) {
        EXPECT_EQ(idx, expect);  // in order
        expect += world;
        ++seen.at(idx);
      }
      EXPECT_NEAR(batch.images[0][0][1][1].item<float>(), (Pixel(RowIndices(batch)[0], 1, 1) / 255.0 - 0.1307) / 0.3081,
                  1e-5);
    }
    EXPECT_EQ(src->Next().size(), 0);
    EXPECT_EQ(src->Next().size(), 0);
  }
  for (int64_t i = 0; i < kTest; ++i) EXPECT_EQ(seen[i], 1) << i;
}

TEST(SourceTest, ValidationHoldOutIsDisjointAndFixed) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.val_fraction = 0.2;
  const auto held = ValidationRows(kTrain, 0.2, spec.seed);
  ASSERT_EQ(held.size(), 10u);  // round(0.2 * 50)
  EXPECT_EQ(held, ValidationRows(kTrain, 0.2, spec.seed));
  EXPECT_NE(held, ValidationRows(kTrain, 0.2, spec.seed + 1));
  EXPECT_TRUE(ValidationRows(kTrain, 0, spec.seed).empty());
  EXPECT_THROW(ValidationRows(kTrain, 1.0, spec.seed), std::invalid_argument);
  const DatasetInfo info = DescribeDataset(spec);
  EXPECT_EQ(info.train_size, 40);
  EXPECT_EQ(info.val_size, 10);
  // Training batches over two epochs never touch a held-out row; each epoch
  // covers the 40 others (10 batches of 4 on one rank).
  auto train = MakeTrainSource(spec, 0, 1);
  ASSERT_EQ(train->BatchesPerEpoch(), 10);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int b = 0; b < 10; ++b)
      for (int64_t row : RowIndices(train->Next())) {
        EXPECT_FALSE(std::binary_search(held.begin(), held.end(), row)) << row;
        seen.insert(row);
      }
    EXPECT_EQ(seen.size(), 40u);
  }
  // The validation batches: exactly the held-out rows, once, over 2 ranks.
  std::multiset<int64_t> val_rows;
  for (int r = 0; r < 2; ++r) {
    auto val = MakeValSource(spec, r, 2);
    for (Batch b = val->Next(); b.size() > 0; b = val->Next())
      for (int64_t row : RowIndices(b)) val_rows.insert(row);
  }
  EXPECT_EQ(std::vector<int64_t>(val_rows.begin(), val_rows.end()), held);
  spec.val_fraction = 0;
  EXPECT_EQ(MakeValSource(spec, 0, 1), nullptr);
}

TEST(SourceTest, StartBatchContinuesTheSameSequence) {
  TempDir dir;
  WriteIdxDir(dir.path());
  DataSpec spec = IdxSpec(dir.path());
  spec.augment = true;
  spec.prefetch = 2;
  spec.val_fraction = 0.1;
  auto from_zero = MakeTrainSource(spec, 1, 2);
  for (int k = 0; k < 7; ++k) from_zero->Next();  // across the epoch boundary (5 per epoch)
  spec.start_batch = 7;
  auto resumed = MakeTrainSource(spec, 1, 2);
  for (int k = 7; k < 15; ++k) EXPECT_TRUE(SameBatch(from_zero->Next(), resumed->Next())) << "batch " << k;
  DataSpec synth;
  synth.batch_size = 2;
  synth.image_size = 8;
  synth.synthetic_size = 40;
  auto s0 = MakeTrainSource(synth, 0, 1);
  s0->Next();
  s0->Next();
  synth.start_batch = 2;
  EXPECT_TRUE(SameBatch(s0->Next(), MakeTrainSource(synth, 0, 1)->Next()));
}

TEST(SourceTest, Synthetic) {
  DataSpec spec;
  spec.batch_size = 5;
  spec.image_size = 16;
  spec.synthetic_classes = 7;
  spec.synthetic_size = 100;
  spec.seed = 3;
  const DatasetInfo info = DescribeDataset(spec);
  EXPECT_FALSE(info.real);
  EXPECT_EQ(info.channels, 3);
  EXPECT_EQ(info.height, 16);
  EXPECT_EQ(info.num_classes, 7);
  EXPECT_EQ(MakeTestSource(spec, 0, 2), nullptr);
  auto a = MakeTrainSource(spec, 1, 2), b = MakeTrainSource(spec, 1, 2), c = MakeTrainSource(spec, 0, 2);
  EXPECT_EQ(a->BatchesPerEpoch(), 10);
  for (int k = 0; k < 6; ++k) {
    const Batch x = a->Next();
    ASSERT_EQ(x.images.sizes(), (std::vector<int64_t>{5, 3, 16, 16}));
    EXPECT_GE(x.labels.min().item<int64_t>(), 0);
    EXPECT_LT(x.labels.max().item<int64_t>(), 7);
    EXPECT_TRUE(SameBatch(x, b->Next()));
    EXPECT_FALSE(torch::equal(x.images, c->Next().images));
  }
  spec.image_size = 0;
  spec.synthetic_size = 3;
  EXPECT_EQ(DescribeDataset(spec).height, 224);
  EXPECT_EQ(MakeTrainSource(spec, 0, 2)->BatchesPerEpoch(), 1);
}

TEST(DatasetTest, RealFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) GTEST_SKIP() << dir << " is not installed (Debian package dataset-fashion-mnist)";
  DataSpec spec;
  spec.name = "fashion-mnist";  // the default directory
  const DatasetInfo info = DescribeDataset(spec);
  EXPECT_TRUE(info.real);
  EXPECT_EQ(info.train_size, 60000);
  EXPECT_EQ(info.test_size, 10000);
  EXPECT_EQ(info.num_classes, 10);
  EXPECT_EQ(info.channels, 1);
  EXPECT_EQ(info.height, 28);
  EXPECT_EQ(info.width, 28);
  spec.batch_size = 64;
  auto src = MakeTrainSource(spec, 0, 2);
  EXPECT_EQ(src->BatchesPerEpoch(), 30000 / 64);
  const Batch b = src->Next();
  EXPECT_EQ(b.images.sizes(), (std::vector<int64_t>{64, 1, 28, 28}));
  // Normalised with Fashion-MNIST's statistics: roughly zero mean, unit std.
  EXPECT_NEAR(b.images.mean().item<float>(), 0.0, 0.3);
  EXPECT_NEAR(b.images.std().item<float>(), 1.0, 0.3);
}

}  // namespace
}  // namespace ddpbench
