// The planning floor's tests (stage splits, schedule tables and their
// simulator): torch-free, in ddpbench_plan_tests with the step model's, so
// they build and link without LibTorch.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "base/config.h"
#include "planning/held_activations.h"
#include "planning/mesh.h"
#include "planning/pipeline_plan.h"
#include "planning/schedules.h"
#include "planning/shm_chunks.h"
#include "planning/stage_split.h"
#include "tests/split_util.h"
#include "tests/test_util.h"

namespace ddpbench {
namespace {

using testing::AllSplits;
using testing::BruteForceBest;
using testing::ConfigErrorOf;
using testing::LargestStage;

// ---------------------------------------------------------------------------
// Splitting.

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

// ---------------------------------------------------------------------------
// Schedules.

// Checks one table directly, without the simulator: each (micro-batch,
// chunk) has exactly one F and one backward (whole, or one B and one W), on
// the chunk's device; on a device, F comes before its backward and B before
// its W. `split`: every backward is cut (false: none is); dualpipev mixes.
void ExpectCompleteAndOrdered(const PipelineTable& t, bool split, bool mixed = false) {
  using Key = std::tuple<char, int, int>;
  std::map<Key, std::pair<int, size_t>> where;  // device, position
  for (int d = 0; d < t.devices; ++d)
    for (size_t i = 0; i < t.actions[d].size(); ++i) {
      const PipelineAction& a = t.actions[d][i];
      EXPECT_EQ(t.DeviceOf(a.chunk), d) << "chunk " << a.chunk << " on device " << d;
      EXPECT_TRUE(where.insert({{static_cast<char>(a.op), a.micro_batch, a.chunk}, {d, i}}).second)
          << "duplicate " << static_cast<char>(a.op) << a.micro_batch << " chunk " << a.chunk;
    }
  size_t cut = 0;
  for (const auto& [key, at] : where) cut += std::get<0>(key) == 'B';
  if (!mixed) EXPECT_EQ(cut, split ? static_cast<size_t>(t.micro_batches * t.chunks()) : 0);
  EXPECT_EQ(where.size(), 2 * t.micro_batches * t.chunks() + cut);
  for (int c = 0; c < t.chunks(); ++c)
    for (int m = 0; m < t.micro_batches; ++m) {
      ASSERT_TRUE(where.count({'F', m, c})) << "no F" << m << " on chunk " << c;
      split = where.count({'B', m, c}) > 0;
      EXPECT_NE(split, where.count({'b', m, c}) > 0) << "a whole backward and a B of " << m << " on chunk " << c;
      const char back = split ? 'B' : 'b';
      ASSERT_TRUE(where.count({back, m, c})) << "no backward " << m << " on chunk " << c;
      const Key f{'F', m, c}, b{back, m, c}, w{'W', m, c};
      EXPECT_LT(where[f].second, where[b].second) << "backward before forward";
      if (split) {
        ASSERT_TRUE(where.count(w));
        EXPECT_LT(where[b].second, where[w].second) << "W before B";
      }
    }
}

TEST(Schedule, GPipeIsAllForwardsThenAllBackwards) {
  auto t = GPipeTable(2, 3);
  std::vector<PipelineAction> want = {{PipelineOp::kForward, 0, 1},  {PipelineOp::kForward, 1, 1},
                                      {PipelineOp::kForward, 2, 1},  {PipelineOp::kBackward, 2, 1},
                                      {PipelineOp::kBackward, 1, 1}, {PipelineOp::kBackward, 0, 1}};
  EXPECT_EQ(t.actions[1], want);
}

std::string Actions(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (auto& a : actions) out += fmt::format("{}{}{} ", static_cast<char>(a.op), a.micro_batch, a.chunk);
  return out;
}

TEST(Schedule, OneForwardOneBackward) {
  // Last stage: F0 B0 F1 B1 ...; first of 3 stages: two warm-up forwards.
  auto t = OneFOneBTable(3, 4);
  EXPECT_EQ(Actions(t.actions[2]), "F02 b02 F12 b12 F22 b22 F32 b32 ");
  EXPECT_EQ(Actions(t.actions[0]), "F00 F10 F20 b00 F30 b10 b20 b30 ");
}

TEST(Schedule, ZeroBubbleDefersUpToSWeightPasses) {
  // Device s runs 1F1B's order with B for the backward and keeps up to s W's
  // waiting; the last backward flushes them.
  auto t = ZeroBubbleH1Table(2, 4);
  EXPECT_EQ(Actions(t.actions[0]), "F00 F10 B00 W00 F20 B10 W10 F30 B20 W20 B30 W30 ");
  EXPECT_EQ(Actions(t.actions[1]), "F01 B01 F11 B11 W01 F21 B21 W11 F31 B31 W21 W31 ");
}

TEST(Schedule, InterleavedZeroBubbleCutsInterleavedsBackwards) {
  // Device s: interleaved's row with each backward as B, W right after it on
  // device 0, up to s W's waiting on device s, all flushed after the last B.
  auto t = InterleavedZeroBubbleTable(2, 2, 2);
  EXPECT_EQ(Actions(t.actions[0]), "F00 F10 F02 F12 B02 W02 B12 W12 B00 W00 B10 W10 ");
  EXPECT_EQ(Actions(t.actions[1]), "F01 F11 F03 B03 F13 B13 W03 B01 W13 B11 W01 W11 ");
  for (int S : {2, 3, 4})
    for (int V : {2, 3})
      for (int M : {S, 2 * S, 3 * S}) {
        const PipelineTable whole = InterleavedTable(S, V, M), cut = InterleavedZeroBubbleTable(S, V, M);
        for (int d = 0; d < S; ++d) {
          std::vector<PipelineAction> without_w;
          for (PipelineAction a : cut.actions[d]) {
            if (a.op == PipelineOp::kBackwardWeight) continue;
            if (a.op == PipelineOp::kBackwardInput) a.op = PipelineOp::kBackward;
            without_w.push_back(a);
          }
          EXPECT_EQ(Actions(without_w), Actions(whole.actions[d])) << S << " " << V << " " << M << " device " << d;
        }
      }
}

TEST(Schedule, InterleavedGoesThroughTheChunksInGroupsOfS) {
  // 2 devices x 2 chunks: device 0 holds chunks 0 and 2, device 1 chunks 1 and 3.
  auto t = InterleavedTable(2, 2, 4);
  EXPECT_EQ(Actions(t.actions[0]).substr(0, 20), "F00 F10 F02 F12 F20 ");
  EXPECT_EQ(Actions(t.actions[1]).substr(0, 16), "F01 F11 F03 b03 ");
}

// Every schedule, many shapes: complete and ordered tables that run to the
// end on ideal devices; 1F1B and ZB-H1 hold at most S micro-batches on a
// device (S - s for 1F1B); GPipe holds M; the ideal bubbles are the formulas'.
TEST(Schedule, EveryTableIsCompleteOrderedAndDeadlockFree) {
  for (int S : {1, 2, 3, 4, 7})
    for (int M : {1, 2, 3, 4, 8, 12, 13})
      for (int V : {1, 2, 3}) {
        SCOPED_TRACE(fmt::format("S={} M={} V={}", S, M, V));
        for (auto schedule : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved,
                              PipelineSchedule::kZeroBubble, PipelineSchedule::kInterleavedZeroBubble,
                              PipelineSchedule::kLoopedBFS, PipelineSchedule::kZeroBubbleV,
                              PipelineSchedule::kDualPipeV}) {
          if (NeedsGroupsOfDevices(schedule) && M % S != 0) continue;
          if (ChunksPerDevice(schedule, V) != V) continue;
          if (schedule == PipelineSchedule::kDualPipeV && M < 2 * S) continue;
          SCOPED_TRACE(PipelineScheduleName(schedule));
          auto t = BuildPipelineTable(schedule, S, V, M);
          ASSERT_EQ(t.chunks(), S * V);
          ExpectCompleteAndOrdered(t, SplitsBackward(schedule), schedule == PipelineSchedule::kDualPipeV);
          auto sim = SimulatePipeline(t, UniformChunkTimes(t.chunks()));
          ASSERT_FALSE(sim.deadlock);
          for (int s = 0; s < S; ++s) {
            if (schedule == PipelineSchedule::kGPipe) EXPECT_EQ(sim.peak_in_flight[s], M);
            if (schedule == PipelineSchedule::k1F1B) EXPECT_EQ(sim.peak_in_flight[s], std::min(S - s, M));
            if (schedule == PipelineSchedule::kZeroBubble) EXPECT_LE(sim.peak_in_flight[s], S);
          }
          if (schedule == PipelineSchedule::kInterleavedZeroBubble) {
            // No more held than interleaved's busiest device, and no slower.
            auto whole = SimulatePipeline(InterleavedTable(S, V, M), UniformChunkTimes(t.chunks()));
            const int most = *std::max_element(whole.peak_in_flight.begin(), whole.peak_in_flight.end());
            for (int s = 0; s < S; ++s) EXPECT_LE(sim.peak_in_flight[s], most);
            EXPECT_LE(sim.makespan, whole.makespan + 1e-9);
            continue;
          }
          if (IsVShaped(schedule)) {
            // A V holds no more than 1F1B's first device would for 2S stages.
            for (int s = 0; s < S; ++s) EXPECT_LE(sim.peak_in_flight[s], 2 * S + 1) << s;
            continue;
          }
          if (schedule == PipelineSchedule::kLoopedBFS) {
            EXPECT_NEAR(sim.Bubble(), LoopedBfsTheoreticalBubble(S, V, M), 1e-9);
            if (M >= S) EXPECT_NEAR(sim.Bubble(), TheoreticalBubble(S, V, M), 1e-9);
          } else if (schedule != PipelineSchedule::kZeroBubble) {
            EXPECT_NEAR(sim.Bubble(), TheoreticalBubble(S, V, M), 1e-9);
          } else if (M >= S) {
            // ZB-H1's bubble (Qi et al.): (S-1)(F+B-W) instead of (S-1)(F+B+W).
            EXPECT_EQ(*std::max_element(sim.peak_in_flight.begin(), sim.peak_in_flight.end()), std::min(S, M));
            EXPECT_NEAR(sim.makespan, 3.0 * M + (S - 1), 1e-9);
          }
        }
      }
}

// ZB-V (Qi et al. section 6): with F = B = W and M >= 2S the V fills, and
// its bubble is below ZB-H1's on the same devices and micro-batches (the
// issue's goal: zbv's bubble at most zero-bubble's).
TEST(Schedule, ZeroBubbleVBeatsZeroBubbleH1) {
  for (int S : {2, 3, 4})
    for (int M : {2 * S, 3 * S, 8}) {
      if (M < 2 * S) continue;
      SCOPED_TRACE(fmt::format("S={} M={}", S, M));
      const auto zbv = SimulatePipeline(ZeroBubbleVTable(S, M), UniformChunkTimes(2 * S));
      // ZB-H1 with the same work per device: one chunk of twice the work.
      ChunkTimes h1_times{std::vector<double>(S, 2.0), std::vector<double>(S, 2.0), std::vector<double>(S, 2.0)};
      const auto h1 = SimulatePipeline(ZeroBubbleH1Table(S, M), h1_times);
      ASSERT_FALSE(zbv.deadlock);
      EXPECT_LE(zbv.Bubble(), h1.Bubble() + 1e-9);
      EXPECT_LT(zbv.Bubble(), 0.1);
    }
}

// Every row of the looped-bfs, zbv and dualpipev tables against the order
// PyTorch's own schedule classes give the same rank at the same shape
// (tests/data/torch_schedules.txt, which py.torch_schedules_test checks
// against the installed torch): the same work in the same order.
TEST(Schedule, NewTablesAreTorchsOrder) {
  std::istringstream in(testing::ReadFile(std::string(DDPBENCH_SOURCE_DIR) + "/tests/data/torch_schedules.txt"));
  int compared = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, colon_rank;
    int S = 0, V = 0, M = 0, rank = 0;
    fields >> name >> S >> V >> M >> rank >> colon_rank;  // colon_rank: ":"
    const PipelineTable t = BuildPipelineTable(ParsePipelineSchedule(name), S, V, M);
    std::string want, got;
    for (std::string token; fields >> token;) want += token + " ";
    for (const PipelineAction& a : t.actions.at(static_cast<size_t>(rank)))
      got += fmt::format("{}{}c{} ", static_cast<char>(a.op), a.micro_batch, a.chunk);
    EXPECT_EQ(got, want) << line.substr(0, line.find(':'));
    ++compared;
  }
  EXPECT_EQ(compared, 175);
  EXPECT_THROW(DualPipeVTable(2, 3), std::logic_error);
}

