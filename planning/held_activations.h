// Which activations a pipeline device holds when each of its backwards runs.
// The memory model (projection/step_model.cpp) weighs every held (micro-batch,
// chunk) pair by its own chunk's bytes: under interleaving or a V a device's
// chunks differ in size and in parameters, so counting the held pairs alone
// and pricing them at the largest chunk misses where the peak is. It depends
// only on the device's own order of actions, not on their times.
// Pure logic; exposed for tests.
#pragma once

#include <vector>

#include "planning/schedules.h"

namespace ddpbench {

struct BackwardHeld {
  int chunk = 0;          // the chunk whose backward (b, B or W) runs
  std::vector<int> held;  // per chunk: micro-batches whose activations are held, the running one included
};

// One entry per backward action of `device`, in its order. A forward adds
// its (micro-batch, chunk); a whole backward or a W releases it after it
// runs (B keeps the graph for W).
std::vector<BackwardHeld> HeldAtBackwards(const PipelineTable& table, int device);

}  // namespace ddpbench
