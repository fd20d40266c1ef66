// The pipeline's row figures.
#include "strategies/pipeline/figures.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"

namespace ddpbench::pipeline {
namespace {

// What the run measured, per timed step: each device's busy time, the
// bubble, the chunks' F:B[:W] times, the simulated bubble.
void AddMeasured(const Engine& e, std::map<std::string, std::string>& extras, bool split_backward) {
  const int S = e.table.devices, M = e.table.micro_batches;
  std::vector<double> busy, act_mb;
  double total = 0;
  for (auto& dev : e.devices) {
    busy.push_back(dev->busy_ms / e.timed_steps);
    act_mb.push_back(dev->activation_peak_bytes / (1024.0 * 1024.0));
    total += dev->busy_ms;
  }
  extras["bubble_measured"] = fmt::format("{:.4f}", 1.0 - total / (S * e.wall_ms));
  extras["stage_busy_ms"] = Joined(busy);
  std::vector<double> balance = StepBalance(e);
  if (!balance.empty()) {
    std::sort(balance.begin(), balance.end());
    extras["stage_busy_step_ratio"] = fmt::format("{:.3f}/{:.3f}", balance[(balance.size() - 1) / 2], balance.back());
  }
  extras["activation_peak_mb"] = Joined(act_mb, "{:.2f}");
  const ChunkTimes times = PerMicroBatch(e, /*warmup=*/false, static_cast<double>(e.timed_steps) * M);
  std::vector<std::string> fbw;
  for (size_t c = 0; c < e.chunks.size(); ++c)
    fbw.push_back(split_backward ? fmt::format("{:.2f}:{:.2f}:{:.2f}", times.forward[c], times.backward_input[c],
                                               times.backward_weight[c])
                                 : fmt::format("{:.2f}:{:.2f}", times.forward[c], times.backward_input[c]));
  extras["chunk_fbw_ms"] = fmt::format("{}", fmt::join(fbw, "/"));
  if (e.fill_waits) {
    std::vector<double> fill;
    for (auto& dev : e.devices) fill.push_back(dev->fill_ms / e.timed_steps);
    extras["w_fill_ms"] = Joined(fill, "{:.2f}");
  }
  // The table run on ideal devices with this run's measured times: the
  // bubble its stage times leave without waits or noise. Zero-bubble's
  // ideal idle fraction depends on F, B and W, so this is its theory.
  const std::string simulated = fmt::format("{:.4f}", SimulatePipeline(e.table, times).Bubble());
  extras["bubble_simulated"] = simulated;
  if (split_backward) extras["bubble_theory"] = simulated;
}

}  // namespace

ChunkTimes PerMicroBatch(const Engine& e, bool warmup, double micro_batches) {
  ChunkTimes times;
  for (const auto& ch : e.chunks) {
    const double* ms = warmup ? ch->warmup_ms : ch->op_ms;
    times.forward.push_back(ms[0] / micro_batches);
    times.backward_input.push_back(ms[1] / micro_batches);
    times.backward_weight.push_back(ms[2] / micro_batches);
  }
  return times;
}

std::vector<double> StepBalance(const Engine& e) {
  std::vector<double> ratios;
  if (e.devices.size() < 2) return ratios;
  for (size_t i = 0; i < e.devices.front()->step_busy_ms.size(); ++i) {
    double most = 0, least = std::numeric_limits<double>::infinity();
    for (const auto& dev : e.devices) {
      most = std::max(most, dev->step_busy_ms.at(i));
      least = std::min(least, dev->step_busy_ms.at(i));
    }
    if (least > 0) ratios.push_back(most / least);
  }
  return ratios;
}

std::map<std::string, std::string> PipelineExtras(const Engine& e) {
  const int S = e.table.devices, V = e.table.virtual_stages, M = e.table.micro_batches;
  std::map<std::string, std::string> extras;
  extras["split"] = SplitCounts(e.plan.counts);
  extras["split_setup"] = SplitCounts(e.setup_counts);
  extras["units"] = e.model->options().half_blocks ? "half-blocks" : "blocks";
  extras["stage_time_ms"] = Joined(e.plan.stage_ms, "{:.2f}");
  extras["chunks"] = std::to_string(M);
  if (e.pipelined) {
    extras["schedule"] = PipelineScheduleName(e.schedule);
    extras["virtual_stages"] = std::to_string(V);
  }
  const bool split_backward = e.pipelined && SplitsBackward(e.schedule);
  if (!split_backward)
    extras["bubble_theory"] = fmt::format("{:.4f}", e.schedule == PipelineSchedule::kLoopedBFS
                                                        ? LoopedBfsTheoreticalBubble(S, V, M)
                                                        : TheoreticalBubble(S, V, M));
  if (e.timed_steps > 0 && e.wall_ms > 0) AddMeasured(e, extras, split_backward);
  return extras;
}

}  // namespace ddpbench::pipeline
