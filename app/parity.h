// --verify: K steps of the strategy and of the single-device reference from
// the same initial weights on the same global batches; the largest absolute
// parameter difference goes into the row. Where BatchNorm statistics differ
// by construction (per replica, per micro-batch), both runs use GroupNorm so
// the maths is equal, and the row says which variant was checked.
#pragma once

#include <string>

#include "datasets/dataset.h"
#include "strategies/registry.h"

namespace ddpbench {

struct ParityResult {
  double max_abs_diff = 0;  // only meaningful on rank 0
  int64_t steps = 0;
  std::string model;        // e.g. "resnet18 norm=group amp=off"
};

// `ctx` is the run's context; `spec` the process's data spec (its batch is
// the process batch). Collective: every rank calls it.
ParityResult RunParityCheck(const StrategyEntry& entry, const RunContext& ctx, const DataSpec& spec);

}  // namespace ddpbench
