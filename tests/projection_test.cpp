// The projection model's pieces (projection/): collectives and link fits,
// the two-stream timeline, the Reducer's buckets, each strategy family's step
// on hand-computed cases, the ZeRO memory rule, the pipeline bubble against
// closed forms, and every bad input as one ConfigError naming the value.
#include <gtest/gtest.h>

#include <cmath>

#include "base/config.h"
#include "projection/links.h"
#include "projection/profile.h"
#include "projection/project.h"
#include "projection/step_model.h"
#include "projection/timeline.h"
#include "profile_fixtures.h"
#include "test_util.h"

namespace ddpbench {
namespace {
using namespace ddpbench::testing;

TEST(Links, CollectivesFollowNcclTestsFormulas) {
  const Link l = TestLink(1e-5, 1e9);
  // Ring all-reduce on 4: 6 alpha + 1.5 S / B; tree: 4 alpha + 2 S / B; the faster is taken.
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 4, 1e9), 6e-5 + 1.5, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 4, 0), 4e-5, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kReduceScatter, 4, 4e8), 3e-5 + 0.3, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kBroadcast, 4, 1e8), 3e-5 + 0.1, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kP2P, 2, 1e6), 1e-5 + 1e-3, 1e-12);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, 8), 7.0 / 8);
  EXPECT_EQ(CollectiveSeconds(l, Collective::kAllReduce, 1, 1e9), 0);
}

TEST(Links, HierarchicalAllReduceIsIntraScatterInterReduceIntraGather) {
  Topology t;
  t.per_node = 4, t.nodes = 2, t.intra = TestLink(0, 100e9), t.inter = TestLink(0, 10e9);
  const double s = 8e9;
  const double expected = 0.75 * s / 100e9 + 1.0 * (s / 4) / 10e9 + 0.75 * s / 100e9;
  EXPECT_NEAR(TopologySeconds(t, Collective::kAllReduce, s), expected, 1e-9);
  t.nics = 1;  // four devices share one NIC: each crosses at a quarter of its rate
  EXPECT_NEAR(TopologySeconds(t, Collective::kAllReduce, s), 0.75 * s / 100e9 * 2 + (s / 4) / 2.5e9, 1e-9);
}

TEST(Links, FitRecoversAKnownLinkFromSyntheticTimes) {
  const Link truth = TestLink(50e-6, 2.5e9);
  std::vector<std::pair<double, double>> points;
  for (double b : {1e3, 1e4, 1e5, 1e6, 1e7, 1e8})
    points.emplace_back(b, CollectiveSeconds(truth, Collective::kAllGather, 4, b));
  const Link fit = FitLink(points, Collective::kAllGather, 4, "fit");
  EXPECT_NEAR(fit.alpha_s, truth.alpha_s, 1e-12);
  EXPECT_NEAR(fit.bandwidth / truth.bandwidth, 1.0, 1e-9);
  EXPECT_THROW(FitLink({{1e3, 1e-3}, {1e3, 2e-3}}, Collective::kAllGather, 4, "x"), std::invalid_argument);
  EXPECT_THROW(FitLink({{1e3, 2e-3}, {1e6, 1e-3}}, Collective::kAllGather, 4, "x"), std::invalid_argument);
}

TEST(Links, ACollectivesOwnFitReplacesTheLinkInItsFormula) {
  Link l = TestLink(1e-5, 1e9);
  l.own[Collective::kReduceScatter] = {2e-5, 0.5e9};  // measured slower than the all-reduce's fit
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kReduceScatter, 4, 4e8), 3 * 2e-5 + 0.75 * 4e8 / 0.5e9, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllGather, 4, 4e8), 3e-5 + 0.3, 1e-12);  // no own fit
  l.own[Collective::kAllReduce] = {1e-5, 1e9};  // a measured all-reduce is taken as it is: no tree
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 4, 0), 6e-5, 1e-12);
  // Overriding the measured link's bandwidth or alpha moves every fit by the same factor.
  const Link half = ParseLink("measured,bw=500MB/s,alpha=20us", &l, "--inter");
  EXPECT_DOUBLE_EQ(half.own.at(Collective::kReduceScatter).bandwidth, 0.25e9);
  EXPECT_DOUBLE_EQ(half.own.at(Collective::kReduceScatter).alpha_s, 4e-5);
  Topology t;  // two devices of a node share one NIC: each fit crosses at half its rate
  t.per_node = 2, t.nodes = 2, t.nics = 1, t.intra = TestLink(0, 1e18), t.inter = l;
  EXPECT_NEAR(TopologySeconds(t, Collective::kReduceScatter, 4e8),
              2e-5 + 0.5 * 2e8 / 0.25e9 + CollectiveSeconds(t.intra, Collective::kReduceScatter, 2, 4e8), 1e-9);
}

TEST(Links, AMeasuredTableIsReadBetweenItsSizesOnItsRanks) {
  Link l = TestLink(1e-4, 1e8);  // the fit: 2e-4 + S / 1e8 s for an all-reduce on 2 ranks
  // A shaped link's burst: the small size far faster than the fit says. Given unsorted.
  AddToTable(&l, Collective::kAllReduce, 2, {{4e6, 0.05}, {1e6, 0.004}, {2e6, 0.02}});
  EXPECT_EQ(l.table_ranks, 2);
  EXPECT_DOUBLE_EQ(CollectiveSeconds(l, Collective::kAllReduce, 2, 1e6), 0.004);  // a measured size
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 2, 1.5e6), 0.012, 1e-12);  // halfway between
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 2, 3e6), 0.035, 1e-12);
  // Outside its sizes, on other ranks and for collectives it lacks: the fit.
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 2, 8e6), 2e-4 + 8e6 / 1e8, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 2, 1e5), 2e-4 + 1e5 / 1e8, 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllReduce, 4, 2e6),
              std::min(6e-4 + 1.5 * 2e6 / 1e8, 4 * 1e-4 + 2 * 2e6 / 1e8), 1e-12);
  EXPECT_NEAR(CollectiveSeconds(l, Collective::kAllGather, 2, 2e6), 1e-4 + 1e6 / 1e8, 1e-12);
  AddToTable(&l, Collective::kAllGather, 4, {{1e6, 1.0}, {2e6, 2.0}});  // other ranks than the table's: not kept
  EXPECT_EQ(l.table.count(Collective::kAllGather), 0u);
  // Another link (an override, a shared NIC) drops the table; a factor of 1 keeps it.
  EXPECT_TRUE(ParseLink("measured,bw=50MB/s", &l, "--inter").table.empty());
  EXPECT_FALSE(ParseLink("measured", &l, "--inter").table.empty());
  EXPECT_TRUE(ScaleLink(l, 1.0, 0.5).table.empty());
  EXPECT_FALSE(ScaleLink(l, 1.0, 1.0).table.empty());
}

