// Brute-force references for the stage-split tests (planning_test.cpp,
// model_parallel_test.cpp): every contiguous split, and the best largest stage.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace ddpbench::testing {

inline double LargestStage(const std::vector<double>& costs, const std::vector<int>& counts) {
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
inline std::vector<std::vector<int>> AllSplits(int n, int parts) {
  std::vector<std::vector<int>> out;
  std::vector<int> counts;
  std::function<void(int, int)> go = [&](int start, int left) {
    if (left == 1) {
      counts.push_back(n - start);
      out.push_back(counts);
      counts.pop_back();
      return;
    }
    for (int c = 1; start + c <= n - (left - 1); ++c) {
      counts.push_back(c);
      go(start + c, left - 1);
      counts.pop_back();
    }
  };
  go(0, parts);
  return out;
}

inline double BruteForceBest(const std::vector<double>& costs, int parts) {
  double best = INFINITY;
  for (const auto& counts : AllSplits(static_cast<int>(costs.size()), parts))
    best = std::min(best, LargestStage(costs, counts));
  return best;
}

}  // namespace ddpbench::testing
