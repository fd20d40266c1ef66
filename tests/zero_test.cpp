// The sharded strategies (zero1, zero2, zero3): the partition of the flat
// parameter buffer, by size and by unit (every element owned by exactly one
// rank, equal shares, aligned non-overlapping parameters, uneven sizes, world
// 1, more ranks than elements, bad values), that stepping the optimizer on
// each rank's flat slices is the per-parameter update, the ZeRO paper's
// memory formula, every stage at world 1 against single (float64), zero3's
// gather/free accounting, and the flag checks. Several ranks are checked end
// to end by tests/e2e/zero1_cli.sh and tests/e2e/zero23_cli.sh.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "app/cli.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "models/resnet.h"
#include "strategies/registry.h"
#include "planning/zero_memory.h"
#include "planning/zero_partition.h"

namespace ddpbench {
namespace {

// Checks every invariant of `p` for the input `numels` and returns, per rank,
// the number of parameter (non-padding) elements it owns.
std::vector<int64_t> CheckPartition(const ZeroPartition& p, const std::vector<int64_t>& numels, int world,
                                    int64_t align) {
  EXPECT_EQ(p.world, world);
  EXPECT_EQ(p.slots.size(), numels.size());
  // Buckets tile the buffer: contiguous, each world equal non-empty slices.
  int64_t offset = 0;
  for (const auto& b : p.buckets) {
    EXPECT_EQ(b.offset, offset);
    EXPECT_GE(b.shard_numel, 1);
    EXPECT_EQ(b.numel, b.shard_numel * world);
    EXPECT_EQ(b.shard_numel % align, 0) << "slices start aligned";
    offset += b.numel;
  }
  EXPECT_EQ(offset, p.total_numel);
  EXPECT_EQ(p.ShardNumel() * world, p.total_numel);

  // Exactly-once ownership: every element of the buffer lies in exactly one
  // rank's slices, and OwnerOf agrees.
  std::vector<int> owners(p.total_numel, 0);
  for (int r = 0; r < world; ++r) {
    for (const auto& b : p.buckets) {
      for (int64_t i = b.SliceBegin(r); i < b.SliceBegin(r) + b.shard_numel; ++i) {
        ++owners[i];
        if (p.OwnerOf(i) != r) {
          ADD_FAILURE() << "element " << i << ": OwnerOf says " << p.OwnerOf(i) << ", slices say " << r;
          return {};
        }
      }
    }
  }
  for (int64_t i = 0; i < p.total_numel; ++i)
    if (owners[i] != 1) {
      ADD_FAILURE() << "element " << i << " owned " << owners[i] << " times";
      return {};
    }

  // Parameters: aligned, inside their bucket, each listed once by it, in
  // input order, and no two overlapping.
  std::vector<int> covered(p.total_numel, 0);
  std::vector<int> listed(numels.size(), 0);
  for (size_t bi = 0; bi < p.buckets.size(); ++bi) {
    const auto& b = p.buckets[bi];
    EXPECT_FALSE(b.params.empty());
    EXPECT_TRUE(std::is_sorted(b.params.begin(), b.params.end()));
    for (size_t i : b.params) {
      ++listed.at(i);
      EXPECT_EQ(p.slots[i].bucket, static_cast<int64_t>(bi));
    }
  }
  std::vector<int64_t> owned(world, 0);
  for (size_t i = 0; i < numels.size(); ++i) {
    const ZeroSlot& s = p.slots[i];
    EXPECT_EQ(listed[i], 1) << "parameter " << i;
    EXPECT_EQ(s.numel, numels[i]);
    EXPECT_EQ(s.offset % align, 0) << "parameter " << i;
    const auto& b = p.buckets.at(s.bucket);
    EXPECT_GE(s.offset, b.offset);
    EXPECT_LE(s.offset + s.numel, b.offset + b.numel);
    for (int64_t e = s.offset; e < s.offset + s.numel; ++e) {
      ++covered[e];
      ++owned[p.OwnerOf(e)];
    }
  }
  for (int64_t i = 0; i < p.total_numel; ++i) EXPECT_LE(covered[i], 1) << "parameters overlap at " << i;
  EXPECT_EQ(std::accumulate(owned.begin(), owned.end(), int64_t{0}),
            std::accumulate(numels.begin(), numels.end(), int64_t{0}));
  return owned;
}

TEST(ZeroPartition, UnevenSizesManyBucketsExactlyOnce) {
  const std::vector<int64_t> numels = {1, 1000003, 7, 0, 13, 64, 65, 3, 250000, 1};
  for (int world : {1, 2, 3, 4, 7})
    for (int64_t align : {1, 16}) {
      SCOPED_TRACE(::testing::Message() << "world " << world << " align " << align);
      // A 100-byte cap: nearly one bucket per parameter; a 1 MB cap: a few.
      for (int64_t cap : {int64_t{100}, int64_t{1} << 20}) {
        auto p = PartitionForZero(numels, 4, cap, cap, world, align);
        CheckPartition(p, numels, world, align);
      }
    }
}

TEST(ZeroPartition, BucketsCloseAtTheCapAndTheFirstHasItsOwn) {
  // 4-byte elements, 400-byte cap: a bucket closes once it holds >= 100
  // elements; the first closes at >= 10 (its own 40-byte cap).
  auto p = PartitionForZero({6, 6, 50, 60, 200, 1, 1}, 4, 400, 40, 2);
  ASSERT_EQ(p.buckets.size(), 4u);
  EXPECT_EQ(p.buckets[0].params, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(p.buckets[1].params, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(p.buckets[2].params, (std::vector<size_t>{4}));  // larger than the cap: alone
  EXPECT_EQ(p.buckets[3].params, (std::vector<size_t>{5, 6}));
  EXPECT_EQ(p.buckets[0].numel, 12);
  EXPECT_EQ(p.buckets[3].numel, 2);
  CheckPartition(p, {6, 6, 50, 60, 200, 1, 1}, 2, 1);
}

TEST(ZeroPartition, BalancedByBytesOnAResNet) {
  // ResNet-18's trainable parameters in gradient-ready order, the default
  // 25 MB buckets with a 1 MiB first one, 64-byte alignment.
  torch::manual_seed(0);
  ResNetOptions options;
  options.width = 32;
  ResNet model(options);
  std::vector<int64_t> numels;
  for (const auto& t : model->parameters()) numels.push_back(t.numel());
  std::reverse(numels.begin(), numels.end());
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  for (int world : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    auto p = PartitionForZero(numels, 4, 25 << 20, 1 << 20, world, 16);
    auto owned = CheckPartition(p, numels, world, 16);
    ASSERT_EQ(owned.size(), static_cast<size_t>(world));
    // Every rank holds the same number of elements; padding is under 0.1%,
    // so the parameter bytes each rank owns are within 0.1% of 1/world.
    EXPECT_LT(p.total_numel - total, total / 1000);
    for (int64_t o : owned)
      EXPECT_NEAR(static_cast<double>(o), static_cast<double>(total) / world, total / 1000.0);
  }
}

TEST(ZeroPartition, ByGroupGivesOneBucketPerGroup) {
  // zero3's layout: parameters in model order, one bucket per unit.
  const std::vector<int64_t> numels = {7, 1, 1000, 3, 0, 64, 5, 11};
  const std::vector<int64_t> groups = {0, 0, 1, 1, 1, 3, 3, 4};
  for (int world : {1, 2, 3})
    for (int64_t align : {1, 16}) {
      SCOPED_TRACE(::testing::Message() << "world " << world << " align " << align);
      auto p = PartitionForZeroByGroup(numels, groups, world, align);
      CheckPartition(p, numels, world, align);
      ASSERT_EQ(p.buckets.size(), 4u);
      EXPECT_EQ(p.buckets[0].params, (std::vector<size_t>{0, 1}));
      EXPECT_EQ(p.buckets[1].params, (std::vector<size_t>{2, 3, 4}));
      EXPECT_EQ(p.buckets[2].params, (std::vector<size_t>{5, 6}));
      EXPECT_EQ(p.buckets[3].params, (std::vector<size_t>{7}));
    }
  EXPECT_THROW(PartitionForZeroByGroup({1, 2}, {0}, 2), std::invalid_argument);
  EXPECT_THROW(PartitionForZeroByGroup({1, 2}, {1, 0}, 2), std::invalid_argument);
  EXPECT_THROW(PartitionForZeroByGroup({1, 2}, {0, 1}, 0), std::invalid_argument);
  EXPECT_THROW(PartitionForZeroByGroup({1, -2}, {0, 1}, 2), std::invalid_argument);
}

TEST(ZeroPartition, WorldOneOwnsEverything) {
  const std::vector<int64_t> numels = {5, 17, 3};
  auto p = PartitionForZero(numels, 4, 1 << 20, 1 << 20, 1);
  auto owned = CheckPartition(p, numels, 1, 1);
  ASSERT_EQ(p.buckets.size(), 1u);
  EXPECT_EQ(p.total_numel, 25);  // no padding
  EXPECT_EQ(p.ShardNumel(), 25);
  EXPECT_EQ(owned, (std::vector<int64_t>{25}));
}

TEST(ZeroPartition, MoreRanksThanElements) {
  auto p = PartitionForZero({3}, 4, 1 << 20, 1 << 20, 8);
  auto owned = CheckPartition(p, {3}, 8, 1);
  ASSERT_EQ(p.buckets.size(), 1u);
  EXPECT_EQ(p.buckets[0].shard_numel, 1);
  EXPECT_EQ(owned, (std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0, 0}));  // ranks 3..7 own padding only
  // Zero-sized parameters still get a bucket with a slice for every rank.
  auto z = PartitionForZero({0, 0}, 4, 1 << 20, 1 << 20, 3);
  CheckPartition(z, {0, 0}, 3, 1);
  EXPECT_EQ(z.total_numel, 3);
  // No parameters: no buckets.
  auto none = PartitionForZero({}, 4, 1 << 20, 1 << 20, 2);
  EXPECT_TRUE(none.buckets.empty());
  EXPECT_EQ(none.total_numel, 0);
  EXPECT_EQ(none.ShardNumel(), 0);
}

TEST(ZeroPartition, BadValues) {
  EXPECT_THROW(PartitionForZero({4}, 4, 100, 100, 0), std::invalid_argument);
  EXPECT_THROW(PartitionForZero({4}, 4, 100, 100, -2), std::invalid_argument);
  EXPECT_THROW(PartitionForZero({4, -1}, 4, 100, 100, 2), std::invalid_argument);
  EXPECT_THROW(PartitionForZero({4}, 0, 100, 100, 2), std::invalid_argument);
  EXPECT_THROW(PartitionForZero({4}, 4, 0, 100, 2), std::invalid_argument);
  EXPECT_THROW(PartitionForZero({4}, 4, 100, -1, 2), std::invalid_argument);
  EXPECT_THROW(PartitionForZero({4}, 4, 100, 100, 2, 0), std::invalid_argument);
  try {
    PartitionForZero({4}, 4, 100, 100, 0);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("world size 0"), std::string::npos) << e.what();
  }
  auto p = PartitionForZero({4}, 4, 100, 100, 2);
  EXPECT_THROW(p.OwnerOf(-1), std::out_of_range);
  EXPECT_THROW(p.OwnerOf(p.total_numel), std::out_of_range);
}

// What zero1 relies on: SGD with momentum and Adam (with weight decay) are
// element-wise, so N optimizers stepping the N ranks' flat slices of a padded
// buffer produce the per-parameter optimizer's parameters exactly.
TEST(ZeroOptimizer, ShardedFlatStepsEqualPerParameterSteps) {
  torch::manual_seed(1);
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {7}, {2, 3, 4}, {1}, {11}};
  for (const std::string name : {"sgd", "adam"}) {
    SCOPED_TRACE(name);
    RunConfig config;
    config.optimizer = name;
    config.weight_decay = 0.01;
    std::vector<torch::Tensor> ref;
    std::vector<int64_t> numels;
    for (const auto& s : shapes) {
      ref.push_back(torch::randn(s));
      numels.push_back(ref.back().numel());
    }
    const int world = 3;
    auto p = PartitionForZero(numels, 4, 40, 40, world, 2);
    auto flat = torch::zeros({p.total_numel});
    auto flat_grad = torch::zeros({p.total_numel});
    for (size_t i = 0; i < ref.size(); ++i)
      flat.narrow(0, p.slots[i].offset, numels[i]).copy_(ref[i].flatten());
    for (auto& t : ref) t.requires_grad_(true);
    auto reference = MakeOptimizer(config, ref, 0.05);
    std::vector<std::unique_ptr<torch::optim::Optimizer>> ranks;
    for (int r = 0; r < world; ++r) {
      std::vector<torch::Tensor> shards;
      for (const auto& b : p.buckets) {
        auto shard = flat.narrow(0, b.SliceBegin(r), b.shard_numel).detach();
        shard.mutable_grad() = flat_grad.narrow(0, b.SliceBegin(r), b.shard_numel);
        shards.push_back(shard);
      }
      ranks.push_back(MakeOptimizer(config, shards, 0.05));
    }
    for (int step = 0; step < 4; ++step) {
      flat_grad.zero_();
      for (size_t i = 0; i < ref.size(); ++i) {
        auto g = torch::randn(ref[i].sizes());
        ref[i].mutable_grad() = g.clone();
        flat_grad.narrow(0, p.slots[i].offset, numels[i]).copy_(g.flatten());
      }
      reference->step();
      for (auto& o : ranks) o->step();
    }
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_TRUE(torch::allclose(flat.narrow(0, p.slots[i].offset, numels[i]), ref[i].detach().flatten(),
                                  1e-6, 1e-7))
          << "parameter " << i;
    // Each rank's state covers only its slices: 1/world of the buffer per state tensor.
    const double per_state = name == "adam" ? 2 : 1;
    for (auto& o : ranks)
      EXPECT_DOUBLE_EQ(OptimizerStateMb(*o), per_state * p.ShardNumel() * 4 / (1024.0 * 1024.0));
  }
}

TEST(ZeroMemory, PaperFormula) {
  // Mixed-precision Adam as in the paper: 2 + 2 + 12 bytes per parameter.
  const auto mixed = BytesPerParameter("adam", 0.9, 4, /*master_copy=*/true);
  EXPECT_EQ(mixed.param, 2);
  EXPECT_EQ(mixed.grad, 2);
  EXPECT_EQ(mixed.optimizer, 12);
  const int64_t psi = int64_t{1} << 20;  // 1 Mi parameters: bytes per parameter = MiB
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(0, psi, 4, mixed), 16);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(1, psi, 4, mixed), 4 + 12 / 4.0);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(2, psi, 4, mixed), 2 + 14 / 4.0);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(3, psi, 4, mixed), 16 / 4.0);
  // What ddpbench holds: weights and gradients in the model's dtype, no master copy.
  const auto adam = BytesPerParameter("adam", 0.9, 4);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(0, psi, 2, adam), 16);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(1, psi, 2, adam), 8 + 8 / 2.0);
  const auto sgd = BytesPerParameter("sgd", 0.9, 4);
  EXPECT_EQ(sgd.optimizer, 4);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(0, psi, 3, sgd), 12);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(2, psi, 3, sgd), 4 + 8 / 3.0);
  EXPECT_EQ(BytesPerParameter("sgd", 0.0, 4).optimizer, 0);  // torch keeps no state without momentum
  EXPECT_EQ(BytesPerParameter("adam", 0.9, 8).optimizer, 16);
  EXPECT_DOUBLE_EQ(ZeroExpectedMb(1, psi, 1, sgd), ZeroExpectedMb(0, psi, 1, sgd));  // world 1: no saving
  EXPECT_THROW(ZeroExpectedMb(4, psi, 2, sgd), std::invalid_argument);
  EXPECT_THROW(ZeroExpectedMb(1, psi, 0, sgd), std::invalid_argument);
  EXPECT_THROW(BytesPerParameter("lamb", 0.9, 4), std::invalid_argument);
}