TEST(Links, ParseTakesPresetsMeasuredAndOverrides) {
  const Link measured = TestLink(100e-6, 1e9);
  EXPECT_DOUBLE_EQ(ParseLink("nvlink4", nullptr, "--intra").bandwidth, 450e9);
  const Link shaped = ParseLink("measured,bw=500Mbit/s", &measured, "--inter");
  EXPECT_DOUBLE_EQ(shaped.alpha_s, 100e-6);
  EXPECT_DOUBLE_EQ(shaped.bandwidth, 62.5e6);
  const Link given = ParseLink("alpha=20us,bw=12.5GB/s", nullptr, "--inter");
  EXPECT_DOUBLE_EQ(given.alpha_s, 20e-6);
  EXPECT_DOUBLE_EQ(given.bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(ParseLink("100gbe,alpha=1ms", nullptr, "--inter").alpha_s, 1e-3);
}

TEST(Links, BadSpecsAreOneMessageNamingTheValue) {
  const Link measured = TestLink(1e-4, 1e9);
  auto message = [&](const std::string& spec, const Link* m) {
    try {
      ParseLink(spec, m, "--inter");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("infiniband", &measured).find("unknown link 'infiniband'; accepted: measured, nvlink2"), std::string::npos);
  EXPECT_NE(message("measured,bw=-5GB/s", &measured).find("--inter=measured,bw=-5GB/s (bw): not a positive number"), std::string::npos);
  EXPECT_NE(message("alpha=0us,bw=1GB/s", &measured).find("not a positive number"), std::string::npos);
  EXPECT_NE(message("bw=1GB", &measured).find("unit 'GB' is not accepted"), std::string::npos);
  EXPECT_NE(message("bw=1GB/s", &measured).find("give a preset or measured, or both alpha= and bw="), std::string::npos);
  EXPECT_NE(message("measured", nullptr).find("the profile has no measured link"), std::string::npos);
  EXPECT_NE(message("nvlink4,speed=3", &measured).find("'speed=3' is not accepted"), std::string::npos);
}

TEST(Timeline, StreamsRunInOrderAndWaitForEachOther) {
  // compute: A(2) B(3); comm: C(4) after A; D(1) after B, C.
  const auto end = RunTimeline({{0, 2, {}}, {0, 3, {}}, {1, 4, {0}}, {1, 1, {1, 2}}});
  EXPECT_EQ(end, (std::vector<double>{2, 5, 6, 7}));
  EXPECT_THROW(RunTimeline({{0, 1, {1}}, {0, 1, {}}}), std::invalid_argument);  // waits for a later op of its stream
  EXPECT_THROW(RunTimeline({{2, 1, {}}}), std::invalid_argument);
}

TEST(Timeline, AMeshsReplicateStreamRunsBesideTheGroupsStream) {
  // compute A(1); on stream 1 B(2) after A, on stream 2 C(2) after A: each stream its own lane
  // and link, so both end at 3; on one stream (one lane, bytes on one link) C waits for B: 5.
  EXPECT_EQ(RunTimeline({{0, 1, {}}, {1, 2, {0}, 2}, {2, 2, {0}, 2}}, std::vector<int>{1, 1}),
            (std::vector<double>{1, 3, 3}));
  EXPECT_EQ(RunTimeline({{0, 1, {}}, {1, 2, {0}, 2}, {1, 2, {0}, 2}}, 1), (std::vector<double>{1, 3, 5}));
  // A stream beyond those given is refused.
  EXPECT_THROW(RunTimeline({{3, 1, {}}}, std::vector<int>{1, 1}), std::invalid_argument);
}

TEST(Timeline, LanesOverlapTheirCallsWaitingButNotTheirBytes) {
  // Two calls ready at 0, each 5 ms of which 2 move bytes: on two lanes A
  // ends at 5 and B waits for the link until 5, so ends at 7; on one lane
  // they follow each other (5, 10); calls without bytes overlap whole.
  const std::vector<TimelineOp> two{{1, 5, {}, 2}, {1, 5, {}, 2}};
  EXPECT_EQ(RunTimeline(two, 2), (std::vector<double>{5, 7}));
  EXPECT_EQ(RunTimeline(two, 1), (std::vector<double>{5, 10}));
  EXPECT_EQ(RunTimeline({{1, 5, {}}, {1, 5, {}}}, 2), (std::vector<double>{5, 5}));
  // Calls start in their order: C (after compute X, ending at 4) holds back D.
  EXPECT_EQ(RunTimeline({{0, 4, {}}, {1, 1, {0}}, {1, 1, {}}}, 2), (std::vector<double>{4, 5, 5}));
  EXPECT_THROW(RunTimeline(two, 0), std::invalid_argument);
}

TEST(Timeline, CallsThatWaitForTheCoreEndAfterTheComputationTheyWouldEndIn) {
  // Call G (1 ms) issued at 0 beside compute F (4 ms); compute H waits for G.
  const std::vector<TimelineOp> beside{{1, 1, {}}, {0, 4, {}}, {0, 2, {0}}};
  const CoreWait wait{0.5, 100};  // 0.5 ms after the computation; the scheduler never lets it on sooner
  EXPECT_EQ(RunTimeline(beside), (std::vector<double>{1, 4, 6}));
  // Waiting for the core: G ends 0.5 after F (4.5), H then.
  EXPECT_EQ(RunTimeline(beside, 1, wait), (std::vector<double>{4.5, 4, 6.5}));
  // ... unless the scheduler lets it on 1 ms after its due end (2), sooner than 4.5.
  EXPECT_EQ(RunTimeline(beside, 1, CoreWait{0.5, 1}), (std::vector<double>{2, 4, 6}));
  // A call longer than the computation ends while the compute stream waits for it: as on idle cores.
  EXPECT_EQ(RunTimeline({{1, 5, {}}, {0, 4, {}}, {0, 2, {0}}}, 1, wait), (std::vector<double>{5, 4, 7}));
  // The computation runs on without a break (F 0..4, E 4..9): G, due at 1 or at 6, ends 0.5 after E.
  // The next call (ready at 0) waits for its lane until then.
  EXPECT_EQ(RunTimeline({{1, 1, {}}, {0, 4, {}}, {0, 5, {}}}, 1, wait), (std::vector<double>{9.5, 4, 9}));
  const std::vector<TimelineOp> later{{1, 6, {}}, {0, 4, {}}, {0, 5, {}}, {1, 1, {}}};
  EXPECT_EQ(RunTimeline(later, 1, wait), (std::vector<double>{9.5, 4, 9, 10.5}));
  EXPECT_EQ(RunTimeline(later, 1), (std::vector<double>{6, 4, 9, 7}));
  // A call ending exactly as a computation ends is not inside it.
  EXPECT_EQ(RunTimeline({{1, 4, {}}, {0, 4, {}}}, 1, wait), (std::vector<double>{4, 4}));
  EXPECT_THROW(RunTimeline(beside, 1, CoreWait{-1, 0}), std::invalid_argument);
  EXPECT_THROW(RunTimeline(beside, 1, CoreWait{0, -1}), std::invalid_argument);
  EXPECT_THROW(RunTimeline({{1, 1, {1}}, {0, 1, {0}}}, 1, wait), std::invalid_argument);  // deadlock
}

TEST(StepModel, Zero3OverlapsWaitingCallsOnALinkWithLanes) {
  // A link whose calls are mostly waiting (10 ms alpha, bytes nearly free):
  // two lanes let the next unit's gather wait beside a reduce-scatter.
  const Profile p = UniformProfile(4, 1024, 8);
  Link link = TestLink(1e-2, 1e12);
  const double one = PredictZero(p, p.CostAt(8), OneNode(2, link), 1.0, 3).step_ms;
  link.lanes = 2;
  const double two = PredictZero(p, p.CostAt(8), OneNode(2, link), 1.0, 3).step_ms;
  EXPECT_LT(two, 0.9 * one) << one << " vs " << two;
  // Where each call's time is the cores' work (as much per call as alpha), nothing overlaps.
  Profile busy = p;
  busy.comm_compute_ms_per_call = 10;
  const double busy_one = PredictZero(busy, busy.CostAt(8), OneNode(2, TestLink(1e-2, 1e12)), 1.0, 3).step_ms;
  EXPECT_NEAR(PredictZero(busy, busy.CostAt(8), OneNode(2, link), 1.0, 3).step_ms, busy_one, 1e-9);
}

TEST(StepModel, DdpCallsThatWaitForTheCoreEndAfterTheBackward) {
  // As DdpExposesWhatTheLastBucketLeavesAfterBackward: backward 3..9 without a break, buckets
  // ready at 5, 7, 9, each all-reduce 1 ms on one lane: [5,6] [7,8] [9,10], step 10.
  Profile p = UniformProfile(3, 1024.0 * 1024, 8);
  const Topology t = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 10.0, 1e-9);
  // Calls wait for the core until 0.5 ms after the backward: the first ends at 9.5, the
  // others follow on the lane: [9.5,10.5] [10.5,11.5].
  p.comm_wake_ms = 0.5, p.comm_core_latency_ms = 100;
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 11.5, 1e-9);
  // Let onto the core 1 ms after their due end: 5..7, 7..9, then 9..10 with the core free.
  p.comm_core_latency_ms = 1;
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 10.0, 1e-9);
  // One term without the other waits for nothing.
  p.comm_core_latency_ms.reset();
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 10.0, 1e-9);
}

