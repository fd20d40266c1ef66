// The fuzz suite for every C++ reader of outside data: each seed of
// tests/fuzz/corpus/ (and a snapshot written here, whose format belongs to
// this build's LibTorch) is mutated thousands of times with a fixed seed (bit
// flips, truncation, growth, 32-bit header fields set to 0, huge and negative
// values) and handed to its reader. Every input must end in success or one
// clear error (DataError, ResultsError: exit 2 and 4 in the binary), never
// another exception, a signal, a hang, or an allocation of the size a corrupt
// header claims (readers run on a CPU "device" of 64 MiB: a bigger allocation
// fails the test), and a results file the writer refused must be left as it
// was. Each reader's tally is printed (the note quotes it).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>

#include "datasets/dataset.h"
#include "datasets/image_decode.h"
#include "datasets/image_transforms.h"
#include "harness/dist.h"
#include "harness/memory.h"
#include "base/results.h"
#include "harness/snapshot.h"
#include "tests/test_util.h"

namespace ddpbench {
namespace {

constexpr int kInputsPerReader = 2000;
constexpr int64_t kReaderMemory = 64 << 20;

std::string Corpus(const std::string& name) { return std::string(DDPBENCH_SOURCE_DIR) + "/tests/fuzz/corpus/" + name; }
std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void Spit(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
}

// One mutation of `seed`, chosen by `rng`.
std::string Mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string s = seed;
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  switch (rng() % 6) {
    case 0:  // bit flips
      for (int i = 0, n = 1 + static_cast<int>(pick(8)); i < n && !s.empty(); ++i) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
      break;
    case 1:  // truncation
      s.resize(pick(s.size() + 1));
      break;
    case 2: {  // growth: random bytes or a repeated chunk
      const size_t at = pick(s.size() + 1);
      std::string extra = rng() % 2 ? s.substr(pick(s.size() + 1), 1 + pick(64)) : std::string(1 + pick(64), '\0');
      for (char& c : extra) c = rng() % 3 ? c : static_cast<char>(rng());
      s.insert(at, extra);
      break;
    }
    default: {  // a 32-bit field (headers: the first 16 bytes, 4-aligned) set to 0, huge or negative
      static const uint32_t kValues[] = {0, 0xFFFFFFFFu, 0x7FFFFFFFu, 0x80000000u, 0x00FFFFFFu, 1};
      if (s.size() < 4) break;
      const size_t at = std::min(pick(4) * 4, s.size() - 4);
      const uint32_t v = kValues[pick(6)];
      for (int b = 0; b < 4; ++b) s[at + static_cast<size_t>(b)] = static_cast<char>(v >> (24 - 8 * b));
      break;
    }
  }
  return s;
}

struct Tally {
  int read = 0, clear_error = 0;
  std::map<std::string, int> messages;  // a few distinct clear errors, for the log
};

// Runs `read` on kInputsPerReader mutations of `seed` written to `path`.
// `read` returns normally (read) or throws; DataError and ResultsError are
// clear errors, anything else fails the test with the input kept on disk.
Tally FuzzReader(const std::string& name, const std::string& seed, const std::string& path, uint64_t rng_seed,
                 const std::function<void(const std::string&)>& read) {
  InstallCpuMemoryTracker(kReaderMemory);
  std::mt19937_64 rng(rng_seed);
  Tally tally;
  for (int i = 0; i < kInputsPerReader; ++i) {
    const std::string input = Mutate(seed, rng);
    Spit(path, input);
    CpuDeviceScope device(0);  // the reader's allocations count against 64 MiB
    try {
      read(input);
      ++tally.read;
    } catch (const DataError& e) {
      ++tally.clear_error;
      if (tally.messages.size() < 3) ++tally.messages[e.what()];
    } catch (const ResultsError& e) {
      ++tally.clear_error;
      if (tally.messages.size() < 3) ++tally.messages[e.what()];
    } catch (const std::exception& e) {
      Spit(path + ".failing", input);
      ADD_FAILURE() << name << " input " << i << " (kept as " << path << ".failing): " << e.what();
      break;
    }
  }
  InstallCpuMemoryTracker(0);
  std::printf("fuzz %-22s %d inputs: %d read, %d clear errors\n", name.c_str(), kInputsPerReader, tally.read,
              tally.clear_error);
  for (const auto& m : tally.messages) std::printf("    e.g. %s\n", m.first.substr(0, 150).c_str());
  EXPECT_EQ(tally.read + tally.clear_error, kInputsPerReader) << name;
  return tally;
}

// (std::filesystem is not used: libtorch.so exports std::filesystem symbols
// of another libstdc++ build, and calls bound to them crash.)
class Fuzz : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.File(name); }
  testing::TempDir dir_;
};

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) names.push_back(dir + "/" + e->d_name);
    ::closedir(d);
  }
  return names;
}