// One process, world 1, no process group: every stage runs its whole
// machinery (layout, hooks, bucket buffers, unit gathers as copies) and must
// compute what single computes, in float64.
struct WorldOne {
  RunConfig config;
  DistContext dist;
  PhaseTimer timer{torch::kCPU};
  RunContext ctx;
  explicit WorldOne(const std::string& optimizer) {
    config.optimizer = optimizer;
    config.lr = optimizer == "adam" ? 0.001 : 0.05;
    config.weight_decay = 0.01;
    config.warmup = 0;
    config.bucket_cap_mb = 0.001;  // several buckets in zero1 and zero2
    ctx.config = &config;
    ctx.dist = &dist;
    ctx.devices = {torch::kCPU};
    ctx.model.width = 4;
    ctx.model.small_input = true;
    ctx.model.num_classes = 10;
    ctx.model.norm = NormKind::kGroup;
    ctx.model.dtype = torch::kDouble;
    ctx.lr = config.lr;
    ctx.timer = &timer;
  }
  std::unique_ptr<Strategy> Trained(const std::string& name, int steps) {
    config.strategy = name;
    auto strategy = FindStrategy(name).make();
    strategy->Setup(ctx);
    torch::manual_seed(7);
    for (int s = 0; s < steps; ++s) {
      timer.StartStep();
      strategy->Step({torch::randn({4, 3, 16, 16}, torch::kDouble), torch::randint(0, 10, {4})});
      timer.EndStep(false);
    }
    return strategy;
  }
};

