// Harness behaviour: every bad flag value gives one ConfigError naming the
// value, a repeated or unknown flag is named; the results CSV quotes, locks,
// refuses foreign headers, migrates another version's header and loses no
// rows under concurrent writers, saves a row it cannot append; every path
// option is checked up front; percentiles, baseline matching and per-device
// CPU memory attribution.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <cctype>
#include <thread>

#include "harness/context.h"
#include "harness/cpu_pinning.h"
#include "harness/flight_recorder.h"
#include "harness/inject.h"
#include "harness/straggler.h"
#include "app/help.h"
#include "app/cli.h"
#include "harness/memory.h"
#include "base/results.h"
#include "app/runner.h"
#include "projection/step_model.h"
#include "strategies/registry.h"
#include "planning/traits.h"
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

TEST(CpuPinning, ARankGetsOneOfItsGivenCoresAndTheGivenSetIsRemembered) {
  cpu_set_t given;
  ASSERT_EQ(sched_getaffinity(0, sizeof(given), &given), 0);
  cpu_set_t before = CoresBeforePinning();
  EXPECT_TRUE(CPU_EQUAL(&before, &given));
  int first = 0;
  while (!CPU_ISSET(first, &given)) ++first;
  PinRankToCores(0, 1);
  cpu_set_t now;
  ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
  EXPECT_EQ(CPU_COUNT(&now), 1);
  EXPECT_TRUE(CPU_ISSET(first, &now));
  cpu_set_t remembered = CoresBeforePinning();  // what the calibration widens back to: not every core
  EXPECT_TRUE(CPU_EQUAL(&remembered, &given));
  sched_setaffinity(0, sizeof(given), &given);
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

TEST(Config, BatchNormNeedsTwoValuesPerChannelOfTheLastStage) {
  RunConfig c;  // --norm=batch
  EXPECT_EQ(FewestTrainingImages(c, 32), 2);  // 32 -> 16 -> 8 -> 4 -> 2 -> 1: 1x1
  EXPECT_EQ(FewestTrainingImages(c, 33), 1);  // ... -> 3 -> 2: 2x2
  c.small_input = true;                       // stride 8
  EXPECT_EQ(FewestTrainingImages(c, 8), 2);
  EXPECT_EQ(FewestTrainingImages(c, 16), 1);
  c.small_input = false, c.norm = "group";
  EXPECT_EQ(FewestTrainingImages(c, 32), 1);
  EXPECT_NE(ParseError({"--image-size=32", "--batch-size=1"})
                .find("--batch-size=1: batch norm (--norm=batch) needs at least 2 images per device at "
                      "--image-size=32"),
            std::string::npos);
  EXPECT_NE(ParseError({"--image-size=32", "--batch-size=2", "--grad-accum=2", "--strategy=ddp"})
                .find("--batch-size=2 --grad-accum=2: batch norm"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--image-size=32", "--batch-size=1", "--norm=group"}), "");
  EXPECT_EQ(ParseError({"--image-size=64", "--batch-size=1"}), "");
  EXPECT_NE(ParseError({"--strategy=pmp", "--gpus=2", "--image-size=32", "--batch-size=8", "--chunks=8"})
                .find("--chunks=8: micro-batches of 1 image(s) of --batch-size=8; batch norm"),
            std::string::npos);
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
        BadFlag{"--epochs=0", "--epochs=0: must be > 0"},
        BadFlag{"--warmup=-1", "--warmup=-1: must be at least 0"},
        BadFlag{"--amp=fp8", "--amp=fp8: not accepted; accepted values: off|bf16|fp16"},
        BadFlag{"--lr=0", "--lr=0: must be > 0"},
        BadFlag{"--lr-scaling=cubic", "--lr-scaling=cubic: not accepted; accepted values: none|linear|sqrt"},
        BadFlag{"--optimizer=lamb", "--optimizer=lamb: not accepted; accepted values: sgd|adam"},
        BadFlag{"--momentum=1.5", "--momentum=1.5: must be in [0, 1)"},
        BadFlag{"--progress=maybe", "--progress=maybe"},
        BadFlag{"--verify-steps=0", "--verify-steps=0"},
        BadFlag{"--bucket-cap-mb=0", "--bucket-cap-mb=0"},
        BadFlag{"--grad-accum=0", "--grad-accum=0"},
        BadFlag{"--compression=int8", "--compression=int8: not accepted; accepted values: none|fp16|bf16"},
        BadFlag{"--timeout=0", "--timeout=0"},
        BadFlag{"--flight-recorder=-1", "--flight-recorder=-1"},
        BadFlag{"--zero-reduce=tree", "--zero-reduce=tree"},
        BadFlag{"--cpu-backend=mpi", "--cpu-backend=mpi"},
        BadFlag{"--balance=random", "--balance=random"},
        BadFlag{"--split=4,x", "--split=4,x: must be a comma list of unit counts"},
        BadFlag{"--chunks=0", "--chunks=0: must be at least 1"},
        BadFlag{"--schedule=zb", "--schedule=zb: not accepted; accepted values: gpipe|1f1b|interleaved|zero-bubble|interleaved-zero-bubble"},
        BadFlag{"--virtual-stages=-1", "--virtual-stages=-1: must be at least 0"},
        BadFlag{"--no-such-flag", "--no-such-flag"}),
    [](const ::testing::TestParamInfo<BadFlag>& info) {
      std::string name;
      for (char c : info.param.arg) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name + "_" + std::to_string(info.index);
    });

TEST(Config, RepeatedFlagNamesBothValues) {
  EXPECT_EQ(ParseError({"--steps=100", "--steps", "200"}), "--steps is given 2 times (100, 200); give it once");
  EXPECT_NE(ParseError({"--out=a.csv", "--out=b.csv"}).find("(a.csv, b.csv)"), std::string::npos);
}

TEST(Config, UnknownFlagSuggestsTheNearest) {
  EXPECT_EQ(ParseError({"--stpes=5"}), "--stpes: unknown flag; did you mean --steps?");
  EXPECT_EQ(ParseError({"--batchsize", "8"}), "--batchsize: unknown flag; did you mean --batch-size?");
  EXPECT_EQ(ParseError({"--qqqqqqqqqqqq"}), "--qqqqqqqqqqqq: unknown flag (see --help)");
  EXPECT_NE(ParseError({"stray"}).find("unexpected argument 'stray'"), std::string::npos);
}

// A flag that only some strategies read, given with another strategy, is an
// error naming the strategies it applies to; its default value is not.
TEST(Config, StrategyFlagsOnlyWhereTheyApply) {
  EXPECT_EQ(ParseError({"--strategy=dp", "--chunks=8"}),
            "--chunks=8: applies only to --strategy=pmp, not to --strategy=dp; leave it out");
  EXPECT_EQ(ParseError({"--strategy=mp", "--bucket-cap-mb=5"}),
            "--bucket-cap-mb=5: applies only to --strategy=ddp|zero1|zero2|zero3|hsdp, not to --strategy=mp; leave it out");
  EXPECT_NE(ParseError({"--strategy=single", "--split=4,6"}).find("applies only to --strategy=mp|pmp"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=ddp", "--schedule", "gpipe"}).find("--schedule=gpipe: applies only to --strategy=pmp"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=pmp", "--zero-reduce=all-reduce"}).find("--strategy=zero1|zero2|zero3"), std::string::npos);
  EXPECT_NE(ParseError({"--strategy=pmp", "--schedule=1f1b", "--virtual-stages=2"})
                .find("--virtual-stages=2: applies only to --schedule=interleaved|interleaved-zero-bubble"),
            std::string::npos);
  // Stages of half blocks: mp/pmp only, and only these two granularities.
  EXPECT_EQ(ParseError({"--strategy=pmp", "--units=thirds"}),
            "--units=thirds: not accepted; accepted values: auto|blocks|half-blocks");
  EXPECT_NE(ParseError({"--strategy=ddp", "--units=half-blocks"}).find("applies only to --strategy=mp|pmp"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--strategy=pmp", "--units=half-blocks", "--split=11,7"}), "");
  // Whole-step CUDA graphs are captured for single and ddp; the others are
  // refused saying why; bf16 and fused are fine.
  EXPECT_EQ(ParseError({"--strategy=ddp", "--device=cuda", "--cuda-graphs"}), "");
  EXPECT_NE(ParseError({"--strategy=zero3", "--device=cuda", "--cuda-graphs"})
                .find("--cuda-graphs with --strategy=zero3: its step times its gathers"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=pmp", "--device=cuda", "--cuda-graphs"}).find("accepted: --strategy=single|ddp,"),
            std::string::npos);
  // --overlap-optimizer: ddp and the sharded strategies, refused saying why where the maths would differ.
  EXPECT_EQ(ParseError({"--strategy=ddp", "--overlap-optimizer", "--grad-accum=2", "--amp=bf16"}), "");
  EXPECT_EQ(ParseError({"--strategy=zero1", "--overlap-optimizer", "--zero-reduce=all-reduce"}), "");
  EXPECT_EQ(ParseError({"--strategy=zero2", "--overlap-optimizer", "--gpus=4", "--replicate-degree=2"}), "");
  EXPECT_EQ(ParseError({"--strategy=zero3", "--overlap-optimizer"}), "");
  EXPECT_EQ(ParseError({"--strategy=hsdp", "--overlap-optimizer", "--gpus=4", "--replicate-degree=2"}), "");
  EXPECT_EQ(ParseError({"--strategy=pmp", "--overlap-optimizer", "--schedule=zero-bubble"}), "");
  EXPECT_EQ(ParseError({"--strategy=mp", "--overlap-optimizer"}), "");
  EXPECT_NE(ParseError({"--strategy=dp", "--overlap-optimizer"})
                .find("--overlap-optimizer with --strategy=dp: it steps each parameter as its gradient becomes final"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=single", "--overlap-optimizer"})
                .find("accepted: --strategy=ddp|mp|pmp|zero1|zero2|zero3|hsdp, or leave"),
            std::string::npos);
  // The pipelines: their stages in one process, on CPU devices.
  EXPECT_NE(ParseError({"--strategy=pmp", "--overlap-optimizer", "--stage-ranks"})
                .find("--overlap-optimizer with --stage-ranks: a stage's parameters are stepped by the process's "
                      "other stages"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=mp", "--overlap-optimizer", "--device=cuda"})
                .find("--overlap-optimizer with --strategy=mp on --device=cuda: "),
            std::string::npos);
  for (const char* strategy : {"--strategy=ddp", "--strategy=zero2"})
    EXPECT_NE(ParseError({strategy, "--overlap-optimizer", "--amp=fp16"})
                  .find("--overlap-optimizer with --amp=fp16: the loss scaler must see every gradient"),
              std::string::npos)
        << strategy;
  EXPECT_NE(ParseError({"--strategy=ddp", "--device=cuda", "--overlap-optimizer", "--cuda-graphs"})
                .find("--overlap-optimizer with --cuda-graphs: "),
            std::string::npos);
  // --gradient-as-bucket-view: ddp's, and not under a captured step.
  EXPECT_EQ(ParseError({"--strategy=ddp", "--gradient-as-bucket-view", "--grad-accum=2", "--overlap-optimizer"}), "");
  EXPECT_NE(ParseError({"--strategy=zero1", "--gradient-as-bucket-view"})
                .find("--gradient-as-bucket-view=true: applies only to --strategy=ddp, not to --strategy=zero1"),
            std::string::npos);
  EXPECT_NE(ParseError({"--strategy=ddp", "--device=cuda", "--gradient-as-bucket-view", "--cuda-graphs"})
                .find("--gradient-as-bucket-view with --cuda-graphs: every step resets the gradients"),
            std::string::npos);
  // --fuse: bn-add-relu CUDA only, conv-bn on any device, both BatchNorm only.
  EXPECT_EQ(ParseError({"--device=cuda", "--fuse=bn-add-relu"}), "");
  EXPECT_EQ(ParseError({"--device=cpu", "--fuse=conv-bn"}), "");
  EXPECT_NE(ParseError({"--device=cpu", "--fuse=conv-bn", "--norm=group"})
                .find("--fuse=conv-bn with --norm=group: only BatchNorm is fused"),
            std::string::npos);
  EXPECT_NE(ParseError({"--device=cpu", "--memory-snapshot=m.pickle"})
                .find("--memory-snapshot=m.pickle: the snapshot is the CUDA caching allocator's history"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--device=cuda", "--fuse=magic"}), "--fuse=magic: not accepted; accepted values: off|bn-add-relu|conv-bn");
  EXPECT_NE(ParseError({"--device=cpu", "--fuse=bn-add-relu"}).find("--fuse=bn-add-relu: the fusion runs in cuDNN"),
            std::string::npos);
  EXPECT_NE(ParseError({"--device=cuda", "--fuse=bn-add-relu", "--norm=group"})
                .find("--fuse=bn-add-relu with --norm=group: only BatchNorm is fused"),
            std::string::npos);
  EXPECT_EQ(ParseError({"--strategy=single", "--device=cuda", "--cuda-graphs", "--amp=bf16", "--optimizer-impl=fused"}),
            "");
  // Where they apply, and defaults never given, are fine; each zero stage reads the zero flags.
  EXPECT_EQ(ParseError({"--strategy=pmp", "--chunks=8", "--split=4,6", "--balance=params"}), "");
  EXPECT_EQ(ParseError({"--strategy=mp", "--split=4,6"}), "");
  EXPECT_EQ(ParseError({"--strategy=zero1", "--bucket-cap-mb=5", "--zero-reduce=all-reduce"}), "");
  EXPECT_EQ(ParseError({"--strategy=ddp", "--bucket-cap-mb=5", "--timeout=30"}), "");
  EXPECT_EQ(ParseError({"--strategy=pmp", "--schedule=interleaved", "--virtual-stages=3"}), "");
  EXPECT_EQ(ParseError({"--strategy=dp"}), "");
  EXPECT_EQ(FlagStrategies("--bucket-cap-mb"), (std::vector<std::string>{"ddp", "zero1", "zero2", "zero3", "hsdp"}));
  EXPECT_EQ(FlagStrategies("--replicate-degree"),
            (std::vector<std::string>{"mp", "pmp", "zero1", "zero2", "zero3", "hsdp"}));
  EXPECT_TRUE(FlagStrategies("--batch-size").empty());
}

// The traits table is the one place a strategy is described: the registry
// pairs every row with a factory, the rows agree with themselves (a ZeRO
// stage only where states are sharded, each stage once but for a name that
// replicates it by node), and every flag a
// row reads is one the parser knows and reports as that strategy's.
TEST(StrategyTraits, EveryRegisteredStrategyHasOneConsistentRow) {
  ASSERT_EQ(StrategyTable().size(), StrategyTraitsTable().size());
  std::set<int> stages;
  for (const auto& entry : StrategyTable()) {
    const StrategyTraits* t = FindTraits(entry.info.name);
    ASSERT_NE(t, nullptr) << entry.info.name;
    EXPECT_EQ(t->family, entry.info.family) << t->name;
    if (t->family == Family::kSharded) {
      EXPECT_TRUE(t->zero_stage >= 1 && t->zero_stage <= 3) << t->name;
      // A row replicated by node (hsdp) is another name for its stage's strategy, mesh on.
      if (t->replicate_by_node) EXPECT_TRUE(t->Reads("--replicate-degree")) << t->name;
      else EXPECT_TRUE(stages.insert(t->zero_stage).second) << t->name << " repeats stage " << t->zero_stage;
    } else {
      EXPECT_EQ(t->zero_stage, 0) << t->name;
    }
    EXPECT_EQ(t->min_devices(), t->family == Family::kPipeline ? 2 : 1) << t->name;
    EXPECT_EQ(MinimumWorld(t->name), t->min_devices()) << t->name;
    EXPECT_TRUE(t->micro_batches ? t->family == Family::kPipeline : true) << t->name;
    for (const auto& flag : t->flags) {
      const auto readers = FlagStrategies(flag);
      EXPECT_NE(std::find(readers.begin(), readers.end(), t->name), readers.end()) << t->name << " " << flag;
      EXPECT_NE(HelpGroup(flag), "") << flag << " is in no --help topic";
    }
    // --cuda-graphs: captured exactly where the row gives no reason.
    EXPECT_EQ(t->Reads("--cuda-graphs"), t->no_cuda_graphs.empty()) << t->name;
  }
  EXPECT_EQ(stages, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(FindTraits("zero4"), nullptr);
  EXPECT_EQ(ParseError({"--strategy=zero4"}).rfind("--strategy=zero4: not registered; registered strategies: single|", 0),
            0u);
}

TEST(Config, StepsAndEpochsAreExclusive) {
  EXPECT_NE(ParseError({"--steps=5", "--epochs=1"}).find("give one of them, not both"), std::string::npos);
}

TEST(Config, DurationsAndAnswerFlags) {
  EXPECT_EQ(ParseDuration("--time-budget", "90"), 90);
  EXPECT_EQ(ParseDuration("--time-budget", "45s"), 45);
  EXPECT_EQ(ParseDuration("--time-budget", "30m"), 1800);
  EXPECT_EQ(ParseDuration("--time-budget", "2h"), 7200);
  EXPECT_EQ(ParseDuration("--time-budget", "1h30m"), 5400);
  EXPECT_EQ(ParseDuration("--time-budget", "1.5h"), 5400);
  for (const char* bad : {"abc", "", "0", "-5m", "10x", "m", "1h-5m"})
    EXPECT_THROW(ParseDuration("--time-budget", bad), ConfigError) << bad;
  RunConfig budget = Parse({"--time-budget=2m"});
  EXPECT_EQ(budget.time_budget_s, 120);
  EXPECT_EQ(budget.steps, -1);  // the budget ends the run
  EXPECT_EQ(budget.val_fraction, 0);  // synthetic data: nothing to hold out
  RunConfig real = Parse({"--dataset=fashion-mnist", "--epochs=1"});
  EXPECT_EQ(real.val_fraction, 0.2);
  EXPECT_EQ(Parse({"--dataset=fashion-mnist"}).val_fraction, 0);  // a plain benchmark trains on all of it
  EXPECT_EQ(Parse({"--snapshot-dir=/tmp/s", "--snapshot-every=25"}).SnapshotEverySteps(), 25);
  EXPECT_EQ(Parse({"--snapshot-dir=/tmp/s", "--snapshot-every=epoch"}).SnapshotEverySteps(), 0);
  EXPECT_NE(ParseError({"--time-budget=abc"}).find("--time-budget=abc: not a duration"), std::string::npos);
  EXPECT_NE(ParseError({"--dataset=mnist", "--target-accuracy=1.5"}).find("--target-accuracy=1.5: must be at most 1; accepted: a finite number in (0, 1]"),
            std::string::npos);
  EXPECT_NE(ParseError({"--snapshot-dir=/tmp/s", "--snapshot-every=0"}).find("or 'epoch'"), std::string::npos);
  EXPECT_NE(ParseError({"--snapshot-every=5"}).find("snapshots need --snapshot-dir"), std::string::npos);
  EXPECT_NE(ParseError({"--snapshot-dir=/tmp/s", "--repeat=3"}).find("--repeat=3 with --snapshot-dir"), std::string::npos);
  EXPECT_NE(ParseError({"--dataset=mnist", "--epochs=1", "--repeat=2"}).find("--repeat=2"), std::string::npos);
  EXPECT_NE(ParseError({"--dataset=mnist", "--target-accuracy=0.9", "--val-fraction=0"}).find("validation set"),
            std::string::npos);
}

// --help: every flag under its topic, topics in order, each description
// whole (wrapped to continuation lines, never cut).
TEST(Config, HelpGroupsEveryFlagByTopicOneLineEach) {
  ::testing::internal::CaptureStdout();
  Parse({"--help"});
  const std::string help = ::testing::internal::GetCapturedStdout();
  size_t last = 0;
  for (const char* topic : {"\nRun:", "\nModel and data:", "\nStrategy-specific:", "\nOutputs:",
                            "\nTraining to an answer:", "\nGPU:"}) {
    const size_t at = help.find(topic);
    ASSERT_NE(at, std::string::npos) << topic << "\n" << help;
    EXPECT_GT(at, last) << topic;
    last = at;
  }
  EXPECT_EQ(help.find("\nOther:"), std::string::npos) << "a flag without a topic in app/help.cpp:\n" << help;
  std::istringstream lines(help);
  int flags = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  ", 0) != 0) continue;  // a heading or the description
    EXPECT_LE(line.size(), 120u) << line;
    EXPECT_FALSE(line.size() >= 3 && line.compare(line.size() - 3, 3, "...") == 0) << "cut: " << line;
    flags += line.rfind("  --", 0) == 0;
  }
  EXPECT_GE(flags, 60);
  // The end of a long description is there: --fuse's last choice, --cpu-backend's default.
  std::string joined;
  for (char ch : help) joined += ch == '\n' ? ' ' : ch;
  std::string squeezed;
  for (char ch : joined)
    if (!(ch == ' ' && !squeezed.empty() && squeezed.back() == ' ')) squeezed += ch;
  EXPECT_NE(squeezed.find("conv-bn (BatchNorm from each conv's output sums, folded into a scale-shift-ReLU)"),
            std::string::npos) << help;
  EXPECT_EQ(HelpGroup("--rebalance"), "Strategy-specific");
  EXPECT_EQ(HelpGroup("--no-such-flag"), "");
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

// `writers` processes each appending `rows` rows ("w<writer>", step r) at once.
void RunWriters(const std::string& path, int writers, int rows, const std::string& command) {
  std::vector<pid_t> children;
  for (int w = 0; w < writers; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int r = 0; r < rows; ++r)
        AppendRow(path, {{"strategy", "w" + std::to_string(w)}, {"steps", std::to_string(r)}, {"command", command}});
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

TEST(Results, ConcurrentWritersLoseNoRows) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  constexpr int kWriters = 8, kRows = 40;
  RunWriters(path, kWriters, kRows, std::string(2000, 'x') + ",\"quoted\"");
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
  EXPECT_THROW(CheckPaths({{"--out", path, PathKind::kAppendResults}}), ResultsError);  // already at the start
}

// The current header without `dropped`, plus `extra` at the end: a file an
// older or newer ddpbench wrote.
std::string OtherVersionHeader(const std::set<std::string>& dropped, const std::string& extra) {
  std::string header;
  for (const auto& c : ResultColumns())
    if (!dropped.count(c)) header += c + ",";
  return header + extra + "\n";
}

TEST(Results, OtherVersionHeaderIsMigratedKeepingEveryRow) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  std::string header = OtherVersionHeader({"store_bind", "zero_reduce"}, "legacy_col");
  size_t fields = std::count(header.begin(), header.end(), ',') + 1;
  std::string old_row = "2025-01-01T00:00:00Z" + std::string(fields - 2, ',') + ",kept\n";
  testing::WriteFile(path, header + old_row);
  AppendRow(path, {{"strategy", "ddp"}, {"store_bind", "127.0.0.1"}});
  std::string text = testing::ReadFile(path);
  std::vector<std::string> want = ResultColumns();
  want.push_back("legacy_col");
  std::string want_header;
  for (const auto& c : want) want_header += (want_header.empty() ? "" : ",") + c;
  EXPECT_EQ(text.substr(0, text.find('\n')), want_header);
  auto rows = ReadRows(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["timestamp"], "2025-01-01T00:00:00Z");
  EXPECT_EQ(rows[0]["legacy_col"], "kept");
  EXPECT_EQ(rows[0]["store_bind"], "");  // a new column is empty in old rows
  EXPECT_EQ(rows[1]["store_bind"], "127.0.0.1");
  EXPECT_EQ(rows[1]["legacy_col"], "");
  // No temporary file is left beside it.
  EXPECT_EQ(testing::RunShell("ls " + dir.path()).output, "r.csv\n");
  // A file holding every current column (and more) is appended in its order.
  AppendRow(path, {{"strategy", "single"}});
  EXPECT_EQ(ReadRows(path).size(), 3u);
  EXPECT_EQ(testing::ReadFile(path).find(text), 0u);
}

TEST(Results, ConcurrentWritersOnAnOldHeaderLoseNoRows) {
  TempDir dir;
  std::string path = dir.File("r.csv");
  testing::WriteFile(path, OtherVersionHeader({"store_bind"}, "legacy_col"));
  constexpr int kWriters = 6, kRows = 15;
  RunWriters(path, kWriters, kRows, "");
  auto rows = ReadRows(path);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kWriters * kRows));
  std::set<std::string> seen;
  for (auto& row : rows) seen.insert(row["strategy"] + "/" + row["steps"]);
  EXPECT_EQ(seen.size(), rows.size());
  EXPECT_EQ(rows[0].count("legacy_col"), 1u);
  EXPECT_EQ(rows[0].count("store_bind"), 1u);
}

TEST(Results, RowIsSavedWhenTheDirectoryDisappears) {
  TempDir dir, tmp;
  const std::string out_dir = dir.File("gone");
  ASSERT_EQ(mkdir(out_dir.c_str(), 0755), 0);
  const std::string path = out_dir + "/r.csv";
  CheckPaths({{"--out", path, PathKind::kAppendResults}});  // fine at the start
  ASSERT_EQ(rmdir(out_dir.c_str()), 0);                     // removed during the run
  const char* old_tmpdir = std::getenv("TMPDIR");
  std::string restore = old_tmpdir ? old_tmpdir : "";
  setenv("TMPDIR", tmp.path().c_str(), 1);
  std::string message;
  try {
    AppendRowOrSave(path, {{"strategy", "single"}, {"throughput_img_s", "123.5"}});
  } catch (const ResultsError& e) {
    message = e.what();
  }
  if (old_tmpdir) setenv("TMPDIR", restore.c_str(), 1); else unsetenv("TMPDIR");
  size_t at = message.find("the row is saved in " + tmp.path() + "/ddpbench-row-");
  ASSERT_NE(at, std::string::npos) << message;
  auto rows = ReadRows(message.substr(message.find(tmp.path(), at)));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["throughput_img_s"], "123.5");
}

TEST(Paths, EachKindNamesTheFlagAndWhatIsWrong) {
  TempDir dir;
  auto error = [](PathOption o) {
    try {
      CheckPaths({o});
    } catch (const ConfigError& e) {
      return std::string("2 ") + e.what();
    } catch (const ResultsError& e) {
      return std::string("4 ") + e.what();
    }
    return std::string("ok");
  };
  const std::string missing = dir.File("no/such/dir/x.csv");
  testing::WriteFile(dir.File("foreign.csv"), "a,b\n1,2\n");
  testing::WriteFile(dir.File("results.csv"), OtherVersionHeader({}, "newer_col"));
  testing::WriteFile(dir.File("empty.csv"), "");
  EXPECT_EQ(error({"--out", missing, PathKind::kAppendResults}),
            "2 --out=" + missing + ": directory " + dir.File("no/such/dir") + " does not exist");
  EXPECT_NE(error({"--out", dir.path(), PathKind::kAppendResults}).find("2 --out=" + dir.path() + ": is a directory"),
            std::string::npos);
  EXPECT_NE(error({"--out", dir.File("foreign.csv"), PathKind::kAppendResults}).find("4 --out="), std::string::npos);
  EXPECT_EQ(error({"--out", dir.File("new.csv"), PathKind::kAppendResults}), "ok");
  EXPECT_EQ(error({"--out", dir.File("results.csv"), PathKind::kAppendResults}), "ok");
  EXPECT_EQ(error({"--out", dir.File("empty.csv"), PathKind::kAppendResults}), "ok");
  EXPECT_EQ(error({"--out", "", PathKind::kAppendResults}), "ok");  // not given
  EXPECT_NE(error({"--baseline", dir.File("nope.csv"), PathKind::kReadResults}).find("2 --baseline=" + dir.File("nope.csv") + ": does not exist"),
            std::string::npos);
  EXPECT_NE(error({"--baseline", dir.File("foreign.csv"), PathKind::kReadResults}).find("2 --baseline="), std::string::npos);
  EXPECT_NE(error({"--baseline", dir.File("empty.csv"), PathKind::kReadResults}).find("is empty"), std::string::npos);
  EXPECT_NE(error({"--baseline", dir.path(), PathKind::kReadResults}).find("is not a regular file"), std::string::npos);
  EXPECT_EQ(error({"--baseline", dir.File("results.csv"), PathKind::kReadResults}), "ok");
  EXPECT_NE(error({"--trace", dir.path(), PathKind::kWriteFile}).find("2 --trace="), std::string::npos);
  EXPECT_NE(error({"--trace", missing, PathKind::kWriteFile}).find("does not exist"), std::string::npos);
  EXPECT_EQ(error({"--trace", dir.File("t.json"), PathKind::kWriteFile}), "ok");
  EXPECT_NE(error({"--snapshot-dir", dir.File("foreign.csv"), PathKind::kWriteDir}).find("is not a directory"),
            std::string::npos);
  EXPECT_EQ(error({"--snapshot-dir", dir.File("snap"), PathKind::kWriteDir}), "ok");
  EXPECT_EQ(error({"--snapshot-dir", dir.path(), PathKind::kWriteDir}), "ok");
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

// The end-of-run block: one aligned line per figure the row has, the
// strategy's own figures only where the row carries them.
TEST(Runner, SummaryBlockShowsWhatTheRowHas) {
  Row pmp{{"strategy", "pmp"}, {"gpus", "2"}, {"device", "cpu"}, {"device_name", "AMD EPYC"},
          {"threads_per_device", "1"}, {"throughput_img_s", "61.68"}, {"step_ms_p50", "520.950"},
          {"step_ms_p90", "560.100"}, {"mem_per_device_mb", "40.6/21.4"}, {"bubble_measured", "0.3924"},
          {"bubble_theory", "0.1111"}, {"split", "5,5"}, {"schedule", "1f1b"}, {"chunks", "8"}};
  const std::string block = SummaryBlock(pmp);
  EXPECT_NE(block.find("  throughput      61.68 img/s\n"), std::string::npos) << block;
  EXPECT_NE(block.find("  step            p50 520.950 ms, p90 560.100 ms\n"), std::string::npos) << block;
  EXPECT_NE(block.find("  memory/device   40.6/21.4 MB\n"), std::string::npos) << block;
  EXPECT_NE(block.find("  bubble          measured 0.3924\n    theory        0.1111\n"), std::string::npos)
      << block;
  EXPECT_NE(block.find("  schedule        1f1b, 8 micro-batches\n"), std::string::npos) << block;
  EXPECT_EQ(block.find("parity"), std::string::npos) << block;         // no --verify: no line
  EXPECT_EQ(block.find("communication"), std::string::npos) << block;  // not ddp
  Row ddp{{"strategy", "ddp"}, {"parity_max_abs_diff", "3.747e-16"}, {"parity_ok", "true"},
          {"parity_model", "resnet18 dtype=float64"}, {"communication_ms", "12.5"},
          {"allreduce_hidden_frac", "0.375"}, {"accuracy", "0.8258"}, {"test_loss", "0.4315"}};
  const std::string d = SummaryBlock(ddp);
  EXPECT_NE(d.find("  parity          3.747e-16 (ok: true; resnet18 dtype=float64)\n"), std::string::npos) << d;
  EXPECT_NE(d.find("    hidden        0.375 of it behind backward\n"), std::string::npos) << d;
  EXPECT_NE(d.find("  accuracy        0.8258 (test loss 0.4315)\n"), std::string::npos) << d;
  EXPECT_EQ(d.find("bubble"), std::string::npos) << d;
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

namespace ddpbench {
namespace {
// The open kernel module's line has "for x86_64" where the proprietary one has
// the version right after "Kernel Module" (an H100 row once said "for").
TEST(Environment, DriverVersionFromEitherKernelModuleLine) {
  EXPECT_EQ(ParseNvidiaDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 "
                                     "07:09:38 UTC 2025"),
            "580.65.06");
  EXPECT_EQ(ParseNvidiaDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  "
                                     "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Jul 29 2025"),
            "580.159.04");
  EXPECT_EQ(ParseNvidiaDriverVersion("no driver here"), "");
}

// --inject's specs (harness/inject.h): each kind parsed into its fields, and
// every bad spec one ConfigError naming the bad part and what is accepted.
TEST(Inject, EachKindParsesIntoItsFields) {
  const Injection d = ParseInjection("delay:rank=1,phase=backward,ms=50,every=2");
  EXPECT_EQ(d.kind, Injection::Kind::kDelay);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.phase, Phase::kBackward);
  EXPECT_EQ(d.ms, 50);
  EXPECT_EQ(d.every, 2);
  EXPECT_DOUBLE_EQ(ParseInjection("delay:rank=0,phase=forward,ms=0.4").ms, 0.4);  // sub-millisecond slowdowns
  const Injection s = ParseInjection("slow-data:rank=0,ms=7");
  EXPECT_EQ(s.kind, Injection::Kind::kDelay);
  EXPECT_EQ(s.phase, Phase::kData);
  EXPECT_EQ(s.every, 1);
  const Injection h = ParseInjection("hang:rank=1,step=10");
  EXPECT_EQ(h.kind, Injection::Kind::kHang);
  EXPECT_EQ(h.step, 10);
  EXPECT_EQ(ParseInjection("crash:step=3,rank=2").kind, Injection::Kind::kCrash);
  EXPECT_EQ(ParseInjection("crash:step=3,rank=2").spec, "crash:step=3,rank=2");
}

TEST(Inject, BadSpecsAreOneMessageEach) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"slow:rank=1,ms=5", "'slow' is not a kind; accepted: delay, slow-data, hang, crash"},
      {"delay", "the kind needs its fields"},
      {"delay:rank=1,ms=5", "phase is missing"},
      {"delay:rank=1,phase=communication,ms=5", "phase=communication is not a phase every strategy times; accepted: "
                                                "data, forward, backward, optimizer"},
      {"delay:rank=1,phase=forward", "ms is missing"},
      {"delay:rank=1,phase=forward,ms=0", "ms=0 is not a number of milliseconds > 0 (at most 3600000)"},
      {"delay:rank=1,phase=forward,ms=1.5x", "ms=1.5x is not a number of milliseconds > 0"},
      {"slow-data:rank=1,ms=nan", "ms=nan is not a number of milliseconds > 0"},
      {"delay:rank=-1,phase=forward,ms=5", "rank=-1 is not a whole number >= 0"},
      {"delay:rank=x,phase=forward,ms=5", "rank=x is not a whole number >= 0"},
      {"hang:rank=1", "step is missing"},
      {"hang:rank=1,step=0", "step=0 is not a whole number >= 1"},
      {"crash:rank=1,step=3,ms=5", "'ms' is not a key of this kind"},
      {"slow-data:rank=1,ms=5,phase=data", "'phase' is not a key of this kind"},
      {"delay:rank=1,rank=2,phase=data,ms=5", "'rank=2' is not key=value (each key once)"},
      {"delay:rank=1,,ms=5", "'' is not key=value"},
  };
  for (const auto& [spec, says] : bad) {
    const std::string msg = testing::ConfigErrorOf([&] { ParseInjection(spec); });
    EXPECT_NE(msg.find("--inject=" + spec + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << spec << " -> " << msg;
  }
  EXPECT_EQ(testing::ConfigErrorOf([] { CheckInjectionRanks({ParseInjection("hang:rank=1,step=2")}, 2); }), "");
  EXPECT_EQ(testing::ConfigErrorOf([] { CheckInjectionRanks({ParseInjection("hang:rank=2,step=2")}, 2); }),
            "--inject=hang:rank=2,step=2: rank=2 is outside the world of 2 ranks (0..1)");
}

}  // namespace
}  // namespace ddpbench

// --- The flight recorder and the straggler attribution -------------------

namespace flight_cases {

using ddpbench::Phase;
using ddpbench::flight::Entry;
using ddpbench::flight::PhaseSpan;
using ddpbench::flight::Record;

constexpr int64_t kMs = 1000000;

// One rank's record of `steps` steps of 100 ms: a data, forward and backward
// phase, then a collective entered at the end of backward; `extra` ms more
// of `slow` phase each step (the entry and later phases move with it).
Record RankRecord(int rank, int steps, Phase slow, int64_t extra) {
  Record r;
  r.rank = rank;
  r.groups = {{"world", {0, 1}}};
  uint64_t seq = 0;
  for (int s = 1; s <= steps; ++s) {
    int64_t t = s * 200 * kMs;  // every step starts together (the collective made them wait)
    for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward}) {
      const int64_t len = 30 * kMs + (p == slow ? extra * kMs : 0);
      r.spans.push_back({p, s, t, t + len});
      t += len;
    }
    Entry e;
    e.id = ++seq;
    e.group = 0;
    e.seq = seq;
    e.op = "allreduce";
    e.step = s;
    e.entered_ns = t;
    e.ended_ns = t + 5 * kMs;
    e.state = ddpbench::flight::State::kCompleted;
    // An early collective in forward, on time for both, gives the late one a
    // "last on time" to be measured from.
    Entry early = e;
    early.entered_ns = s * 200 * kMs + 30 * kMs + (slow == Phase::kData ? extra * kMs : 0);
    early.ended_ns = early.entered_ns + kMs;
    early.seq = e.seq;
    e.seq = ++seq;
    e.id = seq;
    r.entries.push_back(early);
    r.entries.push_back(e);
  }
  return r;
}

// Ranks 0 and 1 of a 2-rank world, no entries yet.
std::pair<Record, Record> TwoRanks() {
  Record a, b;
  a.rank = 0;
  b.rank = 1;
  a.groups = b.groups = {{"world", {0, 1}}};
  return {a, b};
}

}  // namespace flight_cases

TEST(Straggler, TheLateRankItsLatenessAndItsPhaseAreNamed) {
  using namespace flight_cases;
  const auto s = ddpbench::AttributeStragglers(
      {RankRecord(0, 8, Phase::kData, 0), RankRecord(1, 8, Phase::kBackward, 50)}, 2, 140.0);
  ASSERT_TRUE(s.measured);
  EXPECT_EQ(s.rank, 1);
  EXPECT_NEAR(s.late_ms, 50.0, 1e-6);
  EXPECT_EQ(s.phase, "backward");
  EXPECT_EQ(s.steps, 8);
  EXPECT_NEAR(s.compute_per_rank_ms[0], 140.0 - 50.0, 1e-6);  // rank 0 waited 50 ms a step
  EXPECT_NEAR(s.compute_per_rank_ms[1], 140.0, 1e-6);
  EXPECT_NE(ddpbench::DescribeStraggler(s).find("rank 1 was 50.0 ms late per step, from its backward phase"),
            std::string::npos) << ddpbench::DescribeStraggler(s);
}

TEST(Straggler, AdataDelayIsNamedForDataNotForTheForwardItMadeLate) {
  using namespace flight_cases;
  // Rank 0 spends 40 ms more in data: it is late for the forward's first
  // collective, which rank 1 waits in (its forward is 40 ms longer).
  const auto s = ddpbench::AttributeStragglers(
      {RankRecord(0, 6, Phase::kData, 40), RankRecord(1, 6, Phase::kForward, 40)}, 2, 130.0);
  EXPECT_EQ(s.rank, 0);
  EXPECT_NEAR(s.late_ms, 40.0, 1e-6);
  EXPECT_EQ(s.phase, "data");
}

TEST(Straggler, EqualRanksAndLatenessBelowTheLineNameNone) {
  using namespace flight_cases;
  auto equal = ddpbench::AttributeStragglers(
      {RankRecord(0, 5, Phase::kData, 0), RankRecord(1, 5, Phase::kData, 0)}, 2, 100.0);
  EXPECT_TRUE(equal.measured);
  EXPECT_EQ(equal.rank, -1);
  EXPECT_DOUBLE_EQ(equal.noise_ms, 5.0);  // 5% of 100 ms above the other's 0 ms
  EXPECT_EQ(ddpbench::DescribeStraggler(equal), "");
  // 4 ms late on a 100 ms step: below the 5 ms line.
  auto small = ddpbench::AttributeStragglers(
      {RankRecord(0, 5, Phase::kData, 0), RankRecord(1, 5, Phase::kBackward, 4)}, 2, 100.0);
  EXPECT_EQ(small.rank, -1);
  EXPECT_EQ(small.latest_rank, 1);
  EXPECT_NEAR(small.late_ms, 4.0, 1e-6);
  // A rank's record alone matches nothing: not measured.
  EXPECT_FALSE(ddpbench::AttributeStragglers({RankRecord(0, 5, Phase::kData, 0)}, 2, 100.0).measured);
}

TEST(Straggler, TheNoiseLineRisesWithTheOtherRanksOwnLateness) {
  using namespace flight_cases;
  // Rank 0 is 6 ms late at odd steps, rank 1 8 ms at even ones: no straggler
  // (each rank's mean is small against the other's).
  Record a = RankRecord(0, 8, Phase::kData, 0), b = RankRecord(1, 8, Phase::kData, 0);
  for (auto* r : {&a, &b})
    for (auto& e : r->entries)
      if (e.seq % 2 == 0 && (e.step % 2 == (r->rank == 0 ? 1 : 0))) e.entered_ns += (r->rank == 0 ? 6 : 8) * kMs;
  const auto s = ddpbench::AttributeStragglers({a, b}, 2, 100.0);
  EXPECT_EQ(s.rank, -1);
  EXPECT_NEAR(s.late_per_rank_ms[0], 3.0, 1e-6);
  EXPECT_NEAR(s.late_per_rank_ms[1], 4.0, 1e-6);
  EXPECT_NEAR(s.noise_ms, 5.0 + 3.0, 1e-6);
}

TEST(Straggler, AreceivePostedAheadCountsFromItsWait) {
  using namespace flight_cases;
  // A pipeline hand-off: rank 0 sends at 100 ms; rank 1 posted its receive at
  // 0 but waited for it only at 95 ms: rank 0 is 5 ms late, not 100.
  auto [a, b] = TwoRanks();
  for (int s = 1; s <= 4; ++s) {
    Entry send;
    send.id = s;
    send.group = 0;
    send.seq = s;
    send.op = "send";
    send.peer = 1;
    send.tag = 7;
    send.step = s;
    send.entered_ns = s * 1000 * kMs + 100 * kMs;
    Entry recv = send;
    recv.op = "recv";
    recv.peer = 0;
    recv.entered_ns = s * 1000 * kMs;
    recv.waited_ns = s * 1000 * kMs + 95 * kMs;
    a.entries.push_back(send);
    b.entries.push_back(recv);
  }
  const auto s = ddpbench::AttributeStragglers({a, b}, 2, 200.0);
  ASSERT_TRUE(s.measured);
  EXPECT_NEAR(s.late_per_rank_ms[0], 5.0, 1e-6);
  EXPECT_EQ(s.rank, -1);  // 5 ms < 10 ms (5% of 200)
}

namespace flight_cases {

// One collective of `group` entered at `at_ms` (ended `end_ms`) in step `step`.
Entry At(int group, uint64_t seq, int64_t step, int64_t at_ms, int64_t end_ms) {
  Entry e;
  e.id = seq;
  e.group = group;
  e.seq = seq;
  e.op = "allreduce";
  e.step = step;
  e.entered_ns = at_ms * kMs;
  e.ended_ns = end_ms * kMs;
  e.state = ddpbench::flight::State::kCompleted;
  return e;
}

}  // namespace flight_cases

TEST(Straggler, AreplicaLateOnlyForWaitingPassesTheBlameOn) {
  using namespace flight_cases;
  // HSDP on 4 ranks: shard groups {0,1} {2,3}, replicate groups {0,2} {1,3}.
  // Rank 3 spends 100 ms more in backward: rank 2 waits for it in their
  // reduce-scatter and is then as late as rank 3 for the replicate all-reduce.
  std::vector<Record> recs(4);
  for (int r = 0; r < 4; ++r) {
    recs[r].rank = r;
    recs[r].groups = {{r < 2 ? "group0" : "group1", r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}},
                      {r % 2 ? "replicate1" : "replicate0", r % 2 ? std::vector<int>{1, 3} : std::vector<int>{0, 2}}};
  }
  for (int64_t s = 1; s <= 6; ++s) {
    const int64_t t = s * 1000;
    for (int r = 0; r < 4; ++r) {
      const int64_t rs = r == 3 ? t + 200 : t + 100;  // rank 3 reaches the reduce-scatter 100 ms late
      const int64_t shard_done = r < 2 ? t + 100 : t + 200;
      recs[r].entries.push_back(At(0, 2 * s - 1, s, t + 30, t + 31));  // an early gather, on time
      recs[r].entries.push_back(At(0, 2 * s, s, rs, shard_done));
      recs[r].entries.push_back(At(1, s, s, shard_done + 10, t + 220));
      recs[r].spans.push_back({Phase::kForward, s, t * kMs, (t + 30) * kMs});
      recs[r].spans.push_back({Phase::kBackward, s, (t + 30) * kMs, (r == 3 ? t + 200 : t + 100) * kMs});
    }
  }
  const auto s = ddpbench::AttributeStragglers(recs, 4, 250.0);
  EXPECT_EQ(s.rank, 3);
  EXPECT_NEAR(s.late_ms, 100.0, 1e-6);
  EXPECT_EQ(s.phase, "backward");
}

