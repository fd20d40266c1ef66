// Two streams of work, as a data-parallel step runs them: compute (forward,
// backward, optimizer) on one, collectives on the other, each stream taking
// its operations in the order given, each operation starting once its stream
// is free and the operations it waits for have ended. The step models
// (step_model.h) say which operations a strategy runs and what each waits
// for; this runs them. Pure logic.
#pragma once

#include <vector>

namespace ddpbench {

struct TimelineOp {
  int stream = 0;          // 0 compute, 1 communication
  double ms = 0;
  std::vector<int> after;  // indices of operations that must end first
};

// End time of every operation; std::invalid_argument if the waits can never
// be met (an operation waits for a later one of its own stream, or a cycle).
std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops);

}  // namespace ddpbench