TEST(ZeroStrategies, WorldOneComputesWhatSingleComputes) {
  for (std::string optimizer : {"sgd", "adam"}) {
    WorldOne run(optimizer);
    auto single = run.Trained("single", 3);
    auto expected = single->Parameters();
    auto images = torch::randn({3, 3, 16, 16}, torch::kDouble);
    auto logits = single->Predict(images);
    for (std::string name : {"zero1", "zero2", "zero3"}) {
      SCOPED_TRACE(name + " " + optimizer);
      auto strategy = run.Trained(name, 3);
      auto params = strategy->Parameters();
      ASSERT_EQ(params.size(), expected.size());
      double diff = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_EQ(params[i].sizes(), expected[i].sizes()) << i;
        diff = std::max(diff, (params[i] - expected[i]).abs().max().item<double>());
      }
      EXPECT_LT(diff, 1e-12);
      EXPECT_LT((strategy->Predict(images) - logits).abs().max().item<double>(), 1e-12);
      // The parameters survive being read: a second read agrees.
      EXPECT_TRUE(strategy->Parameters().front().equal(params.front()));
    }
  }
}

TEST(ZeroStrategies, Zero3HoldsAtMostTheCurrentAndThePrefetchedUnit) {
  WorldOne run("adam");
  auto strategy = run.Trained("zero3", 2);
  // Evaluation holds the whole model until the next step, which gives it back.
  strategy->Predict(torch::randn({2, 3, 16, 16}, torch::kDouble));
  run.timer.StartStep();
  strategy->Step({torch::randn({4, 3, 16, 16}, torch::kDouble), torch::randint(0, 10, {4})});
  run.timer.EndStep(false);
  auto extras = strategy->Extras();
  // ResNet-18 has 10 units (stem, 8 blocks, head); never more than 2 in full.
  EXPECT_EQ(extras.at("units_gathered_max"), "2");
  // World 1: the shard is everything, so each figure is the whole model's.
  EXPECT_EQ(extras.at("param_mb"), extras.at("grad_mb"));
  EXPECT_GT(std::stod(extras.at("param_mb")), 0);
  EXPECT_NEAR(std::stod(extras.at("zero_expected_mb")), 4 * std::stod(extras.at("param_mb")),
              0.05);  // P + G + 2 moments, float64 each
  EXPECT_EQ(extras.count("bucket_cap_mb"), 0u);
}

