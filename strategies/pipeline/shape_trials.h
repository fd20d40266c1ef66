// pmp's shape trials. Where the shape is left open, pmp ranks its candidates
// by a step predicted from short set-up timings of each unit, and that
// ranking can be wrong in a way the margin does not catch: a deep
// interleaving pays a hand-off and a call per action that no unit time
// holds, and a half-idle 1F1B runs its units faster than they were timed
// with every device busy. So before committing, the strongest candidates
// (ShapesToTry) are each built as a pipeline of their own and run on one
// made-up batch for a few steps in interleaved rounds; the run keeps the
// fastest measured, the simplest unless another is clearly faster, and logs
// every figure. Not built across --stage-ranks (every rank would have to run
// every trial with the others).
#pragma once

#include <cstddef>

#include "strategies/pipeline/pipeline_shape.h"
#include "strategies/strategy.h"

namespace ddpbench {

// The shape the run keeps: choice.chosen when there is nothing to try, else
// the trials' pick. Each shape is tried as the run would use it
// (FinishShape on `model`, the model the shapes were costed on), and where
// that counts a whole-block plan in half blocks for the re-split, in whole
// blocks too (half blocks cost a concatenation and slices at every block,
// which can outweigh what the re-split gains). The process's random state
// is as it was before.
PipelineShape PickByTrials(const RunContext& ctx, const ResNet& model, const ShapeChoice& choice);

}  // namespace ddpbench
