// Harness behaviour: every bad flag value gives one ConfigError naming the
// value; the results CSV quotes, locks, refuses foreign headers and loses no
// rows under concurrent writers; percentiles, baseline matching and per-device
// CPU memory attribution.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <set>
#include <cctype>
#include <thread>

#include "harness/config.h"
#include "harness/memory.h"
#include "harness/results.h"
#include "harness/runner.h"
#include "tests/test_util.h"

namespace ddpbench {
namespace {

using testing::TempDir;

RunConfig Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ddpbench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  RunConfig config;
  ParseCommandLine(static_cast<int>(argv.size()), argv.data(), &config);
  return config;
}

std::string ParseError(const std::vector<std::string>& args) {
  try {
    Parse(args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsAndForms) {
  RunConfig c = Parse({"--strategy", "single", "--batch-size=8", "--model=resnet50"});
  EXPECT_EQ(c.strategy, "single");
  EXPECT_EQ(c.batch_size, 8);
  EXPECT_EQ(c.Depth(), 50);
  EXPECT_EQ(c.steps, 50);  // default when neither --steps nor --epochs
  EXPECT_NE(c.command.find("--batch-size=8"), std::string::npos);
  RunConfig e = Parse({"--epochs=2"});
  EXPECT_EQ(e.steps, -1);
  EXPECT_EQ(e.epochs, 2);
}

struct BadFlag {
  std::string arg;
  std::string expect;  // the bad value and a word of what is accepted
};

void PrintTo(const BadFlag& flag, std::ostream* os) { *os << flag.arg; }

class BadFlags : public ::testing::TestWithParam<BadFlag> {};

TEST_P(BadFlags, OneMessageNamingTheValue) {
  std::string message = ParseError({GetParam().arg});
  ASSERT_FALSE(message.empty()) << GetParam().arg << " was accepted";
  EXPECT_NE(message.find(GetParam().expect), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
}

INSTANTIATE_TEST_SUITE_P(
    Harness, BadFlags,
    ::testing::Values(
        BadFlag{"--strategy=bogus", "bogus: not registered; registered strategies: single"},
        BadFlag{"--gpus=0", "--gpus=0: must be at least 1"},
        BadFlag{"--gpus=abc", "abc"},
        BadFlag{"--device=tpu", "--device=tpu: not accepted; accepted values: auto|cuda|cpu"},
        BadFlag{"--threads-per-device=0", "--threads-per-device=0"},
        BadFlag{"--model=resnet19", "--model=resnet19: not accepted; accepted values: resnet18|"},
        BadFlag{"--width=0", "--width=0"},
        BadFlag{"--norm=layer", "--norm=layer: not accepted; accepted values: batch|group|frozen-bn"},
        BadFlag{"--dataset=imagenet", "--dataset=imagenet: not accepted; accepted values: synthetic|"},
        BadFlag{"--image-size=3", "--image-size=3: must be 0 (native) or 8..1024"},
        BadFlag{"--batch-size=0", "--batch-size=0: must be at least 1"},
        BadFlag{"--batch-size=-4", "--batch-size=-4"},
        BadFlag{"--steps=0", "--steps=0: must be at least 1"},
        BadFlag{"--epochs=0", "--epochs=0: must be a positive number"},
        BadFlag{"--warmup=-1", "--warmup=-1: must be at least 0"},
        BadFlag{"--amp=fp8", "--amp=fp8: not accepted; accepted values: off|bf16|fp16"},
        BadFlag{"--lr=0", "--lr=0: must be a positive number"},
        BadFlag{"--lr-scaling=cubic", "--lr-scaling=cubic: not accepted; accepted values: none|linear|sqrt"},
        BadFlag{"--optimizer=lamb", "--optimizer=lamb: not accepted; accepted values: sgd|adam"},
        BadFlag{"--momentum=1.5", "--momentum=1.5: must be in [0, 1)"},
        BadFlag{"--progress=maybe", "--progress=maybe"},
        BadFlag{"--verify-steps=0", "--verify-steps=0"},
        BadFlag{"--bucket-cap-mb=0", "--bucket-cap-mb=0"},
        BadFlag{"--grad-accum=0", "--grad-accum=0"},
        BadFlag{"--compression=int8", "--compression=int8: not accepted; accepted values: none|fp16|bf16"},
        BadFlag{"--timeout=0", "--timeout=0"},
        BadFlag{"--zero-reduce=tree", "--zero-reduce=tree"},
        BadFlag{"--balance=random", "--balance=random"},
        BadFlag{"--split=4,x", "--split=4,x: must be a comma list of unit counts"},
        BadFlag{"--chunks=0", "--chunks=0: must be at least 1"},
        BadFlag{"--schedule=zb", "--schedule=zb: not accepted; accepted values: gpipe|1f1b|interleaved|zero-bubble"},
        BadFlag{"--virtual-stages=-1", "--virtual-stages=-1: must be at least 0"},
        BadFlag{"--no-such-flag", "--no-such-flag"}),
    [](const ::testing::TestParamInfo<BadFlag>& info) {
      std::string name;
      for (char c : info.param.arg) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name + "_" + std::to_string(info.index);
    });

// A flag that only some strategies read, given with another strategy, is an
// error naming the strategies it applies to; its default value is not.
TEST(Config, StrategyFlagsOnlyWhereTheyApply) {
  EXPECT_EQ(ParseError({"--strategy=dp", "--chunks=8"}),
            "--chunks=8: applies only to --strategy=pmp, not to --strategy=dp; leave it out");
  EXPECT_EQ(ParseError({"--strategy=mp", "--bucket-cap-mb=5"}),
            "--bucket-cap-mb=5: applies only to --strategy=ddp|zero*, not to --strategy=mp; leave it out");
  EXPECT_NE(ParseError({"--strategy=single", "--split=4,6"}).find("applies only to --strategy=mp|pmp"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=ddp", "--schedule", "gpipe"}).find("--schedule=gpipe: applies only to --strategy=pmp"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=pmp", "--zero-reduce=all-reduce"}).find("--strategy=zero*"), std::string::npos);
  EXPECT_NE(ParseError({"--strategy=pmp", "--schedule=1f1b", "--virtual-stages=2"})
                .find("--virtual-stages=2: applies only to --schedule=interleaved"),
            std::string::npos);
  // Where they apply, and defaults never given, are fine; zero* matches by prefix.
  EXPECT_EQ(ParseError({"--strategy=pmp", "--chunks=8", "--split=4,6", "--balance=params"}), "");
  EXPECT_EQ(ParseError({"--strategy=mp", "--split=4,6"}), "");
  EXPECT_EQ(ParseError({"--strategy=zero1", "--bucket-cap-mb=5", "--zero-reduce=all-reduce"}), "");
  EXPECT_EQ(ParseError({"--strategy=ddp", "--bucket-cap-mb=5", "--timeout=30"}), "");
  EXPECT_EQ(ParseError({"--strategy=pmp", "--schedule=interleaved", "--virtual-stages=3"}), "");
  EXPECT_EQ(ParseError({"--strategy=dp"}), "");
  EXPECT_EQ(FlagStrategies("--bucket-cap-mb"), (std::vector<std::string>{"ddp", "zero*"}));
  EXPECT_TRUE(FlagStrategies("--batch-size").empty());
}

TEST(Config, StepsAndEpochsAreExclusive) {
  EXPECT_NE(ParseError({"--steps=5", "--epochs=1"}).find("give one of them, not both"), std::string::npos);
}

TEST(Config, ShellQuote) {
  EXPECT_EQ(ShellQuote("--out=/tmp/a.csv"), "--out=/tmp/a.csv");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
}

TEST(Results, QuotingRoundTrip) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  Row row{{"strategy", "single"}, {"command", "ddpbench --x='a, \"b\"'\nnext"}, {"host", " padded "}};
  AppendRow(path, row);
  auto rows = ReadRows(path);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["command"], row["command"]);
  EXPECT_EQ(rows[0]["host"], " padded ");
  EXPECT_EQ(rows[0]["accuracy"], "");  // unset cells are empty, never 0
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(Results, HeaderWrittenOnceAndForeignHeaderRefused) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  AppendRow(path, {{"strategy", "single"}});
  AppendRow(path, {{"strategy", "ddp"}});
  std::string text = testing::ReadFile(path);
  EXPECT_EQ(text.find("timestamp,"), 0u);
  EXPECT_EQ(text.find("timestamp,", 1), std::string::npos);
  EXPECT_EQ(ReadRows(path).size(), 2u);

  std::string foreign = dir.File("foreign.csv");
  testing::WriteFile(foreign, "a,b\n1,2\n");
  try {
    AppendRow(foreign, {{"strategy", "single"}});
    FAIL() << "appended to a file with another header";
  } catch (const ResultsError& e) {
    EXPECT_NE(std::string(e.what()).find("header"), std::string::npos) << e.what();
  }
  EXPECT_EQ(testing::ReadFile(foreign), "a,b\n1,2\n");  // untouched
  EXPECT_THROW(AppendRow(path, {{"no_such_column", "1"}}), ResultsError);
  EXPECT_THROW(AppendRow(dir.File("missing/dir/r.csv"), {{"strategy", "x"}}), ResultsError);
}

TEST(Results, ConcurrentWritersLoseNoRows) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  constexpr int kWriters = 8, kRows = 40;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int r = 0; r < kRows; ++r) {
        Row row{{"strategy", "w" + std::to_string(w)}, {"steps", std::to_string(r)},
                {"command", std::string(2000, 'x') + ",\"quoted\""}};
        AppendRow(path, row);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto rows = ReadRows(path);  // throws on a torn row
  ASSERT_EQ(rows.size(), static_cast<size_t>(kWriters * kRows));
  std::map<std::string, std::set<std::string>> seen;
  for (auto& row : rows) seen[row["strategy"]].insert(row["steps"]);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kWriters));
  for (auto& [writer, steps] : seen) EXPECT_EQ(steps.size(), static_cast<size_t>(kRows)) << writer;
}

