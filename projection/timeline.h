// Streams of work, as a data-parallel step runs them: compute (forward,
// backward, optimizer) on one, collectives on another (with a device mesh,
// the replicate group's on a third), each stream taking
// its operations in the order given, each operation starting once its stream
// is free and the operations it waits for have ended. The step models
// (step_model.h) say which operations a strategy runs and what each waits
// for; this runs them. Pure logic.
//
// The communication stream may have several lanes: Gloo runs a process
// group's collectives on two threads, so a call can start while the one
// before it is still moving bytes (NCCL runs one stream: one lane). Calls
// still start in the order given (the backend's queue), each on the first
// free lane; a call's per-call part (ms - wire_ms) runs on its lane alone,
// its wire part needs the link, which carries one call's bytes at a time.
// With one lane, wire_ms changes nothing.
//
// On CPU devices the cores that compute also run the calls: a call whose
// bytes have arrived still needs its thread to get a core before it ends
// (research/projection-record.md, "calls that wait for the core"). Given a CoreWait, a
// call that would end while the compute stream runs ends `wake_ms` after
// that stretch of computation, or `latency_ms` after it would have ended
// if that is sooner (the scheduler lets it onto the core in the meantime);
// one that would end while the compute stream waits ends then.
#pragma once

#include <optional>
#include <vector>

namespace ddpbench {

struct CoreWait {
  double wake_ms = 0, latency_ms = 0;
};

struct TimelineOp {
  int stream = 0;          // 0 compute, 1 communication (2, ...: another process group's, e.g. a mesh's replicas)
  double ms = 0;
  std::vector<int> after;  // indices of operations that must end first
  double wire_ms = 0;      // communication: the part of ms that moves bytes over the link
};

// End time of every operation; std::invalid_argument if the waits can never
// be met (an operation waits for a later one of its own stream, or a cycle),
// `comm_lanes` < 1 or a CoreWait time below 0.
std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops, int comm_lanes = 1,
                                std::optional<CoreWait> wait = std::nullopt);
// Several communication streams (stream s = 1, 2, ... has comm_lanes[s - 1]
// lanes), each a process group with its own threads and link: a device
// mesh's group and replicate group run their collectives side by side.
std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops, const std::vector<int>& comm_lanes,
                                std::optional<CoreWait> wait = std::nullopt);

}  // namespace ddpbench