TEST(StepModel, OverlappedOptimizerStepsEachBucketWhereItsReductionEnds) {
  // As DdpExposesWhatTheLastBucketLeavesAfterBackward, with the optimizer at 0.5 ms per MiB:
  // after the last all-reduce it ends at 11.5; stepped per bucket on the link's lane, each
  // 0.5 ms after its all-reduce: [5,6]+[6,6.5], [7,8]+[8,8.5], [9,10]+[10,10.5]: 10.5.
  Profile p = UniformProfile(3, 1024.0 * 1024, 8);
  p.optimizer_ms_per_mb = 0.5;
  const Topology t = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  const StepPrediction after = PredictDdp(p, p.CostAt(8), t, 1.0);
  const StepPrediction overlapped = PredictDdp(p, p.CostAt(8), t, 1.0, /*overlap_optimizer=*/true);
  EXPECT_NEAR(after.step_ms, 11.5, 1e-9);
  EXPECT_NEAR(overlapped.step_ms, 10.5, 1e-9);
  EXPECT_NEAR(overlapped.compute_ms, after.compute_ms, 1e-9);  // the same work, elsewhere
  // A link too slow to keep up: the steps queue between the all-reduces on its lane,
  // [5,8]+0.5, [8.5,11.5]+0.5, [12,15]+0.5: 15.5, as the step after the last one.
  const Topology slow = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000 / 3));
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), slow, 1.0, true).step_ms, PredictDdp(p, p.CostAt(8), slow, 1.0).step_ms,
              1e-9);
  // zero1/2/3: each reduced slice (1/2 of the bytes) stepped as its reduce-scatter ends.
  for (int stage : {1, 2, 3}) {
    const StepPrediction z = PredictZero(p, p.CostAt(8), t, 1.0, stage);
    const StepPrediction zo = PredictZero(p, p.CostAt(8), t, 1.0, stage, 1, /*overlap_optimizer=*/true);
    EXPECT_LT(zo.step_ms, z.step_ms) << "zero" << stage;
    EXPECT_NEAR(zo.compute_ms, z.compute_ms, 1e-9) << "zero" << stage;
  }
  // Through the query, as a run's own expectation builds it.
  StepQuery q;
  q.strategy = "ddp", q.topology = t, q.batch = 8, q.bucket_cap_mb = 1.0;
  const double plain = PredictStep(p, q).step_ms;
  q.overlap_optimizer = true;
  EXPECT_NEAR(plain - PredictStep(p, q).step_ms, 1.0, 1e-9);
}

TEST(StepModel, ReducerBucketsCloseOnceTheyReachTheirCap) {
  // Tensors of 3, 3, 3, 3 bytes in model order; reverse: 3, 2, 1, 0; first cap 3, then 5.
  EXPECT_EQ(ReducerBuckets({3, 3, 3, 3}, 5, 3), (std::vector<std::vector<int>>{{3}, {2, 1}, {0}}));
  EXPECT_EQ(ReducerBuckets({1, 1}, 100, 100), (std::vector<std::vector<int>>{{1, 0}}));
}

TEST(StepModel, DdpExposesWhatTheLastBucketLeavesAfterBackward) {
  // 3 units, 1 ms forward, 2 ms backward, 1 MiB each; 1 MiB first bucket then
  // 1 MiB buckets: one bucket per unit, ready at 5, 7, 9 ms. All-reduce on 2
  // ranks = S / B with alpha 0: 1 ms each at 1 MiB/ms. Comm: [5,6] [7,8] [9,10]:
  // 1 ms after the backward ends at 9; no optimizer time.
  Profile p = UniformProfile(3, 1024.0 * 1024, 8);
  const Topology t = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  const StepPrediction s = PredictDdp(p, p.CostAt(8), t, 1.0);
  EXPECT_NEAR(s.step_ms, 10.0, 1e-9);
  EXPECT_NEAR(s.compute_ms, 9.0, 1e-9);
  EXPECT_NEAR(s.exposed_comm_ms, 1.0, 1e-9);
  // A slower link queues the buckets: each 3 ms: [5,8] [8,11] [11,14]: 5 ms exposed.
  const StepPrediction slow = PredictDdp(p, p.CostAt(8), OneNode(2, TestLink(0, 1024.0 * 1024 * 1000 / 3)), 1.0);
  EXPECT_NEAR(slow.exposed_comm_ms, 5.0, 1e-9);
  // A loaded CPU adds 2 ms to each call: [5,8] [8,11] [11,14] again, 5 ms exposed, none of it compute.
  p.comm_loaded_ms_per_call = 2.0;
  const StepPrediction loaded = PredictDdp(p, p.CostAt(8), t, 1.0);
  EXPECT_NEAR(loaded.exposed_comm_ms, 5.0, 1e-9);
  EXPECT_NEAR(loaded.compute_ms, 9.0, 1e-9);
  // Per MiB alike (1 MiB buckets). What each call costs the computation (0.5 ms after each
  // backward unit that issues one: B0 ends at 10, its 0.5 at 10.5) hides under the queue ending at 14.
  // One device issues no collectives, so nothing is added there.
  p.comm_loaded_ms_per_call = 0, p.comm_loaded_ms_per_mb = 2.0, p.comm_compute_ms_per_call = 0.5;
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 14.0, 1e-9);
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), OneNode(1, TestLink(0, 1024.0 * 1024 * 1000)), 1.0).step_ms, 9.0, 1e-9);
  p.comm_loaded_ms_per_mb = 0, p.comm_compute_ms_per_call = 0;
  // The terms measured with all-gathers and reduce-scatters price those two only: ddp's
  // all-reduces keep the step of no loaded terms.
  p.sharded_comm = Profile::CommTerms{0.5, 0.5, 2.0, 2.0};
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 10.0, 1e-9);
  EXPECT_DOUBLE_EQ(p.CommTermsOf(Collective::kAllGather).loaded_ms_per_call, 2.0);
  EXPECT_DOUBLE_EQ(p.CommTermsOf(Collective::kReduceScatter).compute_ms_per_mb, 0.5);
  EXPECT_DOUBLE_EQ(p.CommTermsOf(Collective::kBroadcast).loaded_ms_per_call, 0.0);
  p.sharded_comm.reset();
  // The optimizer runs after the last all-reduce: 0.5 ms per MiB x 3 MiB.
  p.optimizer_ms_per_mb = 0.5;
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), t, 1.0).step_ms, 11.5, 1e-9);
  // The buffers broadcast before the forward: 1 MiB and 0.5 MiB (two dtypes) on 2 ranks =
  // S / B, 1 ms and 0.5 ms, issued together on one lane: the forward starts at 1.5, all 1.5 later.
  // Counted as exposed communication; one device broadcasts nothing.
  p.buffer_broadcast_bytes = {1024.0 * 1024, 512.0 * 1024};
  const StepPrediction broadcast = PredictDdp(p, p.CostAt(8), t, 1.0);
  EXPECT_NEAR(broadcast.step_ms, 13.0, 1e-9);
  EXPECT_NEAR(broadcast.compute_ms, 10.5, 1e-9);
  EXPECT_NEAR(PredictDdp(p, p.CostAt(8), OneNode(1, TestLink(0, 1024.0 * 1024 * 1000)), 1.0).step_ms, 10.5, 1e-9);
}