TEST(Straggler, LateFromAslowLinkIsNoRanksFault) {
  using namespace flight_cases;
  // Both enter X together; it ends 200 ms later on rank 0 (its incoming side
  // is slow), so rank 0 enters Y 200 ms after rank 1.
  auto [a, b] = TwoRanks();
  for (int64_t s = 1; s <= 5; ++s) {
    const int64_t t = s * 1000;
    a.entries.push_back(At(0, 2 * s - 1, s, t, t + 210));
    b.entries.push_back(At(0, 2 * s - 1, s, t, t + 10));
    a.entries.push_back(At(0, 2 * s, s, t + 220, t + 230));
    b.entries.push_back(At(0, 2 * s, s, t + 20, t + 230));
  }
  const auto s = ddpbench::AttributeStragglers({a, b}, 2, 250.0);
  EXPECT_EQ(s.rank, -1);
  EXPECT_EQ(s.latest_rank, 0);
  EXPECT_NEAR(s.late_ms, 200.0, 1e-6);
  EXPECT_EQ(s.phase, "communication");
  EXPECT_NE(ddpbench::DescribeStraggler(s).find("a slow link"), std::string::npos);
}

TEST(FlightRecorder, EntriesAreNumberedPerGroupAndChannelAndSurviveJson) {
  namespace flight = ddpbench::flight;
  flight::Configure(1, 3, "/tmp/unused/rank-1.json");
  const int world = flight::RegisterGroup("world", {0, 1, 2});
  const int pair = flight::RegisterGroup("group0", {1, 2});
  flight::BeginStep(4, true);
  const uint64_t a = flight::Enter(world, "allreduce", -1, 0, 400, "DDP gradient all-reduce");
  const uint64_t b = flight::Enter(pair, "send", 1, 9, 64, nullptr);  // group rank 1 = global rank 2
  const uint64_t c = flight::Enter(world, "broadcast", -1, 0, 8, nullptr);
  const uint64_t d = flight::Enter(pair, "send", 1, 9, 64, nullptr);
  flight::End(a, true);
  flight::End(c, false);
  flight::BeginStep(-1, false);
  const flight::Record r = flight::Snapshot();
  ASSERT_EQ(r.entries.size(), 3u);  // the last 3 kept
  EXPECT_EQ(r.entries[0].id, b);
  EXPECT_EQ(r.entries[0].peer, 2);
  EXPECT_EQ(r.entries[0].seq, 1u);
  EXPECT_EQ(r.entries[1].seq, 2u);  // the world's second
  EXPECT_EQ(r.entries[1].state, flight::State::kFailed);
  EXPECT_EQ(r.entries[2].id, d);
  EXPECT_EQ(r.entries[2].seq, 2u);  // the channel's second
  EXPECT_TRUE(flight::HasFailed());
  EXPECT_EQ(flight::TimedRecord().entries.size(), 4u);  // every timed entry
  EXPECT_EQ(flight::TimedRecord().entries[0].state, flight::State::kCompleted);

  const flight::Record back = flight::FromJson(flight::ToJson(r, "a test"));
  ASSERT_EQ(back.entries.size(), 3u);
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.groups[1].ranks, (std::vector<int>{1, 2}));
  EXPECT_EQ(back.entries[1].op, "broadcast");
  EXPECT_EQ(back.entries[1].state, flight::State::kFailed);
  EXPECT_EQ(back.entries[0].tag, 9);
  EXPECT_EQ(back.entries[0].step, 4);
  EXPECT_THROW(flight::FromJson("{\"format\": \"something else\"}"), std::runtime_error);
  EXPECT_THROW(flight::FromJson("{\"format\": \"ddpbench flight record\", \"rank\": 0}"), std::runtime_error);

  const flight::Progress p = flight::ParseProgress(flight::ProgressLine());
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.step, -1);
  EXPECT_EQ(p.entered.at("world"), 2u);
  EXPECT_EQ(p.op, "send");
  EXPECT_NE(p.Describe().find("newest collective #2 of group0 (send, entered)"), std::string::npos) << p.Describe();
  EXPECT_FALSE(flight::ParseProgress("not json").ok);
  flight::Configure(0, 0, "");  // off again for the other tests
  EXPECT_EQ(flight::Enter(world, "allreduce", -1, 0, 1, nullptr), 0u);
}

TEST(FlightRecorder, RecordsGoBesideTheResultsFile) {
  EXPECT_EQ(ddpbench::flight::RecordPathFor("out/r.csv", 3), "out/r.flight/rank-3.json");
  EXPECT_EQ(ddpbench::flight::RecordPathFor("results", 0), "results.flight/rank-0.json");
  EXPECT_EQ(ddpbench::flight::RecordPathFor("a.b/results", 0), "a.b/results.flight/rank-0.json");
  EXPECT_EQ(ddpbench::flight::RecordPathFor("", 1), "ddpbench-flight/rank-1.json");
}
