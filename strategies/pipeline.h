// The model-parallel engine behind mp and pmp: the ResNet's units cut into
// one stage per device (stages.h), each stage owned by a persistent worker
// thread (with its own CUDA stream on a GPU), boundary activations detached
// and handed to the next stage, and stage-local autograd: each stage
// back-propagates its own part and hands its input gradient upstream, and
// steps its own optimizer. The batch is cut into micro-batches that the
// stages run by a schedule (GPipe or 1F1B, --chunks/--schedule) so that they
// work at the same time; mp is the one-micro-batch case, where the stages
// take turns.
//
// Row extras: split (units per stage, "8,2", what --split accepts), chunks,
// schedule (pmp), bubble_theory (S-1)/(M+S-1), bubble_measured
// 1 - sum(stage busy)/(S x pipeline wall time) over the timed steps, and
// stage_busy_ms (mean busy ms per step of each stage, "a/b").
#pragma once

#include <memory>

#include "strategies/strategy.h"

namespace ddpbench {

// `pipelined`: --chunks micro-batches by --schedule (pmp); otherwise the
// whole batch at once (mp).
std::unique_ptr<Strategy> MakePipelineStrategy(bool pipelined);

}  // namespace ddpbench