TEST(StepModel, ZeroGathersBeforeForwardAndScattersDuringBackward) {
  // zero1, same model and link: reduce-scatter of 1 MiB on 2 ranks = 0.5 ms.
  // Gathers first (forward order: 0.5 ms each at 0, 0.5, 1.0 -> 1.5), forward
  // units wait: F0 [0.5,1.5] F1 [1.5,2.5] F2 [2.5,3.5]; backward [3.5,9.5];
  // scatters end at 10 (the last after B0 at 9.5); optimizer 0.
  const Profile p = UniformProfile(3, 1024.0 * 1024, 8);
  const Topology t = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  const StepPrediction z1 = PredictZero(p, p.CostAt(8), t, 1.0, 1);
  EXPECT_NEAR(z1.step_ms, 10.0, 1e-9);
  EXPECT_NEAR(z1.exposed_comm_ms, 1.0, 1e-9);
  // The buffers' broadcast (1 MiB: 1 ms) comes first, the gathers after it: all 1 ms later.
  Profile buffered = p;
  buffered.buffer_broadcast_bytes = {1024.0 * 1024};
  EXPECT_NEAR(PredictZero(buffered, p.CostAt(8), t, 1.0, 1).step_ms, 11.0, 1e-9);
  EXPECT_GE(PredictZero(buffered, p.CostAt(8), t, 1.0, 3).step_ms, 10.5);
  // zero3: per unit gathers before forward and backward, scatters after it.
  const StepPrediction z3 = PredictZero(p, p.CostAt(8), t, 1.0, 3);
  EXPECT_GE(z3.step_ms, 9.5);
  EXPECT_NEAR(z3.compute_ms, 9.0, 1e-9);
}

TEST(StepModel, Zero3KeepsItsLastUnitForItsBackward) {
  // 2 units of 1 MiB, 1 ms forward, 2 ms backward; all-gather and reduce-scatter of 1 MiB on 2
  // ranks 0.5 ms each, one lane. Gathers G0 [0,0.5] and G1 [0.5,1] (the next unit's, as unit 0
  // starts); F0 [0.5,1.5], F1 [1.5,2.5]. The last unit stays: its backward B1 [2.5,4.5] waits for
  // no gather, while unit 0's is gathered again beside it [2.5,3]; its scatter [4.5,5]; B0
  // [4.5,6.5], scatter [6.5,7]. Gathering the last unit again would end at 7.5.
  const Profile p = UniformProfile(2, 1024.0 * 1024, 8);
  const StepPrediction s = PredictZero(p, p.CostAt(8), OneNode(2, TestLink(0, 1024.0 * 1024 * 1000)), 1.0, 3);
  EXPECT_NEAR(s.step_ms, 7.0, 1e-9);
  EXPECT_NEAR(s.compute_ms, 6.0, 1e-9);
  EXPECT_NEAR(s.exposed_comm_ms, 1.0, 1e-9);
  // A loaded CPU adds 0.5 ms to every gather and scatter (the profile's sharded_comm; the
  // all-reduce's terms, here 3 ms, price neither): each call 1 ms. G0 [0,1], G1 [1,2], F0
  // [1,2], F1 [2,3], B1 [3,5] beside G0 [3,4], scatter [5,6], B0 [5,7], scatter [7,8].
  Profile loaded = p;
  loaded.comm_loaded_ms_per_call = 3.0;
  loaded.sharded_comm = Profile::CommTerms{0, 0, 0.5, 0};
  EXPECT_NEAR(PredictZero(loaded, p.CostAt(8), OneNode(2, TestLink(0, 1024.0 * 1024 * 1000)), 1.0, 3).step_ms, 8.0,
              1e-9);
}

TEST(StepModel, Zero3StartsANeighboursGatherOnceAUnitsOwnHasEnded) {
  // zero_sharded starts unit u+1's gather (forward) or u-1's (backward) as
  // unit u starts, after u's own gather has ended: gathers slower than the
  // compute run one after another even on two lanes. 3 units (1 ms forward,
  // 2 ms backward); every call 3 ms of waiting (alpha), its bytes free.
  // Forward: G0 [0,3], G1 [3,6], G2 [6,9]; F0 [3,4], F1 [6,7], F2 [9,10].
  // Backward: unit 2 kept; R1 [10,13] beside B2 [10,12]; S2 [12,15];
  // R0 [13,16] beside B1 [13,15]; S1 [15,18]; B0 [16,18]; S0 [18,21].
  const Profile p = UniformProfile(3, 1024, 8);
  Link link = TestLink(3e-3, 1e15);
  link.lanes = 2;
  const StepPrediction s = PredictZero(p, p.CostAt(8), OneNode(2, link), 1.0, 3);
  EXPECT_NEAR(s.step_ms, 21.0, 1e-6);
  EXPECT_NEAR(s.compute_ms, 9.0, 1e-9);
}