TEST(Schedule, TheSimulatorFindsADeadlock) {
  PipelineTable t = OneFOneBTable(2, 2);
  std::swap(t.actions[1][0], t.actions[1][1]);  // last stage: backward before its forward
  EXPECT_TRUE(SimulatePipeline(t, UniformChunkTimes(2)).deadlock);
  t = GPipeTable(2, 2);
  std::swap(t.actions[0][0], t.actions[0][3]);  // first stage: a backward before its forward
  EXPECT_TRUE(SimulatePipeline(t, UniformChunkTimes(2)).deadlock);
}

// Placement is data of the table: round-robin by default, V on request
// (chunk 0 and the last chunk on device 0), and the checks and the simulator
// follow the map rather than c % devices.
TEST(Schedule, PlacementIsTheTablesChunkToDeviceMap) {
  EXPECT_EQ(InterleavedTable(2, 2, 4).chunk_device, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(VPlacement(3), (std::vector<int>{0, 1, 2, 2, 1, 0}));
  const int S = 2, M = 2;
  PipelineTable t = GPipeTable(S, M);  // rebuilt below as GPipe through a V of 2S chunks
  t.virtual_stages = 2;
  t.chunk_device = VPlacement(S);
  for (int d = 0; d < S; ++d) {
    const int down = d, up = 2 * S - 1 - d;
    auto& a = t.actions[d];
    a.clear();
    for (int c : {down, up})
      for (int m = 0; m < M; ++m) a.push_back({PipelineOp::kForward, m, c});
    for (int c : {up, down})
      for (int m = M - 1; m >= 0; --m) a.push_back({PipelineOp::kBackward, m, c});
  }
  ExpectCompleteAndOrdered(t, false);
  const PipelineSimulation sim = SimulatePipeline(t, UniformChunkTimes(2 * S));
  ASSERT_FALSE(sim.deadlock);
  for (int d = 0; d < S; ++d) {
    EXPECT_DOUBLE_EQ(sim.busy[d], 2.0 * M * 3);  // two chunks: F 1 + backward 2 each
    EXPECT_EQ(sim.peak_in_flight[d], 2 * M);     // both chunks' activations held
  }
}

// Hand-offs between devices delay the action that takes them, not a device
// (hand-computed). 1F1B, 2 devices, 2 micro-batches, F = 1, whole backward
// = 2, 0.5 each way: device 0 F0 [0,1] F1 [1,2]; device 1 F0 [1.5,2.5] B0
// [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5]; device 0 B0 [5,7] (its gradient came at
// 5) B1 [8,10]: 10 against 9 without.
TEST(Schedule, HandOffsDelayTheirTakerNotADevice) {
  ChunkTimes times{{1, 1}, {2, 2}, {0, 0}, {}};
  EXPECT_DOUBLE_EQ(SimulatePipeline(OneFOneBTable(2, 2), times).makespan, 9);
  times.handoff = {0.5};
  const PipelineSimulation sim = SimulatePipeline(OneFOneBTable(2, 2), times);
  EXPECT_DOUBLE_EQ(sim.makespan, 10);
  EXPECT_DOUBLE_EQ(sim.busy[0], 6);  // the hand-offs cost no device time
  EXPECT_DOUBLE_EQ(sim.busy[1], 6);
}

// A boundary carries one hand-off at a time in each direction (hand-computed).
// GPipe, 2 devices, 2 micro-batches, F = B = 1, 3 each way: F0 reaches device
// 1 at 4, F1 (done at 2) waits for the link and arrives at 7; device 1 ends
// its backwards at 9 and 10, their gradients arrive at 12 and 15; device 0
// ends at 16 (12 if the two activations could cross at once).
TEST(Schedule, HandOffsQueueOnTheirBoundary) {
  ChunkTimes times{{1, 1}, {1, 1}, {0, 0}, {3}};
  EXPECT_DOUBLE_EQ(SimulatePipeline(GPipeTable(2, 2), times).makespan, 16);
}

TEST(Schedule, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 1, 4), 0.2);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(4, 1, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(1, 1, 8), 0.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 1, 1), 0.5);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(2, 2, 4), 1.0 / 9);
  // Zero-bubble with F = B = W at S=2, M=8: 1 idle unit of 25 against 1F1B's 3 of 27.
  auto zb = SimulatePipeline(ZeroBubbleH1Table(2, 8), UniformChunkTimes(2));
  EXPECT_NEAR(zb.Bubble(), 1.0 / 25, 1e-9);
  EXPECT_NEAR(SimulatePipeline(OneFOneBTable(2, 8), UniformChunkTimes(2)).Bubble(), 3.0 / 27, 1e-9);
  EXPECT_EQ(ParsePipelineSchedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_EQ(ParsePipelineSchedule("zero-bubble"), PipelineSchedule::kZeroBubble);
  EXPECT_NE(ConfigErrorOf([] { ParsePipelineSchedule("zb"); }).find("--schedule=zb"), std::string::npos);
}