TEST_F(Fuzz, IdxImagesLabelsAndGzip) {
  const std::string images = Slurp(Corpus("images.idx")), labels = Slurp(Corpus("labels.idx"));
  Spit(Path("labels.idx"), labels);
  Spit(Path("images.idx"), images);
  FuzzReader("idx images", images, Path("images.idx"), 1,
             [&](const std::string&) { ReadIdxPair(Path("images.idx"), Path("labels.idx")); });
  Spit(Path("images.idx"), images);
  FuzzReader("idx labels", labels, Path("labels.idx"), 2,
             [&](const std::string&) { ReadIdxPair(Path("images.idx"), Path("labels.idx")); });
  Spit(Path("labels.idx"), labels);
  FuzzReader("idx images gzip", Slurp(Corpus("images.idx.gz")), Path("images.idx.gz"), 3,
             [&](const std::string&) { ReadIdxPair(Path("images.idx.gz"), Path("labels.idx")); });
}

TEST_F(Fuzz, CifarBinary) {
  for (bool hundred : {false, true}) {
    const std::string name = hundred ? "cifar100.bin" : "cifar10.bin";
    const Tally t = FuzzReader(hundred ? "cifar-100 binary" : "cifar-10 binary", Slurp(Corpus(name)), Path(name),
                               hundred ? 5 : 4, [&](const std::string&) { ReadCifarFiles({Path(name)}, hundred); });
    EXPECT_GT(t.clear_error, 0);
  }
}

// The ImageFolder source's decoder: baseline and progressive JPEG
// and PNG fixtures, through the header, the full decode, a region decode of
// the top rows (the rest never decoded) and the training sample (crop,
// DCT-scaled region decode, resize) as a worker runs it.
TEST_F(Fuzz, JpegAndPngImages) {
  const std::string images = std::string(DDPBENCH_SOURCE_DIR) + "/tests/data/images/";
  uint64_t rng_seed = 20;
  for (const char* name : {"baseline.jpg", "progressive.jpg", "rgb.png"}) {
    const Tally t = FuzzReader(std::string("image ") + name, Slurp(images + name), Path(name), rng_seed++,
                               [&](const std::string& input) {
                                 ReadImageHeader(name, input);
                                 DecodeImage(name, input);
                                 DecodeImageFor(name, input, [](int64_t, int64_t width) {
                                   return DecodeRequest{1, CropBox{0, width / 3, 5, width / 3}};
                                 });
                                 TrainSample(name, input, 16, 7);
                               });
    EXPECT_GT(t.clear_error, 0);
  }
}

// --out and --baseline: reading rows, and appending to a mutated file, which
// must either take the row (the file then ends with it) or stay byte-identical.
TEST_F(Fuzz, ResultsCsvReadAndAppend) {
  const std::string seed = Slurp(Corpus("results.csv"));
  FuzzReader("results csv (read)", seed, Path("r.csv"), 6, [&](const std::string&) { ReadRows(Path("r.csv")); });
  const Row row{{"strategy", "single"}, {"throughput_img_s", "1.5"}, {"timestamp", "2026-11-24T11:00:00Z"}};
  FuzzReader("results csv (append)", seed, Path("a.csv"), 7, [&](const std::string& input) {
    try {
      AppendRow(Path("a.csv"), row);
    } catch (const ResultsError&) {
      EXPECT_EQ(Slurp(Path("a.csv")), input) << "a refused append changed the file";
      throw;
    }
    const std::vector<Row> rows = ReadRows(Path("a.csv"));
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows.back().at("timestamp"), "2026-11-24T11:00:00Z");
  });
}

// A manifest or a rank file mutated: the store resumes from it when it is
// still intact, else from the snapshot before (never a mixture), and names
// what it skipped.
TEST_F(Fuzz, SnapshotManifestAndRankFile) {
  DistContext dist;
  const std::map<std::string, std::string> identity{{"--strategy", "single"}};
  const std::string snaps = Path("snaps");
  {
    SnapshotStore store(snaps, identity, 2);
    for (int64_t step : {1, 2}) {
      LoopState loop;
      loop.step = step;
      store.Write(loop, {{"w", torch::full({4}, static_cast<double>(step))}}, dist);
    }
  }
  std::string manifest, rank_file;
  for (const std::string& p : ListDir(snaps)) {
    if (p.find("step000000002") == std::string::npos) continue;
    (p.size() > 5 && p.substr(p.size() - 5) == ".json" ? manifest : rank_file) = p;
  }
  ASSERT_FALSE(manifest.empty());
  ASSERT_FALSE(rank_file.empty());
  for (const auto& [name, path, rng_seed] : {std::tuple<std::string, std::string, uint64_t>{"snapshot manifest", manifest, 8},
                                             {"snapshot rank file", rank_file, 9}}) {
    const std::string seed = Slurp(path);
    FuzzReader(name, seed, path, rng_seed, [&](const std::string&) {
      SnapshotStore store(snaps, identity, 2);
      const auto loaded = store.LoadNewest(dist);
      ASSERT_TRUE(loaded.has_value()) << "step 1's snapshot is intact";
      const double w = loaded->tensors.at("w")[0].item<double>();
      EXPECT_TRUE(torch::equal(loaded->tensors.at("w"), torch::full({4}, w))) << "a mixture of snapshots";
      EXPECT_EQ(static_cast<double>(loaded->loop.step), w) << "manifest of one step, tensors of another";
    });
    Spit(path, seed);
  }
}

}  // namespace
}  // namespace ddpbench
