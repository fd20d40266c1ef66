// dp, mp and pmp: stage splitting (balance by parameters, explicit --split,
// bad values), pipeline schedules (order, deadlock freedom, 1F1B's smaller
// activation footprint), the worker threads and tensor hand-off, Predict
// against single, and through the real binary: --verify parity against
// single for each strategy and schedule, the row's split/bubble/memory
// columns, and every bad input (exit 2, one message naming it, no row).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/memory.h"
#include "harness/phase.h"
#include "base/results.h"
#include "harness/training.h"
#include "strategies/device_workers.h"
#include "strategies/pipeline/pipeline_shape.h"
#include "strategies/pipeline/rebalance.h"
#include "strategies/registry.h"
#include "planning/schedules.h"
#include "strategies/pipeline/split_backward.h"
#include "strategies/pipeline/stages.h"
#include "tests/split_util.h"
#include "tests/test_util.h"

namespace ddpbench {
namespace {

using testing::AllSplits;
using testing::BruteForceBest;
using testing::ConfigErrorOf;
using testing::LargestStage;
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

// ResNet-18 of width 4 for 16 px images, 10 classes.
ResNet TinyResNet() {
  ResNetOptions o;
  o.width = 4;
  o.small_input = true;
  o.num_classes = 10;
  return ResNet(o);
}

// ---------------------------------------------------------------------------
// Splitting.

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
                                         {"5,3,2", 2, "3 counts for 2 stages"},
                                         {"10", 2, "1 counts for 2 stages"},
                                         {"0,10", 2, "'0' is not a unit count"},
                                         {"4,x", 2, "'x' is not a unit count"},
                                         {"4,", 2, "empty count"},
                                         {"", 2, "empty count"}}) {
    std::string message = ConfigErrorOf([&] { ParseSplit(bad.split, bad.devices, units); });
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

// The default split: each unit's forward+backward measured, then the exact
// min-max partition of those times (checked against brute force), for one
// stage per device and for an interleaved V per device.
TEST(Split, TimeBalanceIsTheBestSplitOfTheMeasuredTimes) {
  RunConfig config;
  config.strategy = "pmp";
  config.image_size = 16;
  ResNet model = TinyResNet();
  EXPECT_EQ(config.balance, "time");
  for (int V : {1, 2}) {
    StagePlan plan = ChooseSplit(config, model, 2, V, 4);
    ASSERT_EQ(plan.unit_ms.size(), 10u);
    ASSERT_EQ(plan.counts.size(), 2u * V);
    for (double t : plan.unit_ms) EXPECT_GT(t, 0);
    EXPECT_EQ(LargestStage(plan.unit_ms, plan.counts), BruteForceBest(plan.unit_ms, 2 * V));
    EXPECT_EQ(plan.stage_ms, StageTimes(plan.counts, plan.unit_ms));
  }
  config.balance = "params";
  EXPECT_EQ(SplitCounts(ChooseSplit(config, model, 2, 1, 4).counts), "8,2");
  config.split = "4,6";
  StagePlan given = ChooseSplit(config, model, 2, 1, 4);
  EXPECT_EQ(SplitCounts(given.counts), "4,6");
  EXPECT_EQ(given.stage_ms.size(), 2u);  // measured for an explicit split too
}

// pmp measures every candidate micro-batch size in the same rounds, on as
// many threads at once as there are CPU devices: one UnitTimes per sample,
// every unit timed (finite, forward within the whole), and the model and the
// global RNG left as they were (clones are timed).
TEST(Split, MeasureUnitTimesTimesEverySampleOnAClone) {
  ResNet model = TinyResNet();
  model->train();
  std::vector<torch::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
  auto check = [](const std::vector<UnitTimes>& times, const char* how) {
    ASSERT_EQ(times.size(), 2u) << how;
    for (const UnitTimes& t : times) {
      ASSERT_EQ(t.total_ms.size(), 10u) << how;
      ASSERT_EQ(t.forward_ms.size(), 10u) << how;
      for (size_t u = 0; u < 10; ++u) {
        EXPECT_TRUE(std::isfinite(t.total_ms[u])) << how << ", unit " << u;
        EXPECT_GT(t.forward_ms[u], 0) << how;
        EXPECT_LE(t.forward_ms[u], t.total_ms[u]) << how;
      }
    }
  };
  check(MeasureUnitTimes(model, {torch::randn({4, 3, 16, 16}), torch::randn({1, 3, 16, 16})}, 2), "one thread");
  RunConfig config;
  config.image_size = 16;
  // The clones leave the global RNG as it was (a resumed run must draw what
  // the uninterrupted one does), also when several threads measure at once.
  at::Generator rng = at::detail::getDefaultCPUGenerator();
  const torch::Tensor rng_before = rng.get_state();
  for (int i = 0; i < 3; ++i) check(MeasureUnits(config, model, {4, 1}, /*concurrent=*/2), "two threads at once");
  EXPECT_TRUE(torch::equal(rng.get_state(), rng_before));
  const auto after = model->parameters();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(torch::equal(before[i], after[i]));
    EXPECT_FALSE(after[i].grad().defined());
  }
}

