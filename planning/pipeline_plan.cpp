// The pure side of pmp's pipeline shape: which runs measure their split,
// half blocks and whole blocks as unit counts, a split's step on ideal
// devices (the schedule table simulated) and the fastest split of measured
// units. Torch-free: pmp's shape choice and the step model share it.
#include "planning/pipeline_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "base/config.h"

namespace ddpbench {

bool SplitMeasured(const RunConfig& config) { return config.split.empty() && config.balance == "time"; }

bool UnitsOpen(const RunConfig& config) { return config.units == "auto" && SplitMeasured(config); }

bool RebalanceApplies(const RunConfig& config, int virtual_stages) {
  if (!SplitMeasured(config) || config.warmup < 2 || config.stage_ranks) return false;  // not across ranks
  return config.rebalance == "warmup" || (config.rebalance == "auto" && virtual_stages == 1);
}

std::vector<int> BlockOfUnit(const std::vector<std::string>& unit_names) {
  std::vector<int> block;
  std::string previous;
  for (const std::string& name : unit_names) {
    const size_t n = name.size();
    const bool half = n >= 2 && (name[n - 1] == 'a' || name[n - 1] == 'b') && std::isdigit(name[n - 2]);
    const std::string whole = half ? name.substr(0, n - 1) : name;
    const bool same = half && name[n - 1] == 'b' && !block.empty() && whole == previous;
    block.push_back(block.empty() ? 0 : same ? block.back() : block.back() + 1);
    previous = whole;
  }
  return block;
}

std::vector<std::string> WholeBlockNames(const std::vector<std::string>& unit_names) {
  const std::vector<int> block = BlockOfUnit(unit_names);
  std::vector<std::string> names;
  for (size_t u = 0; u < block.size(); ++u) {
    if (static_cast<int>(names.size()) > block[u]) continue;  // the second half
    const std::string& name = unit_names[u];
    const bool half = u + 1 < block.size() && block[u + 1] == block[u];
    names.push_back(half ? name.substr(0, name.size() - 1) : name);
  }
  return names;
}

std::vector<int> SplitInUnits(const std::vector<int>& block_counts, const std::vector<std::string>& unit_names) {
  const std::vector<int> block = BlockOfUnit(unit_names);
  std::vector<int> counts;
  size_t u = 0;
  int first_block = 0;
  for (int n : block_counts) {
    counts.push_back(0);
    while (u < block.size() && block[u] < first_block + n) ++counts.back(), ++u;
    first_block += n;
  }
  if (u != block.size() || (!block.empty() && first_block != block.back() + 1))
    throw std::logic_error(fmt::format("SplitInUnits: the split {} does not cover the {} blocks",
                                       SplitCounts(block_counts), block.empty() ? 0 : block.back() + 1));
  return counts;
}

UnitTimes MergeHalfBlocks(const UnitTimes& halves, const std::vector<std::string>& unit_names) {
  const std::vector<int> block = BlockOfUnit(unit_names);
  if (block.size() != halves.total_ms.size())
    throw std::logic_error(fmt::format("MergeHalfBlocks: {} times for {} units", halves.total_ms.size(), block.size()));
  UnitTimes merged;
  merged.total_ms.assign(block.empty() ? 0 : block.back() + 1, 0.0);
  merged.forward_ms = merged.total_ms;
  for (size_t u = 0; u < block.size(); ++u) {
    merged.total_ms[block[u]] += halves.total_ms[u];
    merged.forward_ms[block[u]] += halves.forward_ms[u];
  }
  return merged;
}

double PredictStepMs(const PipelineTable& table, const StagePlan& plan) {
  const std::vector<double> forward = StageTimes(plan.counts, plan.unit_forward_ms);
  std::vector<double> backward;
  for (size_t c = 0; c < plan.counts.size(); ++c) backward.push_back(std::max(0.0, plan.stage_ms[c] - forward[c]));
  const ChunkTimes times = SplitChunkTimes(forward, backward);
  const PipelineSimulation sim = SimulatePipeline(table, times);
  return sim.deadlock ? std::numeric_limits<double>::infinity() : sim.makespan;
}

std::vector<int> FastestSplit(const PipelineTable& table, const UnitTimes& measured) {
  const std::vector<double>& unit_ms = measured.total_ms;
  const int units = static_cast<int>(unit_ms.size()), C = table.chunks(), S = table.devices;
  std::vector<int> best = BalanceSplit(unit_ms, C);
  double best_ms = PredictStepMs(table, PlanOfSplit(best, measured));
  std::vector<int> counts(C, 0);
  std::vector<double> device_ms(S, 0.0);  // one micro-batch through the chunks placed so far
  // Places chunk c, which begins at unit `first`, and the chunks after it.
  std::function<void(int, int)> place = [&](int c, int first) {
    if (c == C) {
      const double ms = PredictStepMs(table, PlanOfSplit(counts, measured));
      if (ms < best_ms - 1e-9) best_ms = ms, best = counts;
      return;
    }
    const int most = units - first - (C - 1 - c);
    for (int k = c + 1 == C ? most : 1; k <= most; ++k) {
      double chunk_ms = 0;
      for (int u = first; u < first + k; ++u) chunk_ms += unit_ms[u];
      double& device = device_ms[table.DeviceOf(c)];
      device += chunk_ms;
      counts[c] = k;
      if (table.micro_batches * device < best_ms) place(c + 1, first + k);
      device -= chunk_ms;
    }
  };
  place(0, 0);
  return best;
}

std::vector<int> MicroBatchCandidates(int64_t batch_size, int devices, int64_t fewest_images) {
  std::vector<int> out;
  if (fewest_images <= batch_size) out.push_back(1);
  for (int64_t m = std::max<int64_t>(2, std::min<int64_t>(devices, batch_size)); m * fewest_images <= batch_size; ++m)
    if (batch_size % m == 0) out.push_back(static_cast<int>(m));
  return out;
}

std::vector<ShapeOption> ScheduleOptions(const RunConfig& config, int devices, int micro_batches, int units) {
  std::vector<ShapeOption> all;
  auto add = [&](PipelineSchedule s, int V) { all.push_back({s, V, micro_batches}); };
  if (config.given.count("--schedule") > 0 || config.chunks > 0) {
    const PipelineSchedule s = ParsePipelineSchedule(config.schedule);
    add(s, ChunksPerDevice(s, static_cast<int>(config.virtual_stages)));
  } else {
    add(PipelineSchedule::k1F1B, 1);
    add(PipelineSchedule::kZeroBubble, 1);
    if (2 * devices <= units) {
      add(PipelineSchedule::kZeroBubbleV, 2);
      add(PipelineSchedule::kDualPipeV, 2);
    }
    for (int V = 2; V * devices <= units; ++V) {
      add(PipelineSchedule::kInterleaved, V);
      add(PipelineSchedule::kInterleavedZeroBubble, V);
      add(PipelineSchedule::kLoopedBFS, V);
    }
  }
  const int split_stages = config.split.empty() ? 0 : 1 + static_cast<int>(std::count(config.split.begin(),
                                                                                      config.split.end(), ','));
  std::vector<ShapeOption> out;
  for (const ShapeOption& c : all) {
    if (NeedsGroupsOfDevices(c.schedule) && micro_batches % devices != 0) continue;
    if (micro_batches < MinMicroBatches(c.schedule, devices)) continue;
    // A recomputed unit computes its input and weight gradients in one node: no B/W split.
    if (config.recompute != "none" && SplitsBackward(c.schedule) && all.size() > 1) continue;
    if (split_stages > 0 && split_stages != c.virtual_stages * devices && all.size() > 1) continue;
    out.push_back(c);
  }
  return out;
}

size_t ChooseShape(const std::vector<double>& predicted_ms, double margin) {
  if (predicted_ms.empty()) throw std::invalid_argument("ChooseShape: no candidates");
  size_t best = 0;
  for (size_t i = 1; i < predicted_ms.size(); ++i)
    if (predicted_ms[i] < predicted_ms[best] * (1 - margin)) best = i;
  return best;
}

std::vector<size_t> ShapesToTry(const std::vector<double>& predicted_ms, double margin, int best,
                                const std::vector<std::vector<size_t>>& simple) {
  std::vector<size_t> finite;
  for (size_t i = 0; i < predicted_ms.size(); ++i)
    if (std::isfinite(predicted_ms[i])) finite.push_back(i);
  if (finite.size() < 2) return {};
  auto faster = [&](size_t a, size_t b) { return predicted_ms[a] < predicted_ms[b]; };
  std::set<size_t> tried = {ChooseShape(predicted_ms, margin)};
  std::vector<size_t> by_speed = finite;
  std::stable_sort(by_speed.begin(), by_speed.end(), faster);
  for (int k = 0; k < best && k < static_cast<int>(by_speed.size()); ++k) tried.insert(by_speed[k]);
  for (const auto& group : simple) {
    std::vector<size_t> live;
    for (size_t i : group)
      if (i < predicted_ms.size() && std::isfinite(predicted_ms[i])) live.push_back(i);
    if (!live.empty()) tried.insert(*std::min_element(live.begin(), live.end(), faster));
  }
  if (tried.size() < 2) return {};
  return {tried.begin(), tried.end()};
}

}  // namespace ddpbench
