// Held activations at each backward of a pipeline device (held_activations.h).
#include "planning/held_activations.h"

namespace ddpbench {

std::vector<BackwardHeld> HeldAtBackwards(const PipelineTable& table, int device) {
  std::vector<int> held(static_cast<size_t>(table.chunks()), 0);
  std::vector<BackwardHeld> out;
  for (const PipelineAction& a : table.actions.at(static_cast<size_t>(device))) {
    const auto c = static_cast<size_t>(a.chunk);
    if (a.op == PipelineOp::kForward) {
      ++held[c];
      continue;
    }
    out.push_back({a.chunk, held});
    if (a.op != PipelineOp::kBackwardInput) --held[c];
  }
  return out;
}

}  // namespace ddpbench
