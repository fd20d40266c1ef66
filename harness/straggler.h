// Straggler attribution: which rank made the others wait, by how much per
// step, and from which phase. Every rank's step takes as long as the slowest
// one's when a collective joins them, so per-rank step times cannot name the
// slow rank; the time each rank entered each collective can. From the flight
// records of the timed steps (flight_recorder.h), matched across ranks by
// group and order (send/recv: by channel and order):
//   - a rank's lateness at a collective is its entry time minus the median
//     of the others'; its lateness in a step is the largest of those;
//   - the straggler is the rank with the largest mean lateness per step,
//     named only above the noise: 5% of the step (at least 1 ms) above the
//     median of the other ranks' own mean lateness (the OS makes every
//     rank a little late now and then);
//   - a receive posted ahead (a pipeline's) counts from when its rank waits
//     for it, not from when it was posted;
//   - its phase is the one it spent longer in than the others did, between
//     the last collective it was on time for and the first it was late for
//     (so a rank slow in its data phase, late for the next forward's first
//     collective, is named for data, not forward);
//   - a rank late only because it waited, just before, for another rank (a
//     replica waiting in its shard group is late for the replicate
//     all-reduce) passes the blame to that rank; one late because its
//     previous collective ended later on it than on the others (one side of
//     a link slow) is no straggler: the phase says "communication";
//   - each rank's compute per step is the step net of its longest wait for a
//     late rank.
#pragma once

#include <string>
#include <vector>

#include "harness/flight_recorder.h"

namespace ddpbench {

struct StragglerFigures {
  bool measured = false;      // collectives of two or more ranks were matched
  int rank = -1;              // the straggler; -1 when none is above the noise
  double late_ms = 0;         // the latest rank's mean lateness per step (named or not)
  int latest_rank = -1;       // that rank, named or not
  std::string phase;          // data|forward|backward|optimizer ("" when not named);
                              // "communication" with rank -1: late from a slow link, not a rank
  double noise_ms = 0;        // the line a straggler must cross (the others' lateness + 5% of the step)
  int64_t steps = 0;          // timed steps read
  std::vector<double> late_per_rank_ms;     // each rank's mean lateness per step
  std::vector<double> compute_per_rank_ms;  // each rank's step net of waiting
};

// `records`: one per rank (any order; Record::rank says whose), timed steps
// only; `step_ms`: the run's mean step time.
StragglerFigures AttributeStragglers(const std::vector<flight::Record>& records, int world, double step_ms);

// The one-line summary ("rank 1 was 49.6 ms late per step, from backward;
// ...") or "" when there is nothing to say.
std::string DescribeStraggler(const StragglerFigures& s);

}  // namespace ddpbench
