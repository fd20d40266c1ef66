// pmp: pipelined model parallelism. The stages are mp's (stages.h; split by
// measured time unless --balance/--split say otherwise), but the batch is cut
// into --chunks micro-batches that flow through them so the devices work at
// the same time: one persistent worker thread per device (its own CUDA
// stream on a GPU), detached boundary activations, chunk-local autograd so
// that backward is pipelined too. --schedule picks the table each device
// runs (schedules.h): gpipe (all forwards, then all backwards), 1f1b (one
// forward one backward in the steady state, so device s holds at most S - s
// micro-batches' activations instead of M), interleaved (V = --virtual-stages
// model chunks per device, a bubble V times smaller), zero-bubble (ZB-H1:
// the backward split into B and W, W filling the bubbles, split_backward.h)
// or interleaved-zero-bubble (both). Without --chunks the shape is chosen
// by predicted step time (pipeline_shape.h). Each micro-batch's loss is weighted by its
// share of the batch, so the gradients are the whole batch's; only BatchNorm
// differs (statistics per micro-batch, as in GPipe), so --verify checks the
// GroupNorm variant. The row records the split, each stage's measured time,
// the schedule, the measured bubble beside the ideal one, each device's busy
// time and peak activation memory (pipeline.h).
#include "strategies/registry.h"
#include "strategies/pipeline/pipeline.h"

namespace ddpbench {

static std::unique_ptr<Strategy> MakePmpStrategy() { return MakePipelineStrategy(/*pipelined=*/true); }
DDPBENCH_REGISTER_STRATEGY("pmp", MakePmpStrategy);

}  // namespace ddpbench
