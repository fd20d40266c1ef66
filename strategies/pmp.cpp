// pmp: pipelined model parallelism (GPipe / 1F1B). The stages are mp's
// (stages.h), but the batch is cut into --chunks micro-batches that flow
// through them so the stages work at the same time: one persistent worker
// thread per stage (its own CUDA stream on a GPU), detached boundary
// activations, stage-local autograd so that backward is pipelined too.
// --schedule=gpipe runs all forwards then all backwards; --schedule=1f1b
// alternates one forward and one backward in the steady state, so a stage
// holds at most S - s micro-batches' activations instead of M. Each
// micro-batch's loss is weighted by its share of the batch, so the gradients
// are the whole batch's; only BatchNorm differs (statistics per micro-batch,
// as in GPipe), so --verify checks the GroupNorm variant. The row records the
// split, chunks, schedule, the measured bubble beside (S-1)/(M+S-1), and each
// stage's busy time (pipeline.h).
#include "strategies/factories.h"
#include "strategies/pipeline.h"

namespace ddpbench {

std::unique_ptr<Strategy> MakePmpStrategy() { return MakePipelineStrategy(/*pipelined=*/true); }

}  // namespace ddpbench