// pmp's shape choice on made-up unit times: every candidate the open search
// enumerates, costed with FastestSplit and PredictStepMs, then ChooseShape.
// A unit's time at a micro-batch of b images is `fixed` + `per_image` x b
// (forward a third of it), so `fixed` is what every extra micro-batch
// costs again, as on a CPU at small maps.
UnitTimes FakeUnits(int units, int images, double fixed, double per_image) {
  UnitTimes t;
  for (int u = 0; u < units; ++u) {
    const double ms = fixed + per_image * images * (1 + 0.2 * (u % 3));  // unequal units
    t.total_ms.push_back(ms);
    t.forward_ms.push_back(ms / 3);
  }
  return t;
}

ShapeOption ChooseOnFakeUnits(int batch, int devices, int units, double fixed, double per_image,
                              std::vector<double>* predicted_out = nullptr) {
  RunConfig config;  // no --chunks, --schedule or --split: the open search
  std::vector<ShapeOption> options;
  std::vector<double> predicted;
  for (int M : MicroBatchCandidates(batch, devices)) {
    const UnitTimes times = FakeUnits(units, batch / M, fixed, per_image);
    for (const ShapeOption& o : ScheduleOptions(config, devices, M, units)) {
      const PipelineTable table = BuildPipelineTable(o.schedule, devices, o.virtual_stages, M);
      options.push_back(o);
      predicted.push_back(PredictStepMs(table, PlanOfSplit(FastestSplit(table, times), times)));
    }
  }
  if (predicted_out) *predicted_out = predicted;
  return options[ChooseShape(predicted, 0.05)];
}

