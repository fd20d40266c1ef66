// The one engine of the sharded data-parallel strategies zero1, zero2 and
// zero3 (strategies/sharded/zero_sharded.cpp): one flat-buffer partition
// (planning/zero_partition.h), one bucket machinery (reduce-scatter of each
// bucket as soon as its gradients are ready, all-gather of parameters bucket
// by bucket, each model unit waiting only for its own buckets). A stage says
// what is sharded and so when it is gathered:
//   1  optimizer state: full parameters and gradients on every rank; the
//      updated slices all-gathered after the step, overlapping the next
//      forward;
//   2  and gradients: each bucket's gradients copied into a bucket buffer as
//      they are produced, reduce-scattered into this rank's gradient shard,
//      the buffer given back; parameters gathered as in stage 1;
//   3  and parameters (FSDP-style): only this rank's shard at rest; each
//      unit's parameters all-gathered before its forward and again before
//      its backward, freed after each, the next unit's gather prefetched.
#pragma once

#include <memory>

#include "strategies/strategy.h"

namespace ddpbench {

std::unique_ptr<Strategy> MakeShardedStrategy(int stage);

}  // namespace ddpbench
