// The pipeline's row figures: the split and shape it ran, the bubble in
// theory, simulated with the measured chunk times and measured, each
// device's busy time and activation peak, and each chunk's F, B and W times
// (pipeline.h lists the columns).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planning/schedules.h"
#include "strategies/pipeline/engine.h"

namespace ddpbench::pipeline {

// Each chunk's mean F, B (or its whole backward) and W ms per micro-batch:
// the timed steps' totals (op_ms) or the warm-up's (warmup_ms) over
// `micro_batches`.
ChunkTimes PerMicroBatch(const Engine& e, bool warmup, double micro_batches);

// Each timed step's balance: the busiest device's busy ms in that step
// over the least busy's (stage_busy_step_ratio). Against stage_busy_ms's
// whole-run ratio it tells a split's imbalance (every step alike) from
// devices whose relative speed drifts during the run.
std::vector<double> StepBalance(const Engine& e);

// The row's extras of the run so far.
std::map<std::string, std::string> PipelineExtras(const Engine& e);

}  // namespace ddpbench::pipeline
