// Stage splits as numbers: cutting a ResNet's units into contiguous stages
// (BalanceSplit), checking and reading --split, and a split's stage times.
// Torch-free: the pipeline engines and the step model both use it.
#include "planning/stage_split.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"

namespace ddpbench {
namespace {

std::string UnitList(const std::vector<std::string>& names) {
  return fmt::format("{} units: {}", names.size(), fmt::join(names, ", "));
}

}  // namespace

std::vector<int> BalanceSplit(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  if (parts < 1 || parts > n)
    throw std::logic_error(fmt::format("BalanceSplit: {} stages for {} units", parts, n));
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[p][i]: the smallest possible largest stage cost when the first i
  // units form p stages; cut[p][i]: where the last of those stages begins.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int p = 1; p <= parts; ++p) {
    for (int i = p; i <= n - (parts - p); ++i) {
      for (int j = p - 1; j < i; ++j) {
        if (best[p - 1][j] == kInf) continue;
        double worst = std::max(best[p - 1][j], prefix[i] - prefix[j]);
        if (worst < best[p][i]) {
          best[p][i] = worst;
          cut[p][i] = j;
        }
      }
    }
  }
  std::vector<int> counts(parts);
  for (int p = parts, i = n; p >= 1; --p) {
    const int j = cut[p][i];
    counts[p - 1] = i - j;
    i = j;
  }
  return counts;
}

void CheckStageCount(const std::string& strategy, int devices, const std::vector<std::string>& unit_names,
                     int virtual_stages) {
  const int units = static_cast<int>(unit_names.size());
  if (virtual_stages > 1 && devices * virtual_stages > units)
    throw ConfigError(fmt::format(
        "--virtual-stages={}: --gpus={} x {} = {} model chunks, but the model has only {}; accepted: "
        "--virtual-stages=1..{} (at least one unit per chunk)",
        virtual_stages, devices, virtual_stages, devices * virtual_stages, UnitList(unit_names), units / devices));
  if (devices > units)
    throw ConfigError(fmt::format(
        "--gpus={}: {} puts at least one unit on each device, but the model has only {}; accepted: --gpus=1..{}",
        devices, strategy, UnitList(unit_names), units));
}

std::vector<int> ParseSplit(const std::string& split, int devices, const std::vector<std::string>& unit_names,
                            const std::string& stages_from) {
  const int units = static_cast<int>(unit_names.size());
  const std::string from = stages_from.empty() ? fmt::format("--gpus={}", devices) : stages_from;
  const std::string accepted = fmt::format(
      "accepted: {} comma-separated unit counts >= 1 (one per stage, {}) summing to {}; the model has {}",
      devices, from, units, UnitList(unit_names));
  std::vector<int> counts;
  std::stringstream ss(split);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t pos = 0;
    int v = -1;
    try {
      v = std::stoi(part, &pos);
    } catch (...) {
    }
    if (v < 1 || pos != part.size()) throw ConfigError(fmt::format("--split={}: '{}' is not a unit count; {}", split, part, accepted));
    counts.push_back(v);
  }
  if (split.empty() || split.back() == ',') throw ConfigError(fmt::format("--split={}: empty count; {}", split, accepted));
  if (static_cast<int>(counts.size()) != devices)
    throw ConfigError(fmt::format("--split={}: {} counts for {} stages; {}", split, counts.size(), devices, accepted));
  int64_t sum = 0;
  for (int c : counts) sum += c;
  if (sum != units) throw ConfigError(fmt::format("--split={}: the counts sum to {}, not {}; {}", split, sum, units, accepted));
  return counts;
}

std::string SplitCounts(const std::vector<int>& counts) { return fmt::format("{}", fmt::join(counts, ",")); }

std::string DescribeSplit(const std::vector<int>& counts, const std::vector<std::string>& unit_names) {
  std::vector<std::string> stages;
  size_t first = 0;
  for (int c : counts) {
    const size_t last = first + c - 1;
    stages.push_back(c == 1 ? unit_names.at(first) : unit_names.at(first) + ".." + unit_names.at(last));
    first = last + 1;
  }
  return fmt::format("{}", fmt::join(stages, " | "));
}

std::vector<double> StageTimes(const std::vector<int>& counts, const std::vector<double>& unit_ms) {
  std::vector<double> stage_ms;
  size_t first = 0;
  for (int c : counts) {
    double sum = 0;
    for (int i = 0; i < c; ++i) sum += unit_ms.at(first + i);
    stage_ms.push_back(sum);
    first += c;
  }
  return stage_ms;
}

StagePlan PlanOfSplit(const std::vector<int>& counts, const UnitTimes& times) {
  return {counts, StageTimes(counts, times.total_ms), times.total_ms, times.forward_ms};
}

}  // namespace ddpbench
