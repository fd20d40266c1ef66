// Where the model's units live: each chunk's units on its device, each
// device's optimizer over its chunks' parameters, and pmp's re-split after
// the warm-up (rebalance.h), which moves units and their optimizer state.
#pragma once

#include <cstdint>
#include <vector>

#include "strategies/pipeline/engine.h"

namespace ddpbench::pipeline {

// Hands chunk c the next counts[c] units and moves the weights of each unit
// whose device changes to its new device (a CPU logical device: a copy made
// in that device's thread, so that it is charged for it and the old one is
// not), then gives each device an optimizer over its chunks' parameters.
// At set-up and when Rebalance changes the split.
void PlaceUnits(Engine& e, const std::vector<int>& counts);

// After the last warm-up step (`step`): the split searched again with the
// warm-up's chunk times (rebalance.h), and the units moved, their
// optimizer state with them, when it changes. The maths is unchanged.
void Rebalance(Engine& e, int64_t step);

}  // namespace ddpbench::pipeline
