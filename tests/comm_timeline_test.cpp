// The arithmetic behind communication_ms and allreduce_hidden_frac: the union
// of a backward's collective intervals, the part of it before the last bucket
// was handed over, and the per-step figures read later (as on CUDA).
#include <gtest/gtest.h>

#include "harness/phase.h"
#include "strategies/data/data_parallel.h"

namespace ddpbench {
namespace {

TEST(CommTimeline, UnionCountsOverlapsOnceAndSplitsAtComputeEnd) {
  // [0,4] and [2,6] overlap into [0,6]; [8,10] is apart: 8 ms in all. Before
  // 9 ms: 6 + 1.
  auto [total, before] = UnionMs({{8, 10}, {0, 4}, {2, 6}}, 9.0);
  EXPECT_DOUBLE_EQ(total, 8);
  EXPECT_DOUBLE_EQ(before, 7);
  auto [none_total, none_before] = UnionMs(std::vector<std::pair<double, double>>{}, 1.0);
  EXPECT_EQ(none_total, 0);
  EXPECT_EQ(none_before, 0);
}

TEST(CommTimeline, HostTimestampsGiveTheSameFigures) {
  CommTimeline timeline;
  const auto t0 = CommClock::now();
  auto at = [&](double ms) { return t0 + std::chrono::microseconds(static_cast<int64_t>(ms * 1000)); };
  timeline.ends_are_real = false;  // no trace output from a test
  timeline.Add(at(0), at(4), "all-reduce", 0);
  timeline.Add(at(2), at(6), "all-reduce", 1);
  timeline.Add(at(5), at(10), "all-reduce", 2);  // the last hand-over at 5 ms
  auto [total, before] = timeline.BackwardMs();
  EXPECT_NEAR(total, 10, 1e-9);
  EXPECT_NEAR(before, 5, 1e-9);
}

TEST(CommTimeline, OverlapStatsReadDeferredStepsAfterTheWarmUp) {
  OverlapStats stats;
  int reads = 0;
  stats.Add(100, 100);  // warm-up: not counted
  stats.AddDeferred([&] { ++reads; return std::make_pair(10.0, 4.0); });
  stats.Add(10, 1);
  EXPECT_EQ(reads, 0) << "a deferred step is read only when the fraction is asked for";
  EXPECT_DOUBLE_EQ(stats.HiddenFraction(1), 5.0 / 20.0);
  EXPECT_EQ(reads, 1);
  EXPECT_LT(OverlapStats{}.HiddenFraction(0), 0) << "nothing communicated: no fraction";
}

TEST(CommTimeline, DeferredPhaseTimeCountsOnlyTimedSteps) {
  PhaseTimer timer(torch::kCPU);
  for (int step = 0; step < 3; ++step) {
    timer.StartStep();
    timer.AddDeferred(Phase::kCommunication, [step] { return 1.0 + step; });
    timer.EndStep(/*counted=*/step > 0);
  }
  EXPECT_DOUBLE_EQ(timer.Totals()[static_cast<int>(Phase::kCommunication)], 2.0 + 3.0);
}

}  // namespace
}  // namespace ddpbench
