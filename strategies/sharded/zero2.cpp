// zero2: ZeRO stage 2. Sharded: the optimizer state and the gradients, 1/N
// per rank. Each gradient is copied into its bucket's buffer as backward
// produces it; the bucket is reduce-scattered into this rank's gradient shard
// and its buffer given back, so only a few bucket buffers exist at a time.
// Parameters stay whole on every rank and are gathered as in zero1 (bucket by
// bucket, overlapping the next forward). Machinery: strategies/sharded/zero_sharded.cpp.
#include "strategies/registry.h"
#include "strategies/sharded/zero_sharded.h"

namespace ddpbench {

static std::unique_ptr<Strategy> MakeZero2Strategy() { return MakeShardedStrategy(2); }
DDPBENCH_REGISTER_STRATEGY("zero2", MakeZero2Strategy);

}  // namespace ddpbench
