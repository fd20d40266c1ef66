// zero1: ZeRO stage 1. Sharded: the optimizer state (SGD momentum, Adam's two
// moments), 1/N per rank. Every rank holds all parameters and gradients;
// gradients are reduce-scattered bucket by bucket during backward, each rank
// steps its slice, and the updated slices are all-gathered bucket by bucket
// while the next forward runs, each model unit waiting for its own buckets.
// The machinery is the one of zero2 and zero3: strategies/sharded/zero_sharded.cpp.
#include "strategies/registry.h"
#include "strategies/sharded/zero_sharded.h"

namespace ddpbench {

static std::unique_ptr<Strategy> MakeZero1Strategy() { return MakeShardedStrategy(1); }
DDPBENCH_REGISTER_STRATEGY("zero1", MakeZero1Strategy);

}  // namespace ddpbench