TEST(StepModel, MemoryIsTheZeroFormulaAndTheBackwardsPeak) {
  // 4 units x 1 MiB float32 SGD with momentum: 12 B per parameter of 1 MiB / 4 B = 262144
  // parameters each; per image each unit keeps 1024 B and hands on 100 B; 8 images. The walk of
  // the backward: at unit u, the activations up to u, the gradients of u's output and input, and
  // (.grad made as it goes) the gradients of units u.. : at u = 0, 8 x (1024 + 100) B + 4 MiB of
  // gradients = 4203296 B, the peak (the parameters outweigh the activations here).
  const Profile p = UniformProfile(4, 1024.0 * 1024, 8);
  StepQuery q{"ddp", OneNode(4, TestLink(1e-5, 1e9)), 8};
  const double walk = 4203296.0 / (1024.0 * 1024);
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 12.0 + walk, 1e-9);  // its bucket buffers beside .grad
  // --gradient-as-bucket-view: backward holds no second set of gradients, so the walk peaks at
  // u = 3 (8 x 4296 B) beside the 12 MiB of states, at any batch.
  q.gradient_as_bucket_view = true;
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 12.0 + 8 * 4296.0 / (1024.0 * 1024), 1e-9);
  q.batch = 1024;
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 12.0 + 1024 * 4296.0 / (1024.0 * 1024), 1e-9);
  // --grad-accum=2: micro-batches of 4; the first makes .grad, a full set held beside the buckets
  // through the second's backward (4 MiB + 4 x 4296 B), with or without bucket views.
  q.batch = 8, q.grad_accum = 2;
  const double accumulated = 12.0 + (4.0 * 1024 * 1024 + 4 * 4296.0) / (1024.0 * 1024);
  EXPECT_NEAR(PredictStep(p, q).memory_mb, accumulated, 1e-9);
  q.gradient_as_bucket_view = false;
  EXPECT_NEAR(PredictStep(p, q).memory_mb, accumulated, 1e-9);
  q.grad_accum = 1;
  q.batch = 8, q.gradient_as_bucket_view = false;
  q.strategy = "zero3";  // 3 MiB of states, one unit gathered whole (1 MiB), .grad until reduced
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 3.0 + 1.0 + walk, 1e-9);
  q.strategy = "zero1";  // (4 + 4) + 4 / 4; .grad views of its flat buffer: at u = 3, 8 x 4296 B
  EXPECT_NEAR(PredictStep(p, q).states_mb, 9.0, 1e-9);
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 9.0 + 8 * 4296.0 / (1024.0 * 1024), 1e-9);
  EXPECT_EQ(PredictStep(p, q).LargestBatch(12.0, 8), 3 * 1024 * 1024 / 4296);
  // Over Gloo the reduce-scatter is an alltoall into a copy of each bucket, kept until backward
  // ends: beside the rest of backward the copies so far, beside its end all of them (4 MiB):
  // zero1 9 + 4 MiB; zero3 (its buckets are its units) 3 + 4 MiB of gradient buffers + 4 MiB.
  q.reduce_by_alltoall = true;
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 9.0 + 4.0, 1e-9);
  q.strategy = "zero3";
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 3.0 + 4.0 + 4.0, 1e-9);
  q.reduce_by_alltoall = false;
  // A unit whose backward allocates 1.5 MiB beyond its output's gradient (unit 0, where the walk
  // peaks): ddp's .grad is the new gradient itself (1.5 - 1 MiB beside it); zero2 copies each
  // gradient into its bucket buffer, so the whole 1.5 MiB is a temporary beside the buffer's slot.
  Profile heavy = p;
  heavy.units[0].backward_fixed_bytes = 1.5 * 1024 * 1024;
  const double ahead = 8 * (1024.0 + 100) + 4.0 * 1024 * 1024;  // unit 0's activations, every gradient
  q.strategy = "ddp";
  EXPECT_NEAR(PredictStep(heavy, q).memory_mb, 12.0 + (ahead + 0.5 * 1024 * 1024) / (1024.0 * 1024), 1e-9);
  q.strategy = "zero2";  // 4 + (4 + 4) / 4 MiB of states
  EXPECT_NEAR(PredictStep(heavy, q).memory_mb, 6.0 + (ahead + 1.5 * 1024 * 1024) / (1024.0 * 1024), 1e-9);
  q.strategy = "single";  // 8 MiB of parameters and momentum; the walk counts its .grad
  q.topology = OneNode(1, TestLink(1e-5, 1e9));
  EXPECT_NEAR(PredictStep(p, q).memory_mb, 8.0 + walk, 1e-9);
}

TEST(StepModel, RecomputedMemoryHoldsOutputsAndOneUnitsActivations) {
  // 4 units of 64 B of parameters (16 each: 768 B of ddp states), 1024 B kept and 100 B handed
  // on per image, 8 images. Kept: the walk peaks at the last unit, 8 x (4096 + 200) + 64 B.
  // Every unit recomputed: each holds its 100 B, so 8 x (400 + 200) + 64 B, and the largest
  // unit's other 924 B re-created for the 8 images.
  const Profile p = UniformProfile(4, 64, 8);
  StepQuery q{"ddp", OneNode(4, TestLink(1e-5, 1e9)), 8};
  const double MiB = 1024.0 * 1024;
  const StepPrediction plain = PredictStep(p, q), redo = PredictRecomputedMemory(p, q);
  EXPECT_NEAR(plain.memory_mb, (768 + 8 * 4296 + 64) / MiB, 1e-12);
  EXPECT_NEAR(redo.memory_mb, (768 + 8 * 600 + 64 + 8 * 924) / MiB, 1e-12);
  EXPECT_NEAR(redo.states_mb, 768 / MiB, 1e-12);
  EXPECT_GT(redo.LargestBatch(1.0, 8), plain.LargestBatch(1.0, 8));
  // A pipeline re-creates one micro-batch's: 2 stages of 2 units, 1F1B over 2 micro-batches of
  // 4 images. Stage 0 holds both micro-batches at once: fixed 256 B (parameters and momentum of
  // 32 parameters); kept, the walk at its unit 1: 4 x (2048 + 200) + 4 x 2048 (the other
  // micro-batch) + 64 B; recomputed: 4 x (200 + 200) + 4 x 200 + 64, and 4 x 924 re-created.
  StepQuery pipe{"pmp", OneNode(2, TestLink(0, 1e12)), 8};
  pipe.micro_batches = 2;
  EXPECT_NEAR(PredictStep(p, pipe).memory_mb, (384 + 4 * 2248 + 4 * 2048) / MiB, 1e-12);
  EXPECT_NEAR(PredictRecomputedMemory(p, pipe).memory_mb, (384 + 4 * 400 + 4 * 200 + 4 * 924) / MiB, 1e-12);
}

TEST(StepModel, AUnitsBackwardAllocationsCountWhereTheyAreLargest) {
  // The profile above, unit 0's backward allocating 5000 B per image and 100 B besides (its
  // weights' new gradients, 64 B of them: .grad itself where it is made as backward goes). At
  // u = 0: 8 x (1024 + 100) B of activations and output gradient, 8 x 5000 + 100 - 64 B of its
  // backward, and all 256 B of .grad: 49284 B, above the 34432 B at u = 3.
  Profile p = UniformProfile(4, 64, 8);
  p.units[0].backward_bytes = 5000, p.units[0].backward_fixed_bytes = 100;
  StepQuery q{"ddp", OneNode(4, TestLink(1e-5, 1e9)), 8};
  const double MiB = 1024.0 * 1024;
  EXPECT_NEAR(PredictStep(p, q).memory_mb, (768 + 49284) / MiB, 1e-12);
  // One device: the same walk; its states without .grad (in the walk): 512 B.
  EXPECT_NEAR(PredictOneDeviceMemoryMb(p, 8), (512 + 49284) / MiB, 1e-12);
  q.topology = OneNode(1, TestLink(1e-5, 1e9)), q.strategy = "single";
  EXPECT_NEAR(PredictStep(p, q).memory_mb, PredictOneDeviceMemoryMb(p, 8), 1e-12);
  // A pipeline keeps .grad from step to step: its stage 0 (units 0, 1; one micro-batch of 8)
  // holds 384 B of states, and at u = 0, 8 x (1024 + 100) + 8 x 5000 + 100 B.
  StepQuery pipe{"mp", OneNode(2, TestLink(0, 1e12)), 8};
  EXPECT_NEAR(PredictStep(p, pipe).memory_mb, (384 + 8 * 1124 + 40100) / MiB, 1e-12);
}

TEST(StepModel, APipelineRunsTheSplitItIsGiven) {
  // 4 equal units on 2 stages: the fastest split is 2,2; given 1,3 the second stage holds three
  // units' parameters and takes three units' time; a split that does not fit is ignored.
  const Profile p = UniformProfile(4, 1024.0 * 1024, 8);
  StepQuery q{"pmp", OneNode(2, TestLink(0, 1e12)), 8};
  q.micro_batches = 2;
  const StepPrediction fastest = PredictStep(p, q);
  q.split = {1, 3};
  const StepPrediction given = PredictStep(p, q);
  EXPECT_GT(given.step_ms, fastest.step_ms);
  EXPECT_NEAR(given.states_mb, 3 * 3.0, 1e-9);  // 12 B per parameter of 3 MiB / 4 B
  EXPECT_NEAR(fastest.states_mb, 2 * 3.0, 1e-9);
  q.split = {1, 2};  // 3 units, not the profile's 4
  EXPECT_NEAR(PredictStep(p, q).step_ms, fastest.step_ms, 1e-12);
}

