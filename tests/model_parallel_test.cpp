// dp, mp and pmp: stage splitting (balance by parameters, explicit --split,
// bad values), pipeline schedules (order, deadlock freedom, 1F1B's smaller
// activation footprint), the worker threads and tensor hand-off, Predict
// against single, and through the real binary: --verify parity against
// single for each strategy and schedule, the row's split/bubble/memory
// columns, and every bad input (exit 2, one message naming it, no row).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "harness/config.h"
#include "harness/dist.h"
#include "harness/memory.h"
#include "harness/phase.h"
#include "harness/results.h"
#include "harness/training.h"
#include "strategies/device_workers.h"
#include "strategies/registry.h"
#include "strategies/stages.h"
#include "tests/test_util.h"

namespace ddpbench {
namespace {

using testing::RunDdpbench;
using testing::TempDir;

const std::vector<std::string>& Resnet18Units() {
  static const std::vector<std::string> names = [] {
    ResNetOptions o;
    o.width = 4;
    return ResNet(o)->unit_names();
  }();
  return names;
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------
// Splitting.

double LargestStage(const std::vector<double>& costs, const std::vector<int>& counts) {
  double worst = 0;
  size_t i = 0;
  for (int c : counts) {
    double sum = 0;
    for (int k = 0; k < c; ++k) sum += costs[i++];
    worst = std::max(worst, sum);
  }
  EXPECT_EQ(i, costs.size());
  return worst;
}

// Every way to cut n units into `parts` non-empty contiguous stages.
double BruteForceBest(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  double best = INFINITY;
  std::function<void(int, int, std::vector<int>&)> go = [&](int start, int left, std::vector<int>& counts) {
    if (left == 1) {
      counts.push_back(n - start);
      best = std::min(best, LargestStage(costs, counts));
      counts.pop_back();
      return;
    }
    for (int c = 1; start + c <= n - (left - 1); ++c) {
      counts.push_back(c);
      go(start + c, left - 1, counts);
      counts.pop_back();
    }
  };
  std::vector<int> counts;
  go(0, parts, counts);
  return best;
}

TEST(Split, BalanceIsTheExactMinMaxPartition) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 11);
    const int parts = 1 + static_cast<int>(rng() % n);
    std::vector<double> costs(n);
    for (auto& c : costs) c = static_cast<double>(rng() % 100);  // zeros too
    auto counts = BalanceSplit(costs, parts);
    ASSERT_EQ(static_cast<int>(counts.size()), parts);
    for (int c : counts) ASSERT_GE(c, 1);
    EXPECT_EQ(LargestStage(costs, counts), BruteForceBest(costs, parts)) << "trial " << trial;
  }
}