TEST(Results, TornFileIsRefused) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  AppendRow(path, {{"strategy", "single"}});
  std::string text = testing::ReadFile(path);
  testing::WriteFile(path, text + "2026-01-01,abc");  // a row cut short
  EXPECT_THROW(AppendRow(path, {{"strategy", "single"}}), ResultsError);
}

TEST(Runner, Percentile) {
  EXPECT_DOUBLE_EQ(Percentile({5, 1, 3, 2, 4}, 50), 3);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90), 9);
  EXPECT_DOUBLE_EQ(Percentile({7}, 90), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
}

TEST(Runner, BaselineMatchesOnlyTheSameWorkload) {
  Row base{{"strategy", "single"}, {"gpus", "1"}, {"model", "resnet18"}, {"dataset", "synthetic"},
           {"per_device_batch", "16"}, {"device", "cpu"}, {"threads_per_device", "1"},
           {"image_size", "32"}, {"amp", "off"}, {"width", "64"}, {"small_input", "true"},
           {"norm", "batch"}, {"device_name", "cpu"}, {"throughput_img_s", "100.5"}};
  Row newer = base;
  newer["throughput_img_s"] = "120";
  Row other = base;
  other["per_device_batch"] = "32";
  other["throughput_img_s"] = "999";
  Row ddp = base;
  ddp["strategy"] = "ddp";
  ddp["gpus"] = "2";
  double t = 0;
  EXPECT_TRUE(FindBaselineThroughput({base, newer, other}, ddp, &t));
  EXPECT_DOUBLE_EQ(t, 120);  // the newest matching row
  ddp["threads_per_device"] = "2";
  EXPECT_FALSE(FindBaselineThroughput({base, newer, other}, ddp, &t));
}

TEST(Memory, CpuAllocationsAreChargedToTheThreadsDevice) {
  InstallCpuMemoryTracker();
  int64_t before0 = CpuAllocatedBytes(7), before1 = CpuAllocatedBytes(8);
  torch::Tensor a, b;
  {
    CpuDeviceScope scope(7);
    a = torch::empty({1024, 256});  // 1 MiB
  }
  std::thread worker([&] {
    CpuDeviceScope scope(8);
    b = torch::empty({1024, 512});  // 2 MiB
  });
  worker.join();
  EXPECT_EQ(CpuAllocatedBytes(7) - before0, 1 << 20);
  EXPECT_EQ(CpuAllocatedBytes(8) - before1, 2 << 20);
  EXPECT_GE(CpuPeakBytes(8), 2 << 20);
  b = torch::Tensor();  // freed from another thread, still charged back to device 8
  EXPECT_EQ(CpuAllocatedBytes(8), before1);
  {
    CpuDeviceScope scope(7);
    auto c = a.clone();
    EXPECT_EQ(CpuAllocatedBytes(7) - before0, 2 << 20);
  }
  EXPECT_EQ(CpuAllocatedBytes(7) - before0, 1 << 20);
}

}  // namespace
}  // namespace ddpbench