// --units=auto costs whole blocks from the half blocks' times: each block's
// two halves are one block, the stem and the head their own, and a block's
// times are its halves' sums.
TEST(Split, HalfBlocksMergeIntoTheWholeBlockModelsUnits) {
  ResNetOptions o;
  o.width = 4;
  const std::vector<std::string> blocks = ResNet(o)->unit_names();
  o.half_blocks = true;
  const std::vector<std::string> halves = ResNet(o)->unit_names();
  ASSERT_EQ(halves.size(), 18u);
  EXPECT_EQ(WholeBlockNames(halves), blocks);
  EXPECT_EQ(WholeBlockNames(blocks), blocks);
  const std::vector<int> block = BlockOfUnit(halves);
  EXPECT_EQ(block, (std::vector<int>{0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9}));
  EXPECT_EQ(BlockOfUnit(blocks), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  UnitTimes t;
  for (int u = 0; u < 18; ++u) {
    t.total_ms.push_back(u + 1);
    t.forward_ms.push_back(0.5 * (u + 1));
  }
  const UnitTimes merged = MergeHalfBlocks(t, halves);
  ASSERT_EQ(merged.total_ms.size(), 10u);
  EXPECT_DOUBLE_EQ(merged.total_ms[0], 1);        // stem
  EXPECT_DOUBLE_EQ(merged.total_ms[1], 2 + 3);    // layer1.0a + layer1.0b
  EXPECT_DOUBLE_EQ(merged.total_ms[8], 16 + 17);  // layer4.1
  EXPECT_DOUBLE_EQ(merged.total_ms[9], 18);       // head
  EXPECT_DOUBLE_EQ(merged.forward_ms[1], 2.5);
  // A whole-block split as the same cuts in half-block units (each block 2).
  EXPECT_EQ(SplitInUnits({7, 3}, halves), (std::vector<int>{13, 5}));
  EXPECT_EQ(SplitInUnits({1, 8, 1}, halves), (std::vector<int>{1, 16, 1}));
  EXPECT_EQ(SplitInUnits({7, 3}, blocks), (std::vector<int>{7, 3}));
  EXPECT_THROW(SplitInUnits({7, 2}, halves), std::logic_error);
  // Deeper models' block numbers have two digits ("layer3.10a").
  EXPECT_EQ(BlockOfUnit({"stem", "layer3.10a", "layer3.10b", "layer3.11a", "layer3.11b", "head"}),
            (std::vector<int>{0, 1, 1, 2, 2, 3}));
}

TEST(Split, MoreStagesThanUnitsIsAConfigError) {
  const auto& units = Resnet18Units();
  EXPECT_NO_THROW(CheckStageCount("pmp", 10, units));
  std::string message = ConfigErrorOf([&] { CheckStageCount("pmp", 11, units); });
  EXPECT_NE(message.find("--gpus=11: pmp puts at least one unit on each device"), std::string::npos) << message;
  EXPECT_NE(message.find("accepted: --gpus=1..10"), std::string::npos) << message;
  EXPECT_NE(message.find("stem, layer1.0"), std::string::npos) << message;
}

// Without --chunks pmp costs each (micro-batch count, schedule) by its table
// simulated with the units' times at that micro-batch size.
TEST(PipelineShape, CandidatesAndPrediction) {
  // 1 (mp's shape), then divisors from the device count up.
  EXPECT_EQ(MicroBatchCandidates(32, 2), (std::vector<int>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(MicroBatchCandidates(12, 3), (std::vector<int>{1, 3, 4, 6, 12}));
  EXPECT_EQ(MicroBatchCandidates(1, 2), (std::vector<int>{1}));
  EXPECT_EQ(MicroBatchCandidates(8, 1), (std::vector<int>{1, 2, 4, 8}));
  // Batch norm at 1x1 needs 2 images a micro-batch: 16 and 32 micro-batches of 32 are left out.
  EXPECT_EQ(MicroBatchCandidates(32, 2, 2), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(MicroBatchCandidates(2, 2, 2), (std::vector<int>{1}));
  EXPECT_TRUE(MicroBatchCandidates(2, 2, 3).empty());
  // Four equal units (forward 1, backward 2) on 2 devices, 2 micro-batches:
  // 1F1B runs (M+S-1) x 6 = 18; interleaved with 4 chunks of 1 unit runs
  // (V*M+S-1) x 3 = 15.
  StagePlan plan{{2, 2}, {6, 6}, {3, 3, 3, 3}, {1, 1, 1, 1}};
  EXPECT_DOUBLE_EQ(PredictStepMs(OneFOneBTable(2, 2), plan), 18);
  StagePlan four{{1, 1, 1, 1}, {3, 3, 3, 3}, {3, 3, 3, 3}, {1, 1, 1, 1}};
  EXPECT_DOUBLE_EQ(PredictStepMs(InterleavedTable(2, 2, 2), four), 15);
}

// The schedule-aware split: the shortest simulated step over every split
// (brute force here; pruned there), for 1F1B, interleaved and zero-bubble
// tables on random unit times; and where the slowest chunk is not what sets
// the step, a faster split than BalanceSplit's.
TEST(PipelineShape, FastestSplitIsTheBruteForceBest) {
  std::mt19937 rng(11);
  auto predict = [](const PipelineTable& table, const UnitTimes& t, const std::vector<int>& counts) {
    return PredictStepMs(table, PlanOfSplit(counts, t));
  };
  for (int trial = 0; trial < 40; ++trial) {
    const int units = 4 + static_cast<int>(rng() % 6);
    UnitTimes t;
    for (int u = 0; u < units; ++u) {
      t.total_ms.push_back(1 + static_cast<double>(rng() % 60));
      t.forward_ms.push_back(t.total_ms.back() * (0.2 + 0.1 * (rng() % 5)));
    }
    const int kind = trial % 3, M = 2 * (1 + static_cast<int>(rng() % 3));
    const PipelineTable table = kind == 0   ? OneFOneBTable(2, M)
                                : kind == 1 ? InterleavedTable(2, 2, M)
                                            : ZeroBubbleH1Table(2, M);
    double best = INFINITY;
    for (const auto& counts : AllSplits(units, table.chunks())) best = std::min(best, predict(table, t, counts));
    const std::vector<int> fastest = FastestSplit(table, t);
    ASSERT_EQ(static_cast<int>(fastest.size()), table.chunks());
    EXPECT_NEAR(predict(table, t, fastest), best, 1e-9) << "trial " << trial;
    EXPECT_LE(predict(table, t, fastest), predict(table, t, BalanceSplit(t.total_ms, table.chunks())) + 1e-9);
  }
  // Interleaved, 2 devices x 2 chunks, 2 micro-batches: BalanceSplit's only
  // split with a slowest chunk of 6 is 1,1,1,2 (chunks 5,6,4,6), a step of
  // 29; 1,1,2,1 (5,6,7,3) has a slower chunk but a step of 25.
  UnitTimes t{{5, 6, 4, 3, 3}, {2.5, 3, 2, 1.5, 1.5}};
  const PipelineTable table = InterleavedTable(2, 2, 2);
  EXPECT_EQ(BalanceSplit(t.total_ms, 4), (std::vector<int>{1, 1, 1, 2}));
  EXPECT_DOUBLE_EQ(predict(table, t, {1, 1, 1, 2}), 29);
  EXPECT_EQ(FastestSplit(table, t), (std::vector<int>{1, 1, 2, 1}));
  EXPECT_DOUBLE_EQ(predict(table, t, {1, 1, 2, 1}), 25);
  // Equal units on 1F1B: the even split is already the fastest, and kept.
  UnitTimes even{{3, 3, 3, 3}, {1, 1, 1, 1}};
  EXPECT_EQ(FastestSplit(OneFOneBTable(2, 4), even), (std::vector<int>{2, 2}));
}

// Re-balancing from the warm-up: each unit's set-up time is scaled by its
// chunk's in-run/set-up ratio and the split searched again; a new split is
// taken only when predicted at least `margin` faster.
TEST(Rebalance, ASlowChunkGivesUnitsAway) {
  // Six units of 10 ms (4 forward), 3 a chunk, 1F1B on 2 devices x 4
  // micro-batches: predicted even, but chunk 1 ran twice as slow.
  const PipelineTable table = OneFOneBTable(2, 4);
  const StagePlan plan{{3, 3}, {30, 30}, {10, 10, 10, 10, 10, 10}, {4, 4, 4, 4, 4, 4}};
  ChunkTimes slow{{12, 24}, {18, 36}, {0, 0}};
  RebalancePlan r = RebalanceSplit(table, plan, slow, 0.03);
  EXPECT_EQ(r.corrected.total_ms, (std::vector<double>{10, 10, 10, 20, 20, 20}));
  EXPECT_EQ(r.corrected.forward_ms, (std::vector<double>{4, 4, 4, 8, 8, 8}));
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.counts, (std::vector<int>{4, 2}));  // 40 ms a chunk each
  auto predict = [&](const std::vector<int>& counts) {
    return PredictStepMs(table, PlanOfSplit(counts, r.corrected));
  };
  EXPECT_DOUBLE_EQ(r.current_ms, predict({3, 3}));
  EXPECT_DOUBLE_EQ(r.best_ms, predict({4, 2}));
  EXPECT_LT(r.best_ms, r.current_ms * 0.97);
  // A gain below the margin keeps the split.
  RebalancePlan kept = RebalanceSplit(table, plan, slow, 1 - r.best_ms / r.current_ms + 0.01);
  EXPECT_FALSE(kept.changed);
  EXPECT_EQ(kept.counts, plan.counts);
  EXPECT_DOUBLE_EQ(kept.best_ms, kept.current_ms);
  // Times as predicted: nothing to move.
  RebalancePlan same = RebalanceSplit(table, plan, ChunkTimes{{12, 12}, {18, 18}, {0, 0}}, 0.03);
  EXPECT_FALSE(same.changed);
  EXPECT_EQ(same.corrected.total_ms, plan.unit_ms);
  // A split backward counts B + W; here chunk 0 is the slow one.
  RebalancePlan zb = RebalanceSplit(ZeroBubbleH1Table(2, 4), plan, ChunkTimes{{24, 12}, {0.1, 9}, {35.9, 9}}, 0.03);
  EXPECT_EQ(zb.corrected.total_ms, (std::vector<double>{20, 20, 20, 10, 10, 10}));
  EXPECT_TRUE(zb.changed);
  EXPECT_EQ(zb.counts, (std::vector<int>{2, 4}));
}

TEST(PipelineShape, GivenFlagsAreKeptTheRestChosen) {
  RunConfig config;
  config.strategy = "pmp";
  config.image_size = 16;
  config.batch_size = 8;
  ResNet model = TinyResNet();
  // Nothing given: some shape the batch allows, with its measured split.
  PipelineShape open = ChoosePipelineShape(config, model, 2);
  EXPECT_EQ(8 % open.micro_batches, 0);
  EXPECT_GE(open.micro_batches, 1);  // 1 (mp's shape) is a candidate too
  EXPECT_EQ(open.plan.counts.size(), 2u * open.virtual_stages);
  EXPECT_GT(open.predicted_ms, 0);
  if (NeedsGroupsOfDevices(open.schedule)) EXPECT_EQ(open.micro_batches % 2, 0);
  if (IsVShaped(open.schedule)) EXPECT_EQ(open.virtual_stages, 2);
  else if (!IsInterleaved(open.schedule)) EXPECT_EQ(open.virtual_stages, 1);
  EXPECT_GE(open.micro_batches, MinMicroBatches(open.schedule, 2));
  EXPECT_NE(open.schedule, PipelineSchedule::kGPipe);  // never a candidate: 1F1B runs it in less memory
  // --chunks given: that count with the configured schedule.
  config.chunks = 4;
  config.schedule = "gpipe";
  PipelineShape fixed = ChoosePipelineShape(config, model, 2);
  EXPECT_EQ(fixed.micro_batches, 4);
  EXPECT_EQ(PipelineScheduleName(fixed.schedule), "gpipe");
  EXPECT_EQ(fixed.virtual_stages, 1);
  // --schedule given without --chunks: a count that schedule accepts.
  config.chunks = 0;
  config.schedule = "zero-bubble";
  config.given["--schedule"] = "zero-bubble";
  PipelineShape zb = ChoosePipelineShape(config, model, 2);
  EXPECT_EQ(zb.schedule, PipelineSchedule::kZeroBubble);
  EXPECT_GE(zb.micro_batches, 2);
  config.batch_size = 1;
  EXPECT_NE(ConfigErrorOf([&] { ChoosePipelineShape(config, model, 2); }).find("--batch-size=1 is too small"),
            std::string::npos);
}

// B then W adds the same gradients as one backward, and B's input gradient
// is the backward's, for a first chunk (no input gradient: W is the whole
// backward), a middle chunk, and a last chunk ending in the loss; under
// bf16 autocast too (weights reach the convolutions through casts); with
// group norm and with batch norm (whose parameter gradients B computes and
// W only adds).
TEST(SplitBackward, BAndWTogetherAreOneBackward) {
  ResNetOptions o;
  o.width = 4;
  o.small_input = true;
  o.num_classes = 10;
  for (auto [norm, amp] : std::vector<std::pair<NormKind, bool>>{
           {NormKind::kGroup, false}, {NormKind::kGroup, true}, {NormKind::kBatch, false}, {NormKind::kBatch, true}}) {
    o.norm = norm;
    torch::manual_seed(5);
    ResNet model(o);
    const auto dtype = amp ? torch::kFloat32 : torch::kFloat64;  // autocast leaves float64 alone
    model->to(dtype);
    std::vector<torch::nn::AnyModule> units(model->units()->begin(), model->units()->end());
    auto images = torch::randn({3, 3, 16, 16}, dtype);
    auto labels = torch::randint(0, 10, {3});
    const double rtol = amp ? 1e-3 : 1e-9;
    for (auto [first, last] : std::vector<std::pair<int, int>>{{0, 3}, {3, 7}, {7, 10}}) {
      SCOPED_TRACE(fmt::format("units {}..{} amp={} batch norm={}", first, last, amp, norm == NormKind::kBatch));
      torch::Tensor x = images;
      {
        torch::NoGradGuard no_grad;
        for (int u = 0; u < first; ++u) x = units[u].forward(x);
      }
      std::vector<torch::Tensor> params;
      for (int u = first; u < last; ++u)
        for (auto& p : units[u].ptr()->parameters()) params.push_back(p);
      auto run = [&](bool split) {
        for (auto& p : params) p.mutable_grad() = torch::Tensor();
        torch::Tensor in = x.detach().requires_grad_(first > 0);
        torch::Tensor y = in;
        {
          AutocastGuard guard(amp ? "bf16" : "off", torch::kCPU);
          for (int u = first; u < last; ++u) y = units[u].forward(y);
        }
        torch::Tensor g;  // the loss's 1 on the last chunk
        if (last == 10) {
          y = torch::nn::functional::cross_entropy(y.to(dtype), labels);
        } else {
          torch::manual_seed(9);  // the same output gradient both times
          g = torch::randn(y.sizes(), y.options());
        }
        torch::Tensor input_grad;
        if (split) {
          auto b = BackwardInput(y, g, in, params);
          input_grad = b.input_grad;
          if (first > 0)  // B leaves the parameters' gradients to W
            for (auto& p : params) EXPECT_FALSE(p.grad().defined());
          BackwardWeight(*b.weight);
        } else {
          y.backward(g);
          if (first > 0) input_grad = in.grad();
        }
        std::vector<torch::Tensor> grads;
        for (auto& p : params) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
        return std::make_pair(input_grad, grads);
      };
      auto whole = run(false);
      auto split = run(true);
      EXPECT_EQ(whole.first.defined(), first > 0);
      EXPECT_EQ(split.first.defined(), first > 0);
      if (first > 0) EXPECT_TRUE(torch::allclose(whole.first, split.first, rtol, 1e-6 * rtol));
      ASSERT_EQ(whole.second.size(), split.second.size());
      for (size_t i = 0; i < whole.second.size(); ++i) {
        ASSERT_TRUE(split.second[i].defined()) << "W left parameter " << i << " without a gradient";
        EXPECT_TRUE(torch::allclose(whole.second[i], split.second[i], rtol, 1e-6 * rtol)) << "parameter " << i;
      }
    }
  }
}

// W in pieces (--fill-waits): the parameter gradients of two micro-batches,
// each W run a node at a time with the next micro-batch's B in between, are
// bit for bit those of whole W's in the same order; a finished W does nothing.
TEST(SplitBackward, WInStepsIsWBitForBit) {
  ResNetOptions o;
  o.width = 4;
  o.small_input = true;
  o.num_classes = 10;
  o.norm = NormKind::kBatch;
  torch::manual_seed(5);
  ResNet model(o);
  model->to(torch::kFloat64);
  std::vector<torch::nn::AnyModule> units(model->units()->begin(), model->units()->end());
  std::vector<torch::Tensor> params;
  for (int u = 3; u < 7; ++u)
    for (auto& p : units[u].ptr()->parameters()) params.push_back(p);
  torch::manual_seed(8);
  const std::vector<torch::Tensor> inputs = {torch::randn({2, 4, 16, 16}, torch::kFloat64),  // layer2.0's input
                                             torch::randn({2, 4, 16, 16}, torch::kFloat64)};
  auto b_pass = [&](int m) {
    torch::Tensor in = inputs[m].clone().requires_grad_();
    torch::Tensor y = in;
    for (int u = 3; u < 7; ++u) y = units[u].forward(y);
    return BackwardInput(y, torch::ones_like(y) * (m + 1), in, params).weight;
  };
  auto grads = [&] {
    std::vector<torch::Tensor> g;
    for (auto& p : params) g.push_back(p.grad().clone());
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    return g;
  };
  auto w0 = b_pass(0);
  auto w1 = b_pass(1);
  BackwardWeight(*w0);
  BackwardWeight(*w1);
  const auto whole = grads();

  w0 = b_pass(0);
  int pieces = 1;
  EXPECT_FALSE(BackwardWeightStep(*w0));
  w1 = b_pass(1);  // the next micro-batch's B between two pieces of W
  while (!BackwardWeightStep(*w0)) ++pieces;
  EXPECT_GT(pieces, 2) << "W ran in " << pieces << " pieces";
  while (!BackwardWeightStep(*w1)) {
  }
  const auto before = params.front().grad().clone();
  EXPECT_TRUE(BackwardWeightStep(*w1));  // finished: nothing more
  BackwardWeight(*w1);
  EXPECT_TRUE(torch::equal(before, params.front().grad()));
  const auto stepped = grads();
  ASSERT_EQ(whole.size(), stepped.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_TRUE(torch::equal(whole[i], stepped[i])) << "parameter " << i;
}

// Counts the calls of the node it is attached to.
struct CallCounter : torch::autograd::FunctionPreHook {
  explicit CallCounter(int& calls) : calls_(calls) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    ++calls_;
    return grads;
  }
  int& calls_;
};

// A batch norm's backward runs once across B and W, not once in each: its
// input gradient needs the sums its parameter gradients are, so B keeps
// those for W; a convolution's runs in both (B: input, W: weight).
TEST(SplitBackward, NormalisationRunsOnceConvolutionTwice) {
  torch::manual_seed(3);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 3, 3).bias(false));
  torch::nn::BatchNorm2d bn(3);
  auto in = torch::randn({4, 2, 6, 6}).requires_grad_();
  auto y = bn(conv(in)).relu();
  int bn_calls = 0, conv_calls = 0;
  y.grad_fn()->next_edges()[0].function->add_pre_hook(std::make_unique<CallCounter>(bn_calls));
  y.grad_fn()->next_edges()[0].function->next_edges()[0].function->add_pre_hook(
      std::make_unique<CallCounter>(conv_calls));
  std::vector<torch::Tensor> params = conv->parameters();
  for (auto& p : bn->parameters()) params.push_back(p);
  auto b = BackwardInput(y, torch::ones_like(y), in, params);
  EXPECT_EQ(bn_calls, 1);
  EXPECT_EQ(conv_calls, 1);
  EXPECT_FALSE(bn->weight.grad().defined());  // W adds it
  BackwardWeight(*b.weight);
  EXPECT_EQ(bn_calls, 1);
  EXPECT_EQ(conv_calls, 2);
  ASSERT_TRUE(bn->weight.grad().defined());
  ASSERT_TRUE(bn->bias.grad().defined());
  EXPECT_TRUE(conv->weight.grad().defined());
  // The same gradients as one backward.
  auto w = bn->weight.grad().clone(), c = conv->weight.grad().clone();
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  bn(conv(in)).relu().backward(torch::ones_like(y));
  EXPECT_TRUE(torch::allclose(w, bn->weight.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(c, conv->weight.grad(), 1e-5, 1e-6));
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
  Mailbox<int, int> channel;
  try {
    workers.RunAll([&](int i) {
      if (i == 2) {
        channel.Close();
        throw std::runtime_error("stage 2 failed");
      }
      channel.Pop(0);  // would wait for ever without Close
    });
    FAIL() << "no exception";
  } catch (const PipelineAborted&) {
    FAIL() << "the abort was rethrown instead of the failure";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stage 2 failed");
  }
  channel.Reset();
  channel.Push(1, 5);
  channel.Push(0, 4);
  EXPECT_EQ(channel.Pop(1), 5);  // by key, not in push order
  EXPECT_EQ(channel.Pop(0), 4);
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
        // --overlap-optimizer: each parameter stepped as its last micro-batch's gradient lands (overlap_step.h).
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=1f1b --overlap-optimizer",
             "resnet18 norm=group amp=off dtype=float64"},
        // Three stages, uneven explicit split, more micro-batches than stages.
        Case{"--strategy=pmp --gpus=3 --oversubscribe --split=2,5,3 --batch-size=12 --chunks=6 --schedule=1f1b",
                   "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=mp --gpus=3 --oversubscribe --balance=time --batch-size=8 --overlap-optimizer",
             "resnet18 norm=batch amp=off dtype=float64"},
        Case{"--strategy=dp --gpus=3 --oversubscribe --batch-size=4", "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=2 --optimizer=adam --lr=0.001",
             "resnet18 norm=group amp=off dtype=float64"},
        // Zero-bubble on 3 oversubscribed devices: waits that pending W's fill (--fill-waits=on).
        Case{"--strategy=pmp --gpus=3 --oversubscribe --batch-size=12 --chunks=6 --schedule=zero-bubble --optimizer=adam "
             "--lr=0.001 --overlap-optimizer", "resnet18 norm=group amp=off dtype=float64"},
        // Half-block units: a stage boundary inside a residual block (layer3.0a | layer3.0b).
        Case{"--strategy=pmp --gpus=2 --units=half-blocks --split=10,8 --batch-size=8 --chunks=4 --schedule=zero-bubble",
             "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=mp --gpus=2 --units=half-blocks --split=10,8 --batch-size=8",
             "resnet18 norm=batch amp=off dtype=float64"},
        // The looped and V schedules, on 2 and 3 devices, SGD and Adam.
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=looped-bfs",
             "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=3 --oversubscribe --batch-size=6 --chunks=3 --schedule=looped-bfs --optimizer=adam "
             "--lr=0.001", "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=zbv", "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=3 --oversubscribe --batch-size=12 --chunks=6 --schedule=zbv --optimizer=adam "
             "--lr=0.001", "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=dualpipev --optimizer=adam --lr=0.001",
             "resnet18 norm=group amp=off dtype=float64"},
        Case{"--strategy=pmp --gpus=3 --oversubscribe --batch-size=12 --chunks=6 --schedule=dualpipev --overlap-optimizer",
             "resnet18 norm=group amp=off dtype=float64"}),
    CaseName);