TEST(Split, BalanceExamples) {
  EXPECT_EQ(BalanceSplit({1, 1, 1, 1}, 2), (std::vector<int>{2, 2}));
  EXPECT_EQ(BalanceSplit({10, 1, 1, 1, 1}, 2), (std::vector<int>{1, 4}));
  EXPECT_EQ(BalanceSplit({1, 2, 3}, 3), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(BalanceSplit({1, 2, 3}, 1), (std::vector<int>{3}));
  EXPECT_EQ(LargestStage({7, 2, 2, 2, 7}, BalanceSplit({7, 2, 2, 2, 7}, 3)), 7);
}

TEST(Split, Resnet18ByParameterCount) {
  ResNetOptions o;
  o.width = 8;
  o.small_input = true;
  o.num_classes = 10;
  ResNet model(o);
  auto params = model->UnitParameterCounts();
  std::vector<double> costs(params.begin(), params.end());
  auto counts = BalanceSplit(costs, 2);
  EXPECT_EQ(SplitCounts(counts), "8,2");
  EXPECT_EQ(DescribeSplit(counts, model->unit_names()), "stem..layer4.0 | layer4.1..head");
  EXPECT_EQ(LargestStage(costs, counts), BruteForceBest(costs, 2));
  // Any number of stages up to one unit each.
  for (int s = 1; s <= 10; ++s) EXPECT_EQ(LargestStage(costs, BalanceSplit(costs, s)), BruteForceBest(costs, s));
  EXPECT_EQ(DescribeSplit({1, 8, 1}, model->unit_names()), "stem | layer1.0..layer4.1 | head");
}

TEST(Split, ExplicitSplitIsParsedAndChecked) {
  const auto& units = Resnet18Units();
  ASSERT_EQ(units.size(), 10u);
  EXPECT_EQ(ParseSplit("4,6", 2, units), (std::vector<int>{4, 6}));
  EXPECT_EQ(ParseSplit("10", 1, units), (std::vector<int>{10}));
  EXPECT_EQ(ParseSplit("1,1,1,1,1,1,1,1,1,1", 10, units).size(), 10u);

  struct Bad {
    std::string split;
    int devices;
    std::string expect;
  };
  for (const Bad& bad : std::vector<Bad>{{"4,4", 2, "the counts sum to 8, not 10"},
                                         {"4,7", 2, "the counts sum to 11, not 10"},
                                         {"5,3,2", 2, "3 counts for --gpus=2"},
                                         {"10", 2, "1 counts for --gpus=2"},
                                         {"0,10", 2, "'0' is not a unit count"},
                                         {"4,x", 2, "'x' is not a unit count"},
                                         {"4,", 2, "empty count"},
                                         {"", 2, "empty count"}}) {
    std::string message = ErrorOf([&] { ParseSplit(bad.split, bad.devices, units); });
    ASSERT_FALSE(message.empty()) << bad.split << " was accepted";
    EXPECT_EQ(message.rfind("--split=" + bad.split + ":", 0), 0u) << message;
    EXPECT_NE(message.find(bad.expect), std::string::npos) << message;
    // What is accepted: the number of units and their names.
    EXPECT_NE(message.find("summing to 10"), std::string::npos) << message;
    EXPECT_NE(message.find("10 units: stem, layer1.0, layer1.1"), std::string::npos) << message;
    EXPECT_NE(message.find("layer4.1, head"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(Split, MoreStagesThanUnitsIsAConfigError) {
  const auto& units = Resnet18Units();
  EXPECT_NO_THROW(CheckStageCount("pmp", 10, units));
  std::string message = ErrorOf([&] { CheckStageCount("pmp", 11, units); });
  EXPECT_NE(message.find("--gpus=11: pmp puts at least one unit on each device"), std::string::npos) << message;
  EXPECT_NE(message.find("accepted: --gpus=1..10"), std::string::npos) << message;
  EXPECT_NE(message.find("stem, layer1.0"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------
// Schedules.

// Runs every stage's op list against FIFO queues between neighbours, one
// ready op at a time, and returns the peak number of micro-batches whose
// activations each stage held; fails on a deadlock or a broken dependency.
std::vector<int> SimulatePipeline(PipelineSchedule schedule, int S, int M) {
  std::vector<std::vector<PipelineOp>> ops(S);
  for (int s = 0; s < S; ++s) ops[s] = StageSchedule(schedule, s, S, M);
  std::vector<size_t> next(S, 0);
  std::vector<std::deque<int>> acts(S), grads(S);  // inbound queues of stage s
  std::vector<int> held(S, 0), peak(S, 0);
  std::vector<std::set<int>> forwarded(S);
  size_t done = 0, total = 0;
  for (auto& o : ops) total += o.size();
  while (done < total) {
    bool progressed = false;
    for (int s = 0; s < S; ++s) {
      if (next[s] == ops[s].size()) continue;
      const PipelineOp op = ops[s][next[s]];
      if (op.forward) {
        if (s > 0) {
          if (acts[s].empty()) continue;
          EXPECT_EQ(acts[s].front(), op.micro_batch) << "stage " << s << " got activations out of order";
          acts[s].pop_front();
        }
        forwarded[s].insert(op.micro_batch);
        peak[s] = std::max(peak[s], ++held[s]);
        if (s + 1 < S) acts[s + 1].push_back(op.micro_batch);
      } else {
        if (s + 1 < S) {
          if (grads[s].empty()) continue;
          EXPECT_EQ(grads[s].front(), op.micro_batch) << "stage " << s << " got gradients out of order";
          grads[s].pop_front();
        }
        EXPECT_TRUE(forwarded[s].count(op.micro_batch)) << "backward before forward";
        --held[s];
        if (s > 0) grads[s - 1].push_back(op.micro_batch);
      }
      ++next[s];
      ++done;
      progressed = true;
    }
    if (!progressed) {
      ADD_FAILURE() << "deadlock with S=" << S << " M=" << M;
      break;
    }
  }
  return peak;
}

TEST(Schedule, GPipeIsAllForwardsThenAllBackwards) {
  auto ops = StageSchedule(PipelineSchedule::kGPipe, 1, 2, 3);
  std::vector<PipelineOp> want = {{true, 0}, {true, 1}, {true, 2}, {false, 2}, {false, 1}, {false, 0}};
  EXPECT_EQ(ops, want);
}

TEST(Schedule, OneForwardOneBackward) {
  // Last stage: F0 B0 F1 B1 ...; first of 3 stages: two warm-up forwards.
  std::vector<PipelineOp> last = {{true, 0}, {false, 0}, {true, 1}, {false, 1}, {true, 2}, {false, 2}};
  EXPECT_EQ(StageSchedule(PipelineSchedule::k1F1B, 2, 3, 3), last);
  std::vector<PipelineOp> first = {{true, 0}, {true, 1}, {true, 2}, {false, 0}, {false, 1}, {false, 2}};
  EXPECT_EQ(StageSchedule(PipelineSchedule::k1F1B, 0, 3, 3), first);
  std::vector<PipelineOp> first4 = {{true, 0}, {true, 1}, {true, 2}, {false, 0}, {true, 3}, {false, 1},
                                    {false, 2}, {false, 3}};
  EXPECT_EQ(StageSchedule(PipelineSchedule::k1F1B, 0, 3, 4), first4);
}

TEST(Schedule, EverySchedulePipelinesWithoutDeadlockAnd1F1BHoldsLess) {
  for (int S : {1, 2, 3, 4, 7})
    for (int M : {1, 2, 3, 4, 8, 13}) {
      SCOPED_TRACE("S=" + std::to_string(S) + " M=" + std::to_string(M));
      for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B})
        for (int s = 0; s < S; ++s) {
          auto ops = StageSchedule(schedule, s, S, M);
          ASSERT_EQ(ops.size(), 2u * M);
          std::set<std::pair<bool, int>> seen;
          for (auto& op : ops) seen.insert({op.forward, op.micro_batch});
          EXPECT_EQ(seen.size(), 2u * M);
        }
      auto gpipe = SimulatePipeline(PipelineSchedule::kGPipe, S, M);
      auto one = SimulatePipeline(PipelineSchedule::k1F1B, S, M);
      for (int s = 0; s < S; ++s) {
        EXPECT_EQ(gpipe[s], M);
        EXPECT_EQ(one[s], std::min(S - s, M)) << "stage " << s;
      }
    }
}

TEST(Schedule, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 4), 0.2);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 1), 0.5);
  EXPECT_EQ(ParsePipelineSchedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_NE(ErrorOf([] { ParsePipelineSchedule("zb"); }).find("--schedule=zb"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Worker threads and hand-off.

TEST(DeviceWorkers, OneThreadPerDeviceWithItsMemoryAccountAndThreadCount) {
  InstallCpuMemoryTracker();
  const int threads = at::get_num_threads();
  DeviceWorkers workers({torch::kCPU, torch::kCPU, torch::kCPU}, false);
  std::vector<std::thread::id> ids(3);
  std::vector<int> scopes(3), counts(3);
  workers.RunAll([&](int i) {
    ids[i] = std::this_thread::get_id();
    scopes[i] = CurrentCpuDevice();
    counts[i] = at::get_num_threads();
  });
  EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), std::this_thread::get_id()), 0);
  EXPECT_EQ(scopes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(counts, (std::vector<int>(3, threads)));
  // The same thread every time (persistent workers).
  std::thread::id again;
  workers.Run(1, [&] { again = std::this_thread::get_id(); });
  EXPECT_EQ(again, ids[1]);
}

TEST(DeviceWorkers, WorkersRunAtTheSameTime) {
  DeviceWorkers workers({torch::kCPU, torch::kCPU}, false);
  std::atomic<int> arrived{0};
  // Each job waits for the other: only finishes if both run concurrently.
  workers.RunAll([&](int) {
    ++arrived;
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 2);
}

TEST(DeviceWorkers, TheRealFailureIsRethrownNotTheAbort) {
  DeviceWorkers workers({torch::kCPU, torch::kCPU, torch::kCPU}, false);
  Channel<int> channel;
  try {
    workers.RunAll([&](int i) {
      if (i == 2) {
        channel.Close();
        throw std::runtime_error("stage 2 failed");
      }
      channel.Pop();  // would wait for ever without Close
    });
    FAIL() << "no exception";
  } catch (const PipelineAborted&) {
    FAIL() << "the abort was rethrown instead of the failure";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stage 2 failed");
  }
  channel.Reset();
  channel.Push(5);
  EXPECT_EQ(channel.Pop(), 5);
  // Workers are still usable after a failure.
  int ran = 0;
  workers.Run(0, [&] { ran = 1; });
  EXPECT_EQ(ran, 1);
}

TEST(DeviceWorkers, CpuHandoffCopiesBetweenLogicalDevicesOnly) {
  InstallCpuMemoryTracker();
  DeviceWorkers workers({torch::kCPU, torch::kCPU}, false);
  Handoff h;
  workers.Run(0, [&] { h = Send(torch::ones({256, 1024})); });  // 1 MiB on device 0
  torch::Tensor same, other, host;
  workers.Run(0, [&] { same = Receive(h, torch::kCPU); });
  const int64_t before = CpuAllocatedBytes(1);
  workers.Run(1, [&] { other = Receive(h, torch::kCPU); });
  EXPECT_EQ(same.data_ptr(), h.tensor.data_ptr());
  EXPECT_NE(other.data_ptr(), h.tensor.data_ptr());
  EXPECT_TRUE(other.equal(h.tensor));
  EXPECT_EQ(CpuAllocatedBytes(1) - before, 1 << 20);  // the copy belongs to device 1
  Handoff data = Send(torch::ones({4}), /*host=*/true);
  workers.Run(1, [&] { host = Receive(data, torch::kCPU); });
  EXPECT_EQ(host.data_ptr(), data.tensor.data_ptr());  // loader data is read in place
}

// ---------------------------------------------------------------------------
// Strategies in process: before any step, every strategy predicts what the
// single-device model predicts (same seed, eval mode).

TEST(Strategies, PredictMatchesSingle) {
  RunConfig config;
  config.seed = 3;
  config.batch_size = 4;
  config.chunks = 2;
  config.image_size = 16;
  ResNetOptions model;
  model.width = 4;
  model.small_input = true;
  model.num_classes = 10;
  DistContext dist;
  PhaseTimer timer(torch::kCPU);
  RunContext ctx;
  ctx.config = &config;
  ctx.dist = &dist;
  ctx.model = model;
  ctx.timer = &timer;
  auto images = torch::randn({5, 3, 16, 16});  // 5: does not divide over 2 replicas
  ctx.devices = {torch::kCPU};
  auto reference = FindStrategy("single").make();
  reference->Setup(ctx);
  auto expected = reference->Predict(images);
  ctx.devices = {torch::kCPU, torch::kCPU};
  for (std::string name : {"dp", "mp", "pmp"}) {
    config.strategy = name;
    auto strategy = FindStrategy(name).make();
    strategy->Setup(ctx);
    auto logits = strategy->Predict(images);
    EXPECT_TRUE(torch::allclose(logits, expected, 1e-5, 1e-6)) << name << ": "
        << (logits - expected).abs().max().item<double>();
    EXPECT_EQ(strategy->Parameters().size(), reference->Parameters().size()) << name;
  }
}

// ---------------------------------------------------------------------------
// Through the binary.

// A case run through the binary: its arguments and what the run must say
// (the parity model checked, or the start of the error message).
struct Case {
  std::string args;
  std::string expect;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.args; }

// A test name from a case's command line: "--gpus=2" -> "__gpus_2_<index>".
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name;
  for (char c : info.param.args) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name + "_" + std::to_string(info.index);
}

const char* kTiny =
    " --device=cpu --small-input --width=8 --image-size=16 --num-classes=10 --steps=3 --warmup=1 --progress=off";

struct RunResult {
  int exit_code;
  std::string output;
  Row row;
};

RunResult RunRow(const std::string& args) {
  TempDir dir;
  auto r = RunDdpbench(std::string(kTiny) + " " + args + " --out=" + dir.File("r.csv"));
  RunResult result{r.exit_code, r.output, {}};
  struct stat st {};
  if (::stat(dir.File("r.csv").c_str(), &st) == 0) {
    auto rows = ReadRows(dir.File("r.csv"));
    EXPECT_EQ(rows.size(), 1u);
    if (!rows.empty()) result.row = rows.front();
  }
  return result;
}

std::vector<double> Numbers(const std::string& joined) {
  std::vector<double> v;
  std::stringstream ss(joined);
  std::string part;
  while (std::getline(ss, part, '/')) v.push_back(std::stod(part));
  return v;
}

void ExpectMemoryPerDevice(const Row& row, size_t devices) {
  auto mem = Numbers(row.at("mem_per_device_mb"));
  ASSERT_EQ(mem.size(), devices) << row.at("mem_per_device_mb");
  for (double m : mem) EXPECT_GT(m, 0) << row.at("mem_per_device_mb");
}

void ExpectParity(const RunResult& r, const std::string& model) {
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.row.at("parity_ok"), "true") << r.row.at("parity_max_abs_diff");
  EXPECT_LE(std::stod(r.row.at("parity_max_abs_diff")), 1e-10);
  EXPECT_EQ(r.row.at("parity_model"), model);
}

// Where the maths is equal the parameters differ only by rounding. The check
// runs in float64 (in float32 a ReLU input within rounding of zero can flip
// and make the difference jump to 1e-4..1e-3), so anything above 1e-10 is a
// maths difference. Adam is included: its first step (about lr x sign(g))
// would amplify float32 rounding, not float64's.
class Parity : public ::testing::TestWithParam<Case> {};

TEST_P(Parity, MatchesSingleWithinTolerance) {
  auto r = RunRow(GetParam().args + " --verify --verify-tolerance=1e-4");
  ExpectParity(r, GetParam().expect);
  if (!r.row.empty()) ExpectMemoryPerDevice(r.row, std::stoul(r.row.at("gpus")));
}

INSTANTIATE_TEST_SUITE_P(
    ModelParallel, Parity,
    ::testing::Values(
        // BatchNorm statistics per replica / micro-batch: checked on GroupNorm.
        Case{"--strategy=dp --gpus=2 --batch-size=4", "resnet18 norm=group amp=off dtype=float64"},
        // mp is the single-device maths, BatchNorm included.
        Case{"--strategy=mp --gpus=2 --batch-size=8", "resnet18 norm=batch amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=gpipe", "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=1f1b", "resnet18 norm=group amp=off dtype=float64"},
        // Three stages, uneven explicit split, more micro-batches than stages.
        Case{"--strategy=pmp --gpus=3 --oversubscribe --split=2,5,3 --batch-size=12 --chunks=6 --schedule=1f1b",
                   "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=mp --gpus=3 --oversubscribe --balance=time --batch-size=8", "resnet18 norm=batch amp=off dtype=float64"},
        Case{"--strategy=dp --gpus=3 --oversubscribe --batch-size=4", "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=2 --optimizer=adam --lr=0.001",
             "resnet18 norm=group amp=off dtype=float64"}),
    CaseName);

TEST(Row, PmpRecordsSplitScheduleAndBubble) {
  for (std::string schedule : {"gpipe", "1f1b"}) {
    auto r = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=" + schedule);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Row& row = r.row;
    EXPECT_EQ(row.at("split"), "8,2");
    EXPECT_EQ(row.at("chunks"), "4");
    EXPECT_EQ(row.at("schedule"), schedule);
    EXPECT_EQ(row.at("global_batch"), "8");
    EXPECT_NEAR(std::stod(row.at("bubble_theory")), 1.0 / (4 + 2 - 1), 1e-4);
    const double bubble = std::stod(row.at("bubble_measured"));
    EXPECT_GE(bubble, 0.0);
    EXPECT_LT(bubble, 1.0);
    auto busy = Numbers(row.at("stage_busy_ms"));
    ASSERT_EQ(busy.size(), 2u);
    for (double b : busy) EXPECT_GT(b, 0);
    ExpectMemoryPerDevice(row, 2);
    EXPECT_NE(r.output.find("pmp split (balanced by parameter count): stem..layer4.0 | layer4.1..head = 8,2"),
              std::string::npos) << r.output;
  }
}

TEST(Row, MpRecordsTheSplitUsedAndDpTheGlobalBatch) {
  auto mp = RunRow("--strategy=mp --gpus=2 --batch-size=8 --split=4,6");
  ASSERT_EQ(mp.exit_code, 0) << mp.output;
  EXPECT_EQ(mp.row.at("split"), "4,6");
  EXPECT_EQ(mp.row.at("chunks"), "1");
  EXPECT_EQ(mp.row.at("schedule"), "");
  EXPECT_NEAR(std::stod(mp.row.at("bubble_theory")), 0.5, 1e-9);
  EXPECT_EQ(Numbers(mp.row.at("stage_busy_ms")).size(), 2u);
  EXPECT_NE(mp.output.find("stem..layer2.0 | layer2.1..head = 4,6"), std::string::npos) << mp.output;

  auto dp = RunRow("--strategy=dp --gpus=2 --batch-size=4");
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_EQ(dp.row.at("per_device_batch"), "4");
  EXPECT_EQ(dp.row.at("global_batch"), "8");
  EXPECT_EQ(dp.row.at("split"), "");
  EXPECT_GT(std::stod(dp.row.at("communication_ms")), 0);
  ExpectMemoryPerDevice(dp.row, 2);
}

TEST(Row, MixedPrecisionRuns) {
  for (std::string args : {"--strategy=pmp --gpus=2 --batch-size=8 --chunks=2 --schedule=1f1b --amp=fp16",
                           "--strategy=pmp --gpus=2 --batch-size=8 --chunks=2 --amp=bf16",
                           "--strategy=dp --gpus=2 --batch-size=4 --amp=fp16", "--strategy=mp --gpus=2 --amp=bf16"}) {
    auto r = RunRow(args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_TRUE(std::isfinite(std::stod(r.row.at("final_loss")))) << args;
    EXPECT_EQ(r.row.at("amp"), args.substr(args.size() - 4)) << args;
  }
}

class BadInputs : public ::testing::TestWithParam<Case> {};

TEST_P(BadInputs, ExitTwoWithOneMessageAndNoRow) {
  TempDir dir;
  auto r = RunDdpbench(std::string(kTiny) + " " + GetParam().args + " --out=" + dir.File("r.csv"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ddpbench: error: " + GetParam().expect), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  struct stat st {};
  EXPECT_NE(::stat(dir.File("r.csv").c_str(), &st), 0) << "a row was written";
}

INSTANTIATE_TEST_SUITE_P(
    ModelParallel, BadInputs,
    ::testing::Values(
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=3",
                 "--chunks=3: --batch-size=8 does not divide into 3 equal micro-batches; accepted: a divisor of 8 (1, 2, 4, 8)"},
        Case{"--strategy=pmp --gpus=2 --batch-size=4 --chunks=8", "--chunks=8: --batch-size=4 does not divide"},
        Case{"--strategy=pmp --gpus=2 --chunks=0", "--chunks=0: must be at least 1"},
        Case{"--strategy=pmp --gpus=2 --chunks=-2", "--chunks=-2: must be at least 1"},
        Case{"--strategy=pmp --gpus=11 --oversubscribe", "--gpus=11: pmp puts at least one unit on each device"},
        Case{"--strategy=mp --gpus=11 --oversubscribe", "--gpus=11: mp puts at least one unit on each device, but the model has only 10 units: stem, layer1.0"},
        Case{"--strategy=mp --gpus=2 --split=4,4", "--split=4,4: the counts sum to 8, not 10"},
        Case{"--strategy=pmp --gpus=2 --split=3,3,4", "--split=3,3,4: 3 counts for --gpus=2"},
        Case{"--strategy=mp --gpus=2 --split=4,x", "--split=4,x"},
        Case{"--strategy=pmp --gpus=2 --schedule=zb", "--schedule=zb: not accepted; accepted values: gpipe|1f1b"},
        Case{"--strategy=mp --gpus=2 --balance=flops", "--balance=flops"},
        Case{"--strategy=dp --gpus=1000", "--gpus=1000 x --threads-per-device=1: 1000 threads but this machine has"},
        Case{"--strategy=pmp --gpus=2 --chunks=3 --verify --batch-size=8", "--chunks=3"}),
    CaseName);

}  // namespace
}  // namespace ddpbench