TEST(StepModel, APipelinesOverlappedOptimizerRunsInTheOtherStagesDrain) {
  // 4 equal units of 1 MiB on 2 stages, 1F1B over 2 micro-batches, 1 ms of optimizer per MiB:
  // 2 ms per stage. After the rows the step ends at the makespan + 2; overlapped, stage 1,
  // done first, steps from its own end in stage 0's drain, then both share what is left: the
  // step ends earlier, by at most 2 ms, and never before the makespan (the plain step - 2).
  Profile p = UniformProfile(4, 1024.0 * 1024, 8);
  p.optimizer_ms_per_mb = 1.0;
  StepQuery q{"pmp", OneNode(2, TestLink(0, 1e12)), 8};
  q.micro_batches = 2;
  const double plain = PredictStep(p, q).step_ms;
  q.overlap_optimizer = true;
  const StepPrediction overlapped = PredictStep(p, q);
  EXPECT_LT(overlapped.step_ms, plain - 1e-9);
  EXPECT_GE(overlapped.step_ms, plain - 2.0 - 1e-9);
  // Without optimizer work there is nothing to hide.
  p.optimizer_ms_per_mb = 0;
  EXPECT_NEAR(PredictStep(p, q).step_ms, plain - 2.0, 1e-9);
}

TEST(StepModel, PipelineBubbleMatchesTheClosedForms) {
  // Equal stages, no hand-off cost: GPipe and 1F1B (S-1)/(M+S-1); interleaved
  // with V chunks (S-1)/(V M + S-1) of the busiest device's span.
  const Profile p = UniformProfile(8, 0, 16);
  for (auto [schedule, v] : {std::pair{PipelineSchedule::kGPipe, 1}, {PipelineSchedule::k1F1B, 1},
                             {PipelineSchedule::kInterleaved, 2}}) {
    StepQuery q{"pmp", OneNode(4, TestLink(0, 1e18)), 16};
    q.schedule = schedule, q.micro_batches = 8, q.virtual_stages = v;
    const StepPrediction s = PredictStep(p, q);
    const double bubble = s.bubble_ms / (s.step_ms);
    EXPECT_NEAR(bubble, TheoreticalBubble(4, v, 8), 1e-9) << PipelineScheduleName(schedule);
    EXPECT_NEAR(s.exposed_comm_ms, 0, 1e-9);
  }
}

TEST(Links, SplitTopologyKeepsAGroupInsideItsNode) {
  // 2 nodes of 4 devices sharing 2 NICs: groups of 4 and 2 stay on a node,
  // their replicate groups cross (each device over half a NIC); a group of
  // 8 spans both nodes and has no replicas.
  Topology t = OneNode(4, TestLink(1e-6, 100e9));
  t.nodes = 2, t.nics = 2, t.inter = TestLink(5e-6, 50e9);
  MeshTopology m = SplitTopology(t, 4);
  EXPECT_EQ(m.group.per_node, 4);
  EXPECT_EQ(m.group.nodes, 1);
  EXPECT_EQ(m.replicas.per_node, 1);
  EXPECT_EQ(m.replicas.nodes, 2);
  EXPECT_DOUBLE_EQ(m.replicas.inter.bandwidth, 25e9);
  m = SplitTopology(t, 2);
  EXPECT_EQ(m.group.world(), 2);
  EXPECT_EQ(m.group.nodes, 1);
  EXPECT_EQ(m.replicas.per_node, 2);  // two of a node's replicas: their reduce-scatter on the node first
  EXPECT_EQ(m.replicas.nodes, 2);
  m = SplitTopology(t, 8);
  EXPECT_EQ(m.group.per_node, 4);
  EXPECT_EQ(m.group.nodes, 2);
  EXPECT_EQ(m.replicas.world(), 1);
}

TEST(StepModel, HsdpAllReducesEachReducedShardAcrossTheReplicas) {
  // As Zero3KeepsItsLastUnitForItsBackward (2 units of 1 MiB, shard group of 2 on one node:
  // gather and scatter 0.5 ms each), on 2 such nodes: after each scatter its 0.5 MiB shard is
  // all-reduced between the 2 nodes (ring of 2: S / B = 0.5 ms). S1 [4.5,5], A1 [5,5.5],
  // B0 [4.5,6.5], S0 [6.5,7], A0 [7,7.5]: 0.5 ms after the single-node step of 7.
  const Profile p = UniformProfile(2, 1024.0 * 1024, 8);
  Topology t = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  t.nodes = 2;
  const StepPrediction hsdp = PredictZero(p, p.CostAt(8), t, 1.0, 3, /*replicas=*/2);
  EXPECT_NEAR(hsdp.step_ms, 7.5, 1e-9);
  EXPECT_NEAR(hsdp.compute_ms, 6.0, 1e-9);
  // hsdp replicates one per node by default; its states are sharded over the node's 2 devices
  // (12 B per parameter of 2 MiB / 4 B = 524288 parameters: 6 MiB / 2), zero3's over all 4.
  StepQuery q{"hsdp", t, 8};
  EXPECT_NEAR(PredictStep(p, q).states_mb, 3.0, 1e-9);
  EXPECT_EQ(PredictStep(p, q).images, 32);
  q.strategy = "zero3";
  EXPECT_NEAR(PredictStep(p, q).states_mb, 1.5, 1e-9);
  q.replicas = 2;
  EXPECT_NEAR(PredictStep(p, q).step_ms, PredictStep(p, StepQuery{"hsdp", t, 8}).step_ms, 1e-9);
}

TEST(StepModel, ReplicatedPipelinesAllReduceEachDeviceAfterItsLastAction) {
  // 4 units of 1 MiB, 2 stages of 2 units on a node, 1F1B over 2 micro-batches; replicated on
  // 2 nodes. Each device all-reduces its 2 MiB with its twin once its last action ends (ring of
  // 2: S / B = 2 ms). Stage 1 ends its last backward 2 ms before stage 0 ends (stage 0's
  // backward of that micro-batch), so stage 0's all-reduce ends the step: 2 ms after the
  // pipeline alone, with twice the images. The hand-offs (100 B an image) cost ~nothing.
  const Profile p = UniformProfile(4, 1024.0 * 1024, 8);
  Topology node = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  StepQuery one{"pmp", node, 8};
  one.micro_batches = 2;
  const StepPrediction alone = PredictStep(p, one);
  StepQuery twice = one;
  twice.topology.nodes = 2, twice.replicas = 2;
  const StepPrediction replicated = PredictStep(p, twice);
  EXPECT_NEAR(replicated.step_ms, alone.step_ms + 2.0, 1e-2);
  EXPECT_EQ(replicated.images, 2 * alone.images);
  EXPECT_NEAR(replicated.exposed_comm_ms, alone.exposed_comm_ms + 2.0, 1e-2);
  // A degree that leaves a pipeline of one stage, or does not divide the devices, is refused.
  twice.replicas = 4;
  EXPECT_THROW(PredictStep(p, twice), ConfigError);
  twice.replicas = 3;
  EXPECT_THROW(PredictStep(p, twice), ConfigError);
}