TEST(ShapeChoice, TheSimplestCandidateComesFirstAndMicroBatchesFromOne) {
  RunConfig config;
  const auto at_one = ScheduleOptions(config, 2, 1, 10);
  ASSERT_FALSE(at_one.empty());
  EXPECT_EQ(at_one.front().schedule, PipelineSchedule::k1F1B);  // mp's shape
  EXPECT_EQ(at_one.front().virtual_stages, 1);
  for (const auto& o : at_one) EXPECT_GE(1, MinMicroBatches(o.schedule, 2)) << PipelineScheduleName(o.schedule);
  EXPECT_EQ(MicroBatchCandidates(16, 2).front(), 1);
}

TEST(ShapeChoice, FixedCostsPerMicroBatchKeepTheWholeBatch) {
  // Every unit costs 5 ms whatever its micro-batch and 0.01 ms an image:
  // splitting the batch only repeats the 5 ms, so one micro-batch wins.
  const ShapeOption chosen = ChooseOnFakeUnits(16, 2, 10, 5.0, 0.01);
  EXPECT_EQ(chosen.micro_batches, 1);
}

TEST(ShapeChoice, TimeProportionalToImagesFillsThePipeline) {
  // No fixed cost: more micro-batches shrink the bubble for nothing.
  std::vector<double> predicted;
  const ShapeOption chosen = ChooseOnFakeUnits(32, 2, 10, 0.0, 1.0, &predicted);
  EXPECT_GT(chosen.micro_batches, 2);
  EXPECT_LT(predicted[ChooseShape(predicted, 0.05)], 0.8 * predicted.front());  // against mp's shape
}

