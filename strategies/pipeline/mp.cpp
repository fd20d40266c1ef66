// mp: manual model parallelism. The ResNet's units (stem, blocks, head) are
// cut into one contiguous stage per --gpus device (by measured time, or
// --balance=params, or --split; stages.h); the whole batch goes through
// stage 0, its activations move to stage 1's device, and so on; backward runs
// stage by stage in reverse. Only one device works at a time, which is what pmp improves on.
// It runs on the pipeline engine with one micro-batch (pipeline.h): each
// stage in its device's thread, back-propagating its own part, so on a CPU
// machine every logical device is charged for its own weights, activations
// and optimizer state. The maths is the single-device run's, BatchNorm
// included: --verify compares the model as it is.
#include "strategies/registry.h"
#include "strategies/pipeline/pipeline.h"

namespace ddpbench {

static std::unique_ptr<Strategy> MakeMpStrategy() { return MakePipelineStrategy(/*pipelined=*/false); }
DDPBENCH_REGISTER_STRATEGY("mp", MakeMpStrategy);

}  // namespace ddpbench