TEST(Row, PmpRecordsSplitScheduleAndBubble) {
  for (std::string schedule : {"gpipe", "1f1b"}) {
    auto r = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --balance=params --schedule=" + schedule);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Row& row = r.row;
    EXPECT_EQ(row.at("split"), "8,2");
    EXPECT_EQ(row.at("split_setup"), "8,2");  // --balance=params: nothing re-balanced
    EXPECT_EQ(row.at("units"), "blocks");
    EXPECT_EQ(row.at("chunks"), "4");
    EXPECT_EQ(row.at("schedule"), schedule);
    EXPECT_EQ(row.at("global_batch"), "8");
    EXPECT_NEAR(std::stod(row.at("bubble_theory")), 1.0 / (4 + 2 - 1), 1e-4);
    const double bubble = std::stod(row.at("bubble_measured"));
    EXPECT_GE(bubble, 0.0);
    EXPECT_LT(bubble, 1.0);
    // The table on ideal devices with the measured stage times: unequal
    // stages only add idle time to the equal-stage figure (GPipe and 1F1B).
    const double simulated = std::stod(row.at("bubble_simulated"));
    EXPECT_GE(simulated, std::stod(row.at("bubble_theory")) - 1e-4) << schedule;
    EXPECT_LT(simulated, 1.0) << schedule;
    auto busy = Numbers(row.at("stage_busy_ms"));
    ASSERT_EQ(busy.size(), 2u);
    for (double b : busy) EXPECT_GT(b, 0);
    // Each timed step's busiest over least busy device (median/largest): at
    // least 1, and the whole run's ratio (sums over the steps) no larger than
    // the largest step's (stage_busy_ms is rounded to 0.1 ms).
    auto step_ratio = Numbers(row.at("stage_busy_step_ratio"));
    ASSERT_EQ(step_ratio.size(), 2u) << row.at("stage_busy_step_ratio");
    EXPECT_GE(step_ratio[0], 1.0);
    EXPECT_GE(step_ratio[1], step_ratio[0]);
    EXPECT_LE((std::max(busy[0], busy[1]) - 0.05) / (std::min(busy[0], busy[1]) + 0.05), step_ratio[1] + 1e-3);
    EXPECT_EQ(Numbers(row.at("stage_time_ms")).size(), 2u);
    for (double mb : Numbers(row.at("activation_peak_mb"))) EXPECT_GT(mb, 0);
    EXPECT_EQ(row.at("virtual_stages"), "1");
    ExpectMemoryPerDevice(row, 2);
    EXPECT_NE(r.output.find("pmp split (balanced by parameter count): stem..layer4.0 | layer4.1..head = 8,2"),
              std::string::npos) << r.output;
  }
}