TEST(Links, SharedLinkEndsSharesOnlyWhileTransfersOverlap) {
  // Capacity 1: A [0,4) alone until B starts at 2 (A has 2 left), then both at half rate:
  // A ends at 6, B has 2 left, alone again: ends at 8. Capacity 2: each at full rate.
  std::vector<double> ends = SharedLinkEnds({0, 2}, {4, 4}, 1);
  EXPECT_NEAR(ends[0], 6, 1e-9);
  EXPECT_NEAR(ends[1], 8, 1e-9);
  ends = SharedLinkEnds({0, 2}, {4, 4}, 2);
  EXPECT_NEAR(ends[0], 4, 1e-9);
  EXPECT_NEAR(ends[1], 6, 1e-9);
  // Three at once on capacity 2 (each at 2/3) and one that starts after the link is free.
  ends = SharedLinkEnds({0, 0, 0, 20}, {2, 2, 4, 1}, 2);
  EXPECT_NEAR(ends[0], 3, 1e-9);  // 2 / (2/3)
  EXPECT_NEAR(ends[1], 3, 1e-9);
  EXPECT_NEAR(ends[2], 5, 1e-9);  // 2 done by 3, then alone
  EXPECT_NEAR(ends[3], 21, 1e-9);
  EXPECT_THROW(SharedLinkEnds({0}, {1, 2}, 1), std::invalid_argument);
  EXPECT_THROW(SharedLinkEnds({0}, {1}, 0.5), std::invalid_argument);
}

TEST(StepModel, ReplicatedPipelinesShareANodesLinkOnlyWhileTheirAllReducesOverlap) {
  // As ReplicatedPipelinesAllReduceEachDeviceAfterItsLastAction, the link between the nodes at
  // half the rate: each device's all-reduce takes 4 ms alone, stage 1's starts 2 ms before stage
  // 0's. With a NIC per device they run side by side (stage 0's ends 4 ms after its start);
  // with one NIC for the node's two devices they share it while both run (capacity 1: stage 1
  // has 2 ms left when stage 0 starts, both at half rate for 4 ms, then stage 0's last 2 ms
  // alone: 6 ms after stage 0's start).
  const Profile p = UniformProfile(4, 1024.0 * 1024, 8);
  Topology t = OneNode(2, TestLink(0, 1024.0 * 1024 * 1000));
  t.nodes = 2, t.inter = TestLink(0, 1024.0 * 1024 * 500);
  StepQuery one{"pmp", OneNode(2, TestLink(0, 1024.0 * 1024 * 1000)), 8};
  one.micro_batches = 2;
  const double alone = PredictStep(p, one).step_ms;
  StepQuery q = one;
  q.topology = t, q.replicas = 2;
  EXPECT_NEAR(PredictStep(p, q).step_ms, alone + 4.0, 1e-2);
  q.topology.nics = 1;
  EXPECT_NEAR(PredictStep(p, q).step_ms, alone + 6.0, 1e-2);
}

