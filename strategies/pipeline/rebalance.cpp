#include "strategies/pipeline/rebalance.h"

#include "strategies/pipeline/pipeline_shape.h"

namespace ddpbench {
namespace {

// measured / predicted, or 1 when either is not a positive figure.
double Ratio(double measured, double predicted) {
  return measured > 0 && predicted > 0 ? measured / predicted : 1.0;
}

}  // namespace

RebalancePlan RebalanceSplit(const PipelineTable& table, const StagePlan& plan, const ChunkTimes& in_run,
                             double margin) {
  const size_t C = plan.counts.size();
  TORCH_CHECK(C == static_cast<size_t>(table.chunks()) && in_run.forward.size() == C &&
                  in_run.backward_input.size() == C,
              "RebalanceSplit: ", C, " chunks in the split, ", table.chunks(), " in the table, ",
              in_run.forward.size(), " measured");
  const std::vector<double> forward = StageTimes(plan.counts, plan.unit_forward_ms);
  RebalancePlan out;
  out.corrected.total_ms.reserve(plan.unit_ms.size());
  size_t unit = 0;
  for (size_t c = 0; c < C; ++c) {
    const double backward = in_run.backward_input[c] + (c < in_run.backward_weight.size() ? in_run.backward_weight[c] : 0);
    const double f = Ratio(in_run.forward[c], forward[c]);
    const double b = Ratio(backward, plan.stage_ms[c] - forward[c]);
    for (int k = 0; k < plan.counts[c]; ++k, ++unit) {
      const double unit_forward = plan.unit_forward_ms[unit];
      out.corrected.forward_ms.push_back(unit_forward * f);
      out.corrected.total_ms.push_back(unit_forward * f + (plan.unit_ms[unit] - unit_forward) * b);
    }
  }
  out.counts = plan.counts;
  out.current_ms = PredictStepMs(table, PlanOfSplit(plan.counts, out.corrected));
  out.best_ms = out.current_ms;
  const std::vector<int> fastest = FastestSplit(table, out.corrected);
  const double fastest_ms = PredictStepMs(table, PlanOfSplit(fastest, out.corrected));
  if (fastest != plan.counts && fastest_ms < out.current_ms * (1 - margin)) {
    out.counts = fastest;
    out.best_ms = fastest_ms;
    out.changed = true;
  }
  return out;
}

}  // namespace ddpbench