// Zero-bubble's theory is its table simulated with the measured F/B/W: the
// same figure as bubble_simulated.
TEST(Row, ZeroBubbleTheoryIsItsSimulation) {
  auto r = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=zero-bubble");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.row.at("bubble_simulated"), r.row.at("bubble_theory"));
  EXPECT_GE(std::stod(r.row.at("bubble_simulated")), 0.0);
  EXPECT_LT(std::stod(r.row.at("bubble_simulated")), 1.0);
  const std::string fbw = r.row.at("chunk_fbw_ms");  // F:B:W on each of the 2 chunks
  EXPECT_EQ(std::count(fbw.begin(), fbw.end(), ':'), 4) << fbw;
  // --fill-waits=on (the default on CPU): each device's W run in waits.
  const auto fill = Numbers(r.row.at("w_fill_ms"));
  ASSERT_EQ(fill.size(), 2u) << r.row.at("w_fill_ms");
  for (double ms : fill) EXPECT_GE(ms, 0);
  auto off = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=zero-bubble --fill-waits=off");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(off.row.at("w_fill_ms"), "");
}

// pmp zero-bubble with Adam, 2 warm-up steps and --rebalance=warmup, the
// re-split forced to `split`, `flags` added, and float64 --verify over 4 steps
// (two before the move, two after); `env`: test hooks set during the run.
RunResult RunForcedRebalance(const std::string& split, const std::string& flags,
                             std::vector<std::pair<std::string, std::string>> env = {}) {
  env.emplace_back("DDPBENCH_TEST_REBALANCE_SPLIT", split);
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  TempDir dir;
  auto r = RunDdpbench(
      " --device=cpu --small-input --width=8 --image-size=16 --num-classes=10 --progress=off --steps=2 --warmup=2"
      " --strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=zero-bubble --optimizer=adam --lr=0.001"
      " --rebalance=warmup --verify --verify-steps=4 --verify-tolerance=1e-4 " + flags + " --out=" + dir.File("r.csv"));
  for (const auto& [name, value] : env) ::unsetenv(name.c_str());
  RunResult result{r.exit_code, r.output, {}};
  if (r.exit_code == 0) {
    const auto rows = ReadRows(dir.File("r.csv"));
    EXPECT_EQ(rows.size(), 1u);
    if (!rows.empty()) result.row = rows.front();
  }
  return result;
}

