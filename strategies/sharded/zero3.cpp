// zero3: ZeRO stage 3, FSDP-style. Sharded: optimizer state, gradients and
// parameters, 1/N per rank at rest. Each model unit (the stem, every residual
// block, the head: the units mp and pmp split on) is all-gathered before its
// forward and freed after, gathered again before its backward and freed once
// its gradients are reduce-scattered into the shard; the next unit's gather
// is prefetched so that it overlaps this unit's compute, so at most two units
// are held in full. Machinery: strategies/sharded/zero_sharded.cpp.
#include "strategies/registry.h"
#include "strategies/sharded/zero_sharded.h"

namespace ddpbench {

static std::unique_ptr<Strategy> MakeZero3Strategy() { return MakeShardedStrategy(3); }
DDPBENCH_REGISTER_STRATEGY("zero3", MakeZero3Strategy);
// hsdp: the same strategy, its replicate degree one per node unless given.
static std::unique_ptr<Strategy> MakeHsdpStrategy() { return MakeShardedStrategy(3); }
DDPBENCH_REGISTER_STRATEGY("hsdp", MakeHsdpStrategy);

}  // namespace ddpbench
