// Activation recompute's arithmetic (planning/recompute_plan.h): the flag
// read against a model's units, the memory bound, and the budget solver
// against brute force. Torch-free, in ddpbench_plan_tests.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/config.h"
#include "planning/recompute_plan.h"

namespace ddpbench {
namespace {

const std::vector<std::string> kResNet18 = {"stem",     "layer1.0", "layer1.1", "layer2.0", "layer2.1",
                                            "layer3.0", "layer3.1", "layer4.0", "layer4.1", "head"};

std::string Message(const std::string& spec, const std::vector<std::string>& names) {
  try {
    ParseRecompute(spec, names);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Recompute, FlagNamesUnitsGroupsAndEveryKthBlock) {
  EXPECT_EQ(ParseRecompute("none", kResNet18), std::vector<bool>(10, false));
  EXPECT_EQ(ParseRecompute("all", kResNet18), std::vector<bool>(10, true));
  EXPECT_EQ(ParseRecompute("stem,head", kResNet18),
            (std::vector<bool>{true, false, false, false, false, false, false, false, false, true}));
  EXPECT_EQ(ParseRecompute("blocks", kResNet18),
            (std::vector<bool>{false, true, true, true, true, true, true, true, true, false}));
  EXPECT_EQ(ParseRecompute("layer3,layer1.0", kResNet18),
            (std::vector<bool>{false, true, false, false, false, true, true, false, false, false}));
  EXPECT_EQ(ParseRecompute("every-3", kResNet18),  // blocks 3 and 6 of 8, counted from 1: layer2.0, layer3.1
            (std::vector<bool>{false, false, false, true, false, false, true, false, false, false}));
  // Half blocks: a block's name marks both halves, every-K counts whole blocks.
  const std::vector<std::string> halves = {"stem", "layer1.0a", "layer1.0b", "layer1.1a", "layer1.1b", "head"};
  EXPECT_EQ(ParseRecompute("layer1.1", halves), (std::vector<bool>{false, false, false, true, true, false}));
  EXPECT_EQ(ParseRecompute("every-2", halves), (std::vector<bool>{false, false, false, true, true, false}));
  EXPECT_EQ(ParseRecompute("layer1.0b", halves), (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ(DescribeRecompute(ParseRecompute("layer3", kResNet18), kResNet18), "layer3.0;layer3.1");
  EXPECT_EQ(DescribeRecompute(ParseRecompute("all", kResNet18), kResNet18), "all");
  EXPECT_EQ(DescribeRecompute(ParseRecompute("none", kResNet18), kResNet18), "none");
}

TEST(Recompute, BadItemsAreOneMessageEach) {
  for (const char* bad : {"layer9", "stem,,head", "every-0", "every-x", "blocks,foo", "layer1.7", ""}) {
    const std::string m = Message(bad, kResNet18);
    EXPECT_NE(m.find(std::string("--recompute=") + bad + ":"), std::string::npos) << m;
    EXPECT_NE(m.find("accepted: none, all, auto"), std::string::npos) << m;
  }
  EXPECT_NE(Message("layer9", kResNet18).find("'layer9' names no unit"), std::string::npos);
}

TEST(Recompute, PeakIsHeldBytesPlusTheLargestRecomputedTransient) {
  // kept/output: 10/2, 20/4, 6/6. Recompute the first two: 2 + 4 + 6 held, the second's
  // 16 re-created while its backward runs: 28. Only the last: 10 + 20 + 6 + 0.
  const std::vector<UnitActivation> u = {{10, 2, 1}, {20, 4, 1}, {6, 6, 1}};
  EXPECT_DOUBLE_EQ(RecomputePeakBytes(u, {true, true, false}), 28);
  EXPECT_DOUBLE_EQ(RecomputePeakBytes(u, {false, false, true}), 36);
  EXPECT_DOUBLE_EQ(RecomputePeakBytes(u, {}), 36);
}

// The least added time of any subset within the budget, by enumeration.
double BruteForce(const std::vector<UnitActivation>& u, double budget, double* peak) {
  double best = std::numeric_limits<double>::infinity();
  for (unsigned mask = 0; mask < (1u << u.size()); ++mask) {
    std::vector<bool> r(u.size());
    double t = 0;
    for (size_t i = 0; i < u.size(); ++i)
      if ((r[i] = (mask >> i) & 1u)) t += u[i].forward_ms;
    const double p = RecomputePeakBytes(u, r);
    if (p <= budget && (t < best || (t == best && p < *peak))) best = t, *peak = p;
  }
  return best;
}

TEST(Recompute, BudgetSolverFindsTheLeastTimeOfBruteForce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> bytes(1, 40), ms(1, 9), count(1, 9);
  int feasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<UnitActivation> u(static_cast<size_t>(count(rng)));
    double all_kept = 0;
    for (auto& x : u) {
      const int out = bytes(rng);
      x = {static_cast<double>(out + bytes(rng)), static_cast<double>(out), static_cast<double>(ms(rng))};
      all_kept += x.kept_bytes;
    }
    const double budget = std::uniform_real_distribution<double>(0.2, 1.1)(rng) * all_kept;
    double brute_peak = 0;
    const double brute = BruteForce(u, std::floor(budget), &brute_peak);
    const RecomputePlan plan = PlanRecompute(u, budget, /*granule_bytes=*/1);
    if (brute == std::numeric_limits<double>::infinity()) {
      EXPECT_FALSE(plan.fits) << "trial " << trial;
      EXPECT_EQ(plan.recompute, std::vector<bool>(u.size(), true));
      continue;
    }
    ++feasible;
    ASSERT_TRUE(plan.fits) << "trial " << trial;
    EXPECT_DOUBLE_EQ(plan.added_ms, brute) << "trial " << trial;
    EXPECT_LE(plan.peak_bytes, budget) << "trial " << trial;
    EXPECT_DOUBLE_EQ(RecomputePeakBytes(u, plan.recompute), plan.peak_bytes);
  }
  EXPECT_GT(feasible, 100);  // the draws cover both sides of the budget
}

TEST(Recompute, UnlimitedBudgetRecomputesNothing) {
  const std::vector<UnitActivation> u = {{10, 2, 1}, {20, 4, 3}};
  const RecomputePlan plan = PlanRecompute(u, 1e9);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.recompute, (std::vector<bool>{false, false}));
  EXPECT_EQ(plan.added_ms, 0);
}

}  // namespace
}  // namespace ddpbench