// A re-cut after the warm-up moves units, and their Adam state, to their new
// devices: float64 parity with single holds across it (two steps before,
// two after), and the row keeps both splits. The move is forced: whether
// the measured times call for one depends on the machine.
TEST(Rebalance, MovingUnitsKeepsParityAndOptimizerState) {
  auto r = RunForcedRebalance("2,8", "--units=blocks --overlap-optimizer");  // the overlap follows the move
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectParity(r, "resnet18 norm=group amp=off dtype=float64");
  EXPECT_EQ(r.row.at("split"), "2,8");
  EXPECT_NE(r.row.at("split_setup"), "2,8");
  EXPECT_EQ(Numbers(r.row.at("stage_time_ms")).size(), 2u);
  ExpectMemoryPerDevice(r.row, 2);
  EXPECT_NE(r.output.find("pmp rebalance: warm-up chunk ms "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": moving units"), std::string::npos) << r.output;
  // Every parameter step came from its hook, across the move: 62 parameters x 4 steps (in
  // the run and again in --verify's), none left to the end of a row.
  EXPECT_NE(r.output.find("--overlap-optimizer: 248 parameter steps as their last gradient landed, 0 after"),
            std::string::npos)
      << r.output;
}

// --units=auto (the default): pmp measures half blocks and runs whichever
// units its cost model prefers; the row names them, and the parity reference
// is built in the same units (half blocks order a downsampling block's
// parameters differently). The choice is forced here: which wins depends on
// the machine's times.
TEST(Row, AutoUnitsRunWhicheverWinsWithParity) {
  for (std::string units : {"half-blocks", "blocks"}) {
    ::setenv("DDPBENCH_TEST_AUTO_UNITS", units.c_str(), 1);
    auto r = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --schedule=zero-bubble --optimizer=adam "
                    "--lr=0.001 --verify --verify-tolerance=1e-4");
    ::unsetenv("DDPBENCH_TEST_AUTO_UNITS");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ExpectParity(r, "resnet18 norm=group amp=off dtype=float64");
    EXPECT_EQ(r.row.at("units"), units);
    const std::string split = r.row.at("split");  // "a,b"
    const size_t comma = split.find(',');
    ASSERT_NE(comma, std::string::npos) << split;
    EXPECT_EQ(std::stoi(split.substr(0, comma)) + std::stoi(split.substr(comma + 1)), units == "half-blocks" ? 18 : 10)
        << split;
    EXPECT_NE(r.output.find("pmp shape: --chunks=4 --schedule=zero-bubble split"), std::string::npos) << r.output;
    // The log names the units not taken, with their split and predicted step.
    EXPECT_NE(r.output.find(units == "blocks" ? " ms; half blocks " : " ms; whole blocks "), std::string::npos)
        << r.output;
  }
  // Shapes are checked against whole blocks, as with --units=blocks.
  auto bad = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --schedule=interleaved --virtual-stages=6");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--virtual-stages=6: --gpus=2 x 6 = 12 model chunks, but the model has only 10 units"),
            std::string::npos) << bad.output;
}