TEST(StepModel, BadQueriesAreOneMessageEach) {
  const Profile p = UniformProfile(4, 1024, 8);
  auto message = [&](StepQuery q) {
    try {
      PredictStep(p, q);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const Topology two = OneNode(2, TestLink(1e-5, 1e9));
  EXPECT_NE(message({"fsdp", two, 8}).find("'fsdp' is not accepted; accepted: single, dp, ddp"), std::string::npos);
  EXPECT_NE(message({"pmp", OneNode(1, TestLink(1e-5, 1e9)), 8}).find("needs at least 2 devices"), std::string::npos);
  EXPECT_NE(message({"single", two, 8}).find("single runs on exactly 1 device"), std::string::npos);
  EXPECT_NE(message({"pmp", OneNode(8, TestLink(1e-5, 1e9)), 8}).find("a pipeline of 8 stages needs as many units"),
            std::string::npos);
  Topology nodes = two;
  nodes.nodes = 2;
  EXPECT_NE(message({"dp", nodes, 8}).find("dp drives the devices of one node"), std::string::npos);
  StepQuery chunks{"pmp", two, 8};
  chunks.micro_batches = 3;
  EXPECT_NE(message(chunks).find("--chunks=3: must divide the batch 8"), std::string::npos);
}

TEST(Profile, RoundTripsAndRefusesAnotherModel) {
  TempDir dir;
  Profile p = UniformProfile(3, 4096, 8);
  p.link = TestLink(2e-4, 1.5e9);
  p.link->own[Collective::kAllGather] = {3e-4, 0.7e9};
  p.link_ranks = 2;
  p.link_points.push_back({"all-gather", 2, {{1e6, 0.002}, {2e6, 0.003}}});
  p.link->lanes = 2;
  p.comm_loaded_ms_per_call = 0.25;
  p.sharded_comm = Profile::CommTerms{0.1, 0.2, 0.3, 0.4};
  p.comm_wake_ms = 0.2, p.comm_core_latency_ms = 4;
  p.buffer_broadcast_bytes = {9600, 160};
  p.units[2].backward_bytes = 3000, p.units[2].backward_fixed_bytes = 512;
  WriteProfile(p, dir.path() + "/p.json");
  const Profile back = ReadProfile(dir.path() + "/p.json");
  EXPECT_EQ(back.buffer_broadcast_bytes, (std::vector<double>{9600, 160}));
  EXPECT_DOUBLE_EQ(back.units[2].BackwardBytes(8), 8 * 3000.0 + 512);
  EXPECT_EQ(back.link->lanes, 2);
  // The measured points come back as the link's table.
  EXPECT_EQ(back.link->table_ranks, 2);
  EXPECT_NEAR(CollectiveSeconds(*back.link, Collective::kAllGather, 2, 1.5e6), 0.0025, 1e-12);
  ASSERT_EQ(back.link_points.size(), 1u);
  EXPECT_EQ(back.units.size(), 3u);
  EXPECT_EQ(back.units[1].cost.at(4).backward_ms, 1.0);
  EXPECT_NEAR(back.link->bandwidth, 1.5e9, 1);
  ASSERT_EQ(back.link->own.size(), 1u);
  EXPECT_NEAR(back.link->own.at(Collective::kAllGather).alpha_s, 3e-4, 1e-12);
  EXPECT_NEAR(back.link->own.at(Collective::kAllGather).bandwidth, 0.7e9, 1);
  EXPECT_DOUBLE_EQ(back.comm_loaded_ms_per_call, 0.25);
  ASSERT_TRUE(back.sharded_comm);
  EXPECT_DOUBLE_EQ(back.sharded_comm->compute_ms_per_call, 0.1);
  EXPECT_DOUBLE_EQ(back.sharded_comm->compute_ms_per_mb, 0.2);
  EXPECT_DOUBLE_EQ(back.sharded_comm->loaded_ms_per_call, 0.3);
  EXPECT_DOUBLE_EQ(back.sharded_comm->loaded_ms_per_mb, 0.4);
  EXPECT_FALSE(UniformProfile(1, 8).sharded_comm);  // older profiles: every collective priced alike
  EXPECT_EQ(back.comm_wake_ms, 0.2);
  EXPECT_EQ(back.comm_core_latency_ms, 4.0);
  EXPECT_FALSE(UniformProfile(1, 8).comm_wake_ms);  // none unless set
  EXPECT_EQ(back.Parameters(), 3 * 1024);
  EXPECT_THROW(CheckProfileMatches(back, "resnet50", 16, 32, "float32", "p.json"), ConfigError);
  EXPECT_THROW(CheckProfileMatches(back, "resnet18", 16, 32, "amp-bf16", "p.json"), ConfigError);
  EXPECT_NO_THROW(CheckProfileMatches(back, "resnet18", 16, 32, "float32", "p.json"));
  // Reading `file` (written with `text`) is refused with a message holding `message`.
  auto refused = [&](const std::string& file, const std::string& text, const std::string& message,
                     const char* what) {
    WriteFile(dir.path() + "/" + file, text);
    try {
      ReadProfile(dir.path() + "/" + file);
      ADD_FAILURE() << what << " was read";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  std::string text = ReadFile(dir.path() + "/p.json");
  const size_t point = text.find("0.003");
  ASSERT_NE(point, std::string::npos);
  refused("negative.json", std::string(text).replace(point, 5, "-0.003"),
          "all-gather point (2000000, -0.003): bytes and seconds must be positive", "a negative measured time");
  const size_t lanes = text.find("\"lanes\": 2");
  ASSERT_NE(lanes, std::string::npos) << text;
  refused("lanes.json", std::string(text).replace(lanes, 10, "\"lanes\": 0"), "link.lanes 0: want 1..64",
          "a link of 0 lanes");
  const size_t buffers = text.find("9600.0");
  ASSERT_NE(buffers, std::string::npos) << text;
  refused("buffers.json", std::string(text).replace(buffers, 6, "0"), "buffer_broadcast_bytes 0: want sizes > 0",
          "a broadcast of 0 bytes");
  const size_t latency = text.find("\"comm_core_latency_ms\"");
  ASSERT_NE(latency, std::string::npos) << text;
  refused("wake.json", std::string(text).replace(latency, 22, "\"unused\""),
          "comm_wake_ms without comm_core_latency_ms: give both or neither", "one of the two core-wait terms");
  const size_t sharded = text.find("\"comm_loaded_ms_per_mb\": 0.4");
  ASSERT_NE(sharded, std::string::npos) << text;
  refused("sharded.json", std::string(text).replace(sharded, 28, "\"comm_loaded_ms_per_mb\": \"fast\""),
          "sharded_comm: field 'comm_loaded_ms_per_mb' has the wrong type", "a term that is not a number");
  WriteFile(dir.path() + "/old.json", std::string(text).replace(lanes, 11, ""));  // written before lanes
  EXPECT_EQ(ReadProfile(dir.path() + "/old.json").link->lanes, 1);
  refused("bad.json", "{\"version\": 1}", "field 'model' is missing", "a profile without fields");
}


TEST(Project, CliTableAndBadInputs) {
  TempDir dir;
  Profile p = UniformProfile(10, 1 << 20, 32);
  p.link = TestLink(2e-4, 1e9);
  p.link_ranks = 2;
  WriteProfile(p, dir.path() + "/p.json");
  const std::string csv = dir.path() + "/t.csv";
  const auto ok = RunDdpbench(Args({"--project=" + dir.path() + "/p.json", "--nodes=1,2", "--gpus-per-node=2",
                               "--inter=25gbe", "--project-csv=" + csv, "--device-memory-gb=1"}));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const std::string table = ReadFile(csv);
  EXPECT_EQ(table.rfind("strategy,mesh,schedule,nodes,gpus_per_node,world,", 0), 0u) << table;
  EXPECT_NE(table.find("\nzero3,,,2,2,4,32,128,"), std::string::npos) << table;
  EXPECT_NE(table.find("\npmp,,1f1b,1,2,2,"), std::string::npos) << table;
  // The hybrids, on 2 nodes only (on one they are their one-dimensional selves): hsdp in shard
  // groups of a node, pmp-dp a pipeline of a node's devices on its share of the global batch.
  EXPECT_NE(table.find("\nhsdp,\"replicate=2,shard=2\",,2,2,4,32,128,"), std::string::npos) << table;
  EXPECT_NE(table.find("\npmp-dp,\"pp=2,dp=2\",1f1b,2,2,4,32,128,"), std::string::npos) << table;
  EXPECT_EQ(table.find("\nhsdp,,,1,"), std::string::npos) << table;
  // Compute scaled to a given device: one device then runs exactly that.
  const auto scaled = RunDdpbench(Args({"--project=" + dir.path() + "/p.json", "--strategies=ddp", "--gpus-per-node=1",
                                        "--device-img-s=2470", "--project-csv=" + csv}));
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  EXPECT_NE(ReadFile(csv).find("\nddp,,,1,1,1,32,32,"), std::string::npos) << ReadFile(csv);
  EXPECT_NE(ReadFile(csv).find(",2470.0,1.000,"), std::string::npos) << ReadFile(csv);
  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string prof = "--project=" + dir.path() + "/p.json";
  for (const Bad& bad : std::vector<Bad>{
           {{prof, "--model=resnet50"}, "the profile is of --model resnet18, the run asks for resnet50"},
           {{prof, "--batch-size=32", "--amp=bf16"}, "the profile is of precision float32, the run asks for amp-bf16"},
           {{prof, "--inter=warp-drive", "--nodes=2"}, "--inter=warp-drive: unknown link 'warp-drive'"},
           {{prof, "--intra=alpha=5us,bw=0GB/s"}, "(bw): not a positive number"},
           {{prof, "--strategies=pmp", "--gpus-per-node=16"}, "a pipeline of 16 stages needs as many units"},
           {{prof, "--strategies=zero3", "--gpus-per-node=1"}, "accepted"},
           {{prof, "--nodes=0"}, "--nodes=0: want a comma list of whole numbers >= 1"},
           {{prof, "--strategies=zero3-dp"}, "'zero3-dp': only a pipeline strategy (mp, pmp) takes -dp"},
           {{prof, "--strategies=pmp-dp", "--nodes=2", "--gpus-per-node=1"}, "groups of at least 2"},
           {{prof, "--device-img-s=-3"}, "--device-img-s=-3: must be >= 0"},
           {{"--project=" + dir.path() + "/none.json"}, "cannot open the profile"},
           {{"--nodes=2"}, "--nodes=2: applies to --project and --search only"},
       }) {
    const auto r = RunDdpbench(Args(bad.args));
    if (bad.says == "accepted") {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      continue;
    }
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(bad.says), std::string::npos) << r.output;
  }
}

// The unit backward line is exact at the run's own batch whatever the two
// peaks: AVX2 oneDNN's 512-channel weight gradient takes a 36 MB workspace at
// 2 images and none at 1 (measured: 45 and 9 MB), whose line through both has
// a fixed part below zero; clamping only that part predicted 72 MB at 2.
TEST(Projection, BackwardLineIsExactAtTheRunsBatch) {
  const double mb = 1 << 20;
  const BackwardLine workspace = FitBackwardLine(2, 45 * mb, 1, 9 * mb);
  EXPECT_DOUBLE_EQ(workspace.fixed, 0);
  EXPECT_DOUBLE_EQ(workspace.per_image * 2 + workspace.fixed, 45 * mb);
  const BackwardLine both = FitBackwardLine(16, 50 * mb, 4, 20 * mb);  // 2.5 MB an image + 10 MB
  EXPECT_DOUBLE_EQ(both.per_image, 2.5 * mb);
  EXPECT_DOUBLE_EQ(both.fixed, 10 * mb);
  const BackwardLine shrinking = FitBackwardLine(8, 45 * mb, 2, 72 * mb);
  EXPECT_DOUBLE_EQ(shrinking.per_image, 0);
  EXPECT_DOUBLE_EQ(shrinking.fixed, 45 * mb);
  const BackwardLine one = FitBackwardLine(1, 9 * mb, 1, 9 * mb);
  EXPECT_DOUBLE_EQ(one.per_image, 9 * mb);
  EXPECT_DOUBLE_EQ(one.fixed, 0);
}

}  // namespace
}  // namespace ddpbench