TEST(ShapeChoice, AMoreComplexShapeMustWinByTheMargin) {
  EXPECT_EQ(ChooseShape({100, 96, 97}, 0.05), 0u);  // 4% faster: the first is kept
  EXPECT_EQ(ChooseShape({100, 94, 97}, 0.05), 1u);  // 6% faster
  EXPECT_EQ(ChooseShape({100, 94, 90}, 0.05), 1u);  // measured against the one kept (90 > 94 x 0.95)
  EXPECT_EQ(ChooseShape({100, 94, 89}, 0.05), 2u);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ChooseShape({inf, 50, inf}, 0.05), 1u);  // a deadlocked table is never kept over a finite one
  EXPECT_THROW(ChooseShape({}, 0.05), std::invalid_argument);
}

TEST(ShapeChoice, TrialsTakeThePickTheFastestAndTheSimpleShapes) {
  // Candidates simplest first; 0 and 1 are mp's shape and plain 1F1B.
  const std::vector<double> predicted = {54, 51, 43, 40, 38};
  // The pick (3: 38 is not 5% under 40), the two fastest predicted (4, 3), the fastest of each simple group.
  EXPECT_EQ(ShapesToTry(predicted, 0.05, 2, {{0}, {1, 2}}), (std::vector<size_t>{0, 2, 3, 4}));
  // best = 0: only the pick and the simple shapes.
  EXPECT_EQ(ShapesToTry(predicted, 0.05, 0, {{0}}), (std::vector<size_t>{0, 3}));
  // The margin keeps the simplest where nothing is clearly faster: it is tried with the fastest.
  EXPECT_EQ(ShapesToTry({50, 49, 48.5}, 0.05, 1, {}), (std::vector<size_t>{0, 2}));
}