// --rebalance=warmup with --units=auto keeps the model in half blocks where
// whole blocks win at set-up (forced here), cut between blocks, so that the
// re-split can move half a block (forced: 4,14 cuts inside layer1.1). Float64
// parity with Adam holds across the move.
TEST(Rebalance, AutoUnitsKeepHalfBlocksToMoveHalfABlock) {
  auto r = RunForcedRebalance("4,14", "", {{"DDPBENCH_TEST_AUTO_UNITS", "blocks"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectParity(r, "resnet18 norm=group amp=off dtype=float64");
  EXPECT_EQ(r.row.at("units"), "half-blocks");
  EXPECT_EQ(r.row.at("split"), "4,14");
  // The set-up cut falls between blocks: the stem and whole blocks' halves.
  const int first = std::stoi(r.row.at("split_setup"));
  EXPECT_EQ(first % 2, 1) << r.row.at("split_setup");
  EXPECT_NE(r.output.find("pmp units: half blocks kept for --rebalance=warmup"), std::string::npos) << r.output;
}

// --rebalance=auto (the default) re-splits where each device holds one chunk
// and not with interleaving; never with a given split or too short a warm-up.
TEST(Rebalance, AutoAppliesWithOneChunkPerDevice) {
  RunConfig c;
  c.strategy = "pmp";
  c.warmup = 5;
  EXPECT_EQ(c.rebalance, "auto");
  EXPECT_TRUE(RebalanceApplies(c, 1));
  EXPECT_FALSE(RebalanceApplies(c, 2));
  c.rebalance = "warmup";
  EXPECT_TRUE(RebalanceApplies(c, 2));
  c.rebalance = "off";
  EXPECT_FALSE(RebalanceApplies(c, 1));
  c.rebalance = "auto";
  c.warmup = 1;
  EXPECT_FALSE(RebalanceApplies(c, 1));
  c.warmup = 5;
  c.split = "7,3";
  EXPECT_FALSE(RebalanceApplies(c, 1));
  c.split.clear();
  c.balance = "params";
  EXPECT_FALSE(RebalanceApplies(c, 1));
}

TEST(Row, PmpWithoutChunksRecordsTheChosenShape) {
  auto r = RunRow("--strategy=pmp --gpus=2 --batch-size=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int M = std::stoi(r.row.at("chunks"));
  EXPECT_EQ(8 % M, 0);
  const std::set<std::string> chosen = {"1f1b",       "zero-bubble", "interleaved", "interleaved-zero-bubble",
                                        "looped-bfs", "zbv",         "dualpipev"};
  EXPECT_TRUE(chosen.count(r.row.at("schedule"))) << r.row.at("schedule");
  EXPECT_EQ(Numbers(r.row.at("stage_time_ms")).size(), 2u * std::stoul(r.row.at("virtual_stages")));
  EXPECT_NE(r.output.find("pmp shape: --chunks=2 --schedule=1f1b"), std::string::npos) << r.output;
}

// Shape trials: the strongest candidates run a few steps each and the row
// runs the one logged as kept; the maths is single's (float64 parity); 0
// turns them off and a bad count is refused.
TEST(Row, PmpShapeTrialsRunTheKeptShape) {
  auto r = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --norm=group --verify --verify-tolerance=1e-4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectParity(r, "resnet18 norm=group amp=off dtype=float64");
  // The row runs a shape some trial kept (the float64 parity run chooses its
  // own, which may differ where shapes measure alike).
  const std::string shape = "--chunks=" + r.row.at("chunks") + " --schedule=" + r.row.at("schedule") + " ";
  std::string trial;
  for (size_t kept = r.output.find(" (kept)"); kept != std::string::npos; kept = r.output.find(" (kept)", kept + 1)) {
    const size_t line = r.output.rfind("pmp trial: ", kept);
    ASSERT_NE(line, std::string::npos) << r.output;
    if (r.output.substr(line, kept - line).find(shape) != std::string::npos) trial = r.output.substr(line, kept - line);
  }
  ASSERT_FALSE(trial.empty()) << shape << " kept by no trial: " << r.output;
  EXPECT_NE(trial.find("measured "), std::string::npos) << trial;
  size_t trials = 0;
  for (size_t at = r.output.find("pmp trial: "); at != std::string::npos; at = r.output.find("pmp trial: ", at + 1))
    ++trials;
  EXPECT_GE(trials, 2u) << r.output;
  EXPECT_NE(r.output.find("pmp trial: --chunks=1 --schedule=1f1b "), std::string::npos) << r.output;  // mp's shape

  auto off = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --shape-trials=0");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(off.output.find("pmp trial: "), std::string::npos) << off.output;
  auto given = RunRow("--strategy=pmp --gpus=2 --batch-size=8 --chunks=2 --schedule=1f1b --split=5,5");
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(given.output.find("pmp trial: "), std::string::npos) << given.output;  // nothing left open
  for (const char* bad : {"-1", "65"}) {
    auto b = RunRow(std::string("--strategy=pmp --gpus=2 --batch-size=8 --shape-trials=") + bad);
    EXPECT_EQ(b.exit_code, 2) << b.output;
    EXPECT_NE(b.output.find(std::string("--shape-trials=") + bad + ": must be at"), std::string::npos) << b.output;
    EXPECT_TRUE(b.row.empty());
  }
  auto mp = RunRow("--strategy=mp --gpus=2 --batch-size=8 --shape-trials=2");
  EXPECT_EQ(mp.exit_code, 2) << mp.output;
  EXPECT_NE(mp.output.find("--shape-trials=2: applies only to --strategy=pmp"), std::string::npos) << mp.output;
}

TEST(Row, MpRecordsTheSplitUsedAndDpTheGlobalBatch) {
  auto mp = RunRow("--strategy=mp --gpus=2 --batch-size=8 --split=4,6");
  ASSERT_EQ(mp.exit_code, 0) << mp.output;
  EXPECT_EQ(mp.row.at("split"), "4,6");
  EXPECT_EQ(mp.row.at("chunks"), "1");
  EXPECT_EQ(mp.row.at("schedule"), "");
  EXPECT_NEAR(std::stod(mp.row.at("bubble_theory")), 0.5, 1e-9);
  // One micro-batch: one device works at a time whatever the stage times.
  EXPECT_NEAR(std::stod(mp.row.at("bubble_simulated")), 0.5, 1e-4);
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
        Case{"--strategy=pmp --gpus=2 --split=3,3,4", "--split=3,3,4: 3 counts for 2 stages"},
        Case{"--strategy=pmp --gpus=2 --schedule=interleaved --virtual-stages=2 --split=5,5",
             "--split=5,5: 2 counts for 4 stages; accepted: 4 comma-separated unit counts >= 1 (one per stage, --gpus=2 x --virtual-stages=2)"},
        Case{"--strategy=pmp --gpus=2 --schedule=interleaved --virtual-stages=6",
             "--virtual-stages=6: --gpus=2 x 6 = 12 model chunks, but the model has only 10 units"},
        Case{"--strategy=pmp --gpus=3 --oversubscribe --batch-size=12 --chunks=4 --schedule=interleaved",
             "--chunks=4: --schedule=interleaved takes micro-batches in groups of --gpus=3; accepted: a multiple of 3"},
        Case{"--strategy=pmp --gpus=3 --oversubscribe --batch-size=8 --chunks=2 --schedule=zero-bubble",
             "--chunks=2: --schedule=zero-bubble needs at least 3 micro-batches on --gpus=3 (one per device); accepted: --chunks>=3"},
        Case{"--strategy=pmp --gpus=2 --schedule=gpipe --virtual-stages=2",
             "--virtual-stages=2: applies only to --schedule=interleaved|interleaved-zero-bubble|looped-bfs (and 2 to "
             "zbv|dualpipev), not to --schedule=gpipe"},
        Case{"--strategy=pmp --gpus=2 --schedule=zbv --virtual-stages=3",
             "--virtual-stages=3: --schedule=zbv places exactly 2 chunks per device in a V; accepted: --virtual-stages=2"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=2 --schedule=dualpipev",
             "--chunks=2: --schedule=dualpipev needs at least 4 micro-batches on --gpus=2 (one per stage of its V); "
             "accepted: --chunks>=4"},
        Case{"--strategy=pmp --gpus=2 --batch-size=2 --schedule=dualpipev",
             "--schedule=dualpipev: needs at least 4 micro-batches on --gpus=2, but --batch-size=2 is too small"},
        Case{"--strategy=pmp --gpus=6 --oversubscribe --schedule=zbv",
             "--schedule=zbv: places 2 chunks per device in a V: --gpus=6 x 2 = 12 model chunks, but the model has "
             "only 10 units; accepted: --gpus<=5"},
        Case{"--strategy=dp --gpus=2 --chunks=4", "--chunks=4: applies only to --strategy=pmp, not to --strategy=dp"},
        Case{"--strategy=mp --gpus=2 --schedule=1f1b", "--schedule=1f1b: applies only to --strategy=pmp, not to --strategy=mp"},
        Case{"--strategy=mp --gpus=2 --bucket-cap-mb=1", "--bucket-cap-mb=1: applies only to --strategy=ddp|zero1|zero2|zero3|hsdp"},
        Case{"--strategy=dp --gpus=2 --split=5,5", "--split=5,5: applies only to --strategy=mp|pmp"},
        Case{"--strategy=mp --gpus=2 --split=4,x", "--split=4,x"},
        Case{"--strategy=pmp --gpus=2 --schedule=zb", "--schedule=zb: not accepted; accepted values: gpipe|1f1b|interleaved|zero-bubble|interleaved-zero-bubble"},
        Case{"--strategy=mp --gpus=2 --balance=flops", "--balance=flops"},
        Case{"--strategy=dp --gpus=1000", "--gpus=1000 x --threads-per-device=1: 1000 threads but this machine has"},
        Case{"--strategy=pmp --gpus=2 --chunks=3 --verify --batch-size=8", "--chunks=3"},
        Case{"--strategy=pmp --gpus=2 --rebalance=later", "--rebalance=later: not accepted; accepted values: auto|off|warmup"},
        Case{"--strategy=pmp --gpus=2 --rebalance=warmup",
             "--rebalance=warmup with --warmup=1: needs at least 2 warm-up steps"},
        Case{"--strategy=pmp --gpus=2 --rebalance=warmup --split=7,3",
             "--rebalance=warmup with --split=7,3: a given split is run as given; accepted: --rebalance=off"},
        Case{"--strategy=pmp --gpus=2 --rebalance=warmup --balance=params",
             "--rebalance=warmup with --balance=params: re-balancing moves units by measured time"},
        Case{"--strategy=mp --gpus=2 --rebalance=off", "--rebalance=off: applies only to --strategy=pmp, not to --strategy=mp"},
        Case{"--strategy=pmp --gpus=2 --fill-waits=maybe", "--fill-waits=maybe: not accepted; accepted values: on|off"},
        Case{"--strategy=pmp --gpus=2 --schedule=1f1b --fill-waits=on",
             "--fill-waits=on with --schedule=1f1b: only the zero-bubble schedules have W's to fill waits with"},
        Case{"--strategy=mp --gpus=2 --fill-waits=off", "--fill-waits=off: applies only to --strategy=pmp, not to --strategy=mp"},
        Case{"--strategy=pmp --gpus=2 --batch-size=8 --chunks=4 --fill-waits=off",
             "--fill-waits=off with --schedule=1f1b (the default with --chunks): only the zero-bubble schedules"}),
    CaseName);

}  // namespace
}  // namespace ddpbench