TEST(ZeroStrategies, MemoryColumnsOfEveryStage) {
  WorldOne run("sgd");
  for (std::string name : {"zero1", "zero2"}) {
    auto extras = run.Trained(name, 1)->Extras();
    EXPECT_EQ(extras.count("units_gathered_max"), 0u) << name;
    EXPECT_EQ(extras.at("bucket_cap_mb"), "0.001") << name;
    EXPECT_GT(std::stod(extras.at("param_mb")), 0) << name;
    EXPECT_EQ(extras.at("param_mb"), extras.at("grad_mb")) << name;  // world 1: nothing to shard
  }
}

TEST(ZeroConfig, RegisteredAsMultiProcessDataParallel) {
  for (const char* name : {"zero1", "zero2", "zero3"}) {
    const auto& entry = FindStrategy(name);
    EXPECT_EQ(entry.info.parallelism(), Parallelism::kDataMultiProcess) << name;
    EXPECT_TRUE(entry.info.batch_norm_differs) << name;
  }
}

TEST(ZeroConfig, BadFlags) {
  RunConfig c;
  c.strategy = "zero1";
  c.compression = "fp16";
  try {
    ValidateConfig(c);
    ADD_FAILURE() << "--compression=fp16 accepted for zero1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--compression=fp16"), std::string::npos) << e.what();
  }
  c.compression = "none";
  c.zero_reduce = "broadcast";
  EXPECT_THROW(ValidateConfig(c), ConfigError);
  c.zero_reduce = "all-reduce";
  EXPECT_NO_THROW(ValidateConfig(c));
  c.grad_accum = 2;
  EXPECT_THROW(ValidateConfig(c), ConfigError);
  c.grad_accum = 1;
  c.strategy = "zero3";
  c.compression = "bf16";
  try {
    ValidateConfig(c);
    ADD_FAILURE() << "--compression=bf16 accepted for zero3";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero3 reduces"), std::string::npos) << e.what();
  }
  c.compression = "none";
  c.bucket_cap_mb = 5;  // zero3's buckets are its units
  EXPECT_THROW(ValidateConfig(c), ConfigError);
  c.strategy = "zero2";
  EXPECT_NO_THROW(ValidateConfig(c));
}

}  // namespace
}  // namespace ddpbench