TEST(ShapeChoice, TrialsLeaveOutDeadlocksAndNeedTwoShapes) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ShapesToTry({inf, 50, inf, 45}, 0.05, 3, {{0}, {2}}), (std::vector<size_t>{1, 3}));
  EXPECT_TRUE(ShapesToTry({50}, 0.05, 3, {{0}}).empty());          // one candidate: nothing to compare
  EXPECT_TRUE(ShapesToTry({inf, 50, inf}, 0.05, 3, {{0}}).empty());  // one finite
  EXPECT_EQ(ShapesToTry({50, 40}, 0.05, 1, {{0}}), (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(ShapesToTry({40, 50}, 0.05, 1, {}).empty());  // the pick is the fastest and nothing else asked
}

// After the trials, the measured step times choose as predictions do: the
// simplest unless another measured clearly faster. The README workload's
// case: deep interleaving predicted fastest but measured slowest.
TEST(ShapeChoice, MeasuredTimesOverrulePredictions) {
  const std::vector<double> predicted = {54.3, 51.1, 40.1, 38.3};  // mp, 1f1b M=2, zbv M=2, izb V=5 M=2
  const auto tried = ShapesToTry(predicted, 0.05, 2, {{0}, {1}});
  ASSERT_EQ(tried, (std::vector<size_t>{0, 1, 2, 3}));
  const std::vector<double> measured = {45.3, 41.6, 39.8, 51.9};
  EXPECT_EQ(tried[ChooseShape(measured, 0.03)], 2u);
}

// The mesh of --replicate-degree: groups of consecutive ranks, replicate
// groups across them at the same place.
TEST(Mesh, GroupsAreConsecutiveRanksAndReplicasShareAPlace) {
  const MeshCoords m = MeshOf(5, 8, 2);  // groups {0..3}, {4..7}
  EXPECT_EQ(m.group_size, 4);
  EXPECT_EQ(m.replica, 1);
  EXPECT_EQ(m.index, 1);
  EXPECT_EQ(m.group_ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(m.replicate_ranks, (std::vector<int>{1, 5}));
  EXPECT_EQ(m.Describe(/*pipeline=*/false), "replicate=2,shard=4");
  EXPECT_EQ(m.Describe(/*pipeline=*/true), "pp=4,dp=2");
  const MeshCoords flat = MeshOf(3, 4, 1);  // one group: the world
  EXPECT_EQ(flat.group_ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(flat.replicate_ranks, (std::vector<int>{3}));
  const MeshCoords pure = MeshOf(2, 4, 4);  // groups of one: replication only
  EXPECT_EQ(pure.group_ranks, (std::vector<int>{2}));
  EXPECT_EQ(pure.replicate_ranks, (std::vector<int>{0, 1, 2, 3}));
  // Every rank is in exactly one group and one replicate group.
  std::set<std::pair<int, int>> places;
  for (int r = 0; r < 8; ++r) places.insert({MeshOf(r, 8, 4).replica, MeshOf(r, 8, 4).index});
  EXPECT_EQ(places.size(), 8u);
  EXPECT_THROW(MeshOf(0, 6, 4), std::invalid_argument);
  EXPECT_THROW(MeshOf(0, 4, 0), std::invalid_argument);
  EXPECT_THROW(MeshOf(4, 4, 2), std::invalid_argument);
  EXPECT_TRUE(GroupsWithinNodes(2, 4));
  EXPECT_TRUE(GroupsWithinNodes(4, 4));
  EXPECT_FALSE(GroupsWithinNodes(8, 4));
  EXPECT_FALSE(GroupsWithinNodes(3, 4));
}

// A shard group may be one rank (plain replication); a pipeline needs 2 stages.
TEST(Mesh, ShardGroupsOfOneRankAreAcceptedPipelinesOfOneStageAreNot) {
  RunConfig c;
  c.strategy = "hsdp";
  c.replicate_degree = 2;
  EXPECT_EQ(ConfigErrorOf([&] { CheckMeshOfWorld(c, 2); }), "");
  c.replicate_degree = 4;
  EXPECT_EQ(ConfigErrorOf([&] { CheckMeshOfWorld(c, 2); }),
            "--replicate-degree=4: 2 ranks do not divide into 4 equal groups; accepted: a divisor of 2 (1, 2)");
  c.strategy = "pmp";
  c.replicate_degree = 2;
  EXPECT_EQ(ConfigErrorOf([&] { CheckMeshOfWorld(c, 2); }),
            "--replicate-degree=2: 2 ranks in 2 groups leave 1 rank a group, a pipeline of one stage; accepted: a "
            "divisor of 2 that leaves pipelines of 2 or more stages (1)");
}

}  // namespace
}  // namespace ddpbench

namespace ddpbench {
namespace {

// The shared-memory collectives' chunks cover a buffer once, in order; the
// shares cover a chunk once, in rank order, evenly.
TEST(ShmChunks, ChunksCoverTheBufferInOrder) {
  EXPECT_TRUE(Chunks(0, 4).empty());
  EXPECT_EQ(Chunks(10, 4), (std::vector<Span>{{0, 4}, {4, 4}, {8, 2}}));
  EXPECT_EQ(Chunks(8, 4), (std::vector<Span>{{0, 4}, {4, 4}}));
  EXPECT_EQ(Chunks(3, 100), (std::vector<Span>{{0, 3}}));
  EXPECT_THROW(Chunks(3, 0), std::invalid_argument);
  EXPECT_THROW(Chunks(-1, 4), std::invalid_argument);
}

TEST(ShmChunks, SharesCoverAChunkInRankOrder) {
  for (int world : {1, 2, 3, 5})
    for (int64_t count : {0, 1, 2, 7, 10, 1001}) {
      int64_t next = 0, largest = 0, smallest = count;
      for (int r = 0; r < world; ++r) {
        const Span s = ShareOf(count, r, world);
        EXPECT_EQ(s.offset, next) << count << " over " << world;
        next += s.count;
        largest = std::max(largest, s.count);
        smallest = std::min(smallest, s.count);
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(largest - smallest, 1);
    }
  EXPECT_EQ(ShareOf(7, 0, 3), (Span{0, 3}));
  EXPECT_EQ(ShareOf(7, 2, 3), (Span{5, 2}));
}

TEST(ShmChunks, OneHostWhenEveryRankIsOnTheFirstOnesNode) {
  EXPECT_TRUE(OnOneHost({0, 1}, 2));
  EXPECT_TRUE(OnOneHost({2, 3}, 2));
  EXPECT_FALSE(OnOneHost({1, 2}, 2));
  EXPECT_FALSE(OnOneHost({0, 2}, 2));  // a replicate group across two hosts
  EXPECT_TRUE(OnOneHost({0, 1, 2, 3}, 4));
  EXPECT_FALSE(OnOneHost({0, 1}, 0));
}

// The activations a device holds at each of its backwards (hand-computed, 2
// devices, 2 micro-batches): the memory model prices each held pair at its
// own chunk's bytes.
std::vector<std::vector<int>> HeldOf(PipelineSchedule schedule, int V, int device, std::vector<int>* chunks) {
  std::vector<std::vector<int>> held;
  for (const BackwardHeld& b : HeldAtBackwards(BuildPipelineTable(schedule, 2, V, 2), device)) {
    held.push_back(b.held);
    chunks->push_back(b.chunk);
  }
  return held;
}

TEST(HeldActivations, PerScheduleAtEachBackward) {
  std::vector<int> chunks;
  // GPipe: both forwards first, so the first backward runs beside the other micro-batch.
  EXPECT_EQ(HeldOf(PipelineSchedule::kGPipe, 1, 0, &chunks), (std::vector<std::vector<int>>{{2, 0}, {1, 0}}));
  // 1F1B: the first device runs F0 F1 b0 b1; the last F0 b0 F1 b1, one at a time.
  chunks.clear();
  EXPECT_EQ(HeldOf(PipelineSchedule::k1F1B, 1, 0, &chunks), (std::vector<std::vector<int>>{{2, 0}, {1, 0}}));
  EXPECT_EQ(HeldOf(PipelineSchedule::k1F1B, 1, 1, &chunks), (std::vector<std::vector<int>>{{0, 1}, {0, 1}}));
  // Zero bubble: B keeps the graph for W, so only W releases a micro-batch.
  chunks.clear();
  const auto zb = HeldOf(PipelineSchedule::kZeroBubble, 1, 1, &chunks);
  ASSERT_EQ(zb.size(), 4u);  // B0 W0 B1 W1 (in some order)
  int most = 0;
  for (const auto& h : zb) most = std::max(most, h[1]);
  EXPECT_EQ(zb.front(), (std::vector<int>{0, 1}));
  EXPECT_LE(most, 2);
  // Interleaved, 2 chunks a device: the last device holds both micro-batches
  // of its first chunk (1) while the last chunk (3) runs its backward.
  chunks.clear();
  const auto inter = HeldOf(PipelineSchedule::kInterleaved, 2, 1, &chunks);
  ASSERT_FALSE(inter.empty());
  EXPECT_EQ(chunks.front(), 3);
  EXPECT_EQ(inter.front(), (std::vector<int>{0, 2, 0, 1}));
}

}  // namespace
}  // namespace ddpbench
