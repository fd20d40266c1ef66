// In-run re-balancing of a pipeline's split (pmp --rebalance; by default
// where each device holds one chunk: RebalanceApplies in pipeline_shape.h).
// The split is chosen at set-up from each unit's forward and backward timed
// on its own, but inside the pipeline a chunk does not run at the speed its
// units' separate timings add up to, and on the 2-core VM the set-up could
// not tell which split would run even. The warm-up steps measure each
// chunk's F, B and W in the run itself; each unit's set-up time is scaled by
// its chunk's in-run/set-up ratio, and the split is searched again with the
// same cost model (FastestSplit). It pays with half-block units (the model
// stays in half blocks for it under --units=auto): at --chunks=8 zero-bubble's
// bubble halved (results/cpu-2core/pipelines/cpu-2core-rebalance-halves.csv). Moves of a whole
// block left the devices about 36% apart the other way (one block there is
// 15-30% of a stage), and under interleaving a device's second chunk ran
// 0.9-2.1x its set-up sum (results/cpu-2core/pipelines/cpu-2core-rebalance-ab.csv), so it stays
// off for interleaved shapes.
// Pure logic; exposed for tests.
#pragma once

#include <vector>

#include "planning/schedules.h"
#include "strategies/pipeline/stages.h"

namespace ddpbench {

struct RebalancePlan {
  std::vector<int> counts;  // the split to run from now on (the current one when no better is found)
  UnitTimes corrected;      // the set-up unit times scaled by their chunk's in-run/set-up ratio
  double current_ms = 0;    // the current split's predicted step with the corrected times
  double best_ms = 0;       // the chosen split's
  bool changed = false;     // counts differ from the current split
};

// The split of `table`'s chunks that `in_run` (per-micro-batch ms of each
// chunk's F, B and W, or F and the whole backward in backward_input, as
// measured in warm-up steps) and the set-up `plan` predict to be fastest.
// A new split is taken only when its predicted step is at least `margin`
// (a fraction) shorter than the current one's: the warm-up is short and its
// figures noisy, and moving units costs a copy of their weights.
RebalancePlan RebalanceSplit(const PipelineTable& table, const StagePlan& plan, const ChunkTimes& in_run,
                             double margin);

}  // namespace ddpbench
