// The flight records between ranks, through the rendezvous store (which
// needs no collective, so it still works when a collective is stuck):
//   - every rank publishes one progress line (flight_recorder.h) every tenth
//     of a second (slower in a world of more than 8), and writes its record to disk when any rank (or the
//     launcher) asks for records; a rank still running 4.5 s after that is
//     stuck, and ends itself (exit 7), whatever launcher started it;
//   - a rank whose collective failed writes its record, asks for everyone's,
//     and names the rank that never entered the collective it waited in, with
//     what that rank was doing last (the first rank to get there prints it);
//   - at the end of a run, the timed steps' records are gathered on rank 0
//     for the straggler attribution (straggler.h).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>
#include <vector>

#include "harness/straggler.h"

namespace ddpbench {

struct DistContext;

// Keys under the ranks' store prefix: a rank's progress line, the request
// for records (its value: why), and "written" marks.
std::string FlightProgressKey(int rank);
extern const char* const kFlightDumpKey;
std::string FlightWrittenKey(int rank);

// The progress publisher and record writer of one rank; stops
// (without waiting on a stuck store) when destroyed.
class FlightWatch {
 public:
  FlightWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int world);
  ~FlightWatch();
  FlightWatch(const FlightWatch&) = delete;
  FlightWatch& operator=(const FlightWatch&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// After a collective failed on this rank (`error`: its message): writes this
// rank's record, asks every rank for theirs, waits (at most a few seconds)
// for them and returns the line naming the rank that never entered the
// collective; "" when another rank named it first or nothing can be named.
std::string ReportCollectiveFailure(DistContext& dist, const std::string& error);

// Collective at the end of a run: rank 0 gets the attribution over every
// rank's timed steps (the last 200); other ranks get an empty one.
StragglerFigures GatherStragglers(DistContext& dist, double step_ms);

// The launcher, which serves the ranks' store: asks every rank to write its
// record and waits (at most `wait_s`) for the ranks in `alive`; then rank
// `rank`'s last progress, described ("" when it published none).
void AskForRecords(c10::intrusive_ptr<c10d::Store> store, const std::string& why, const std::vector<int>& alive,
                   double wait_s);
std::string LastProgressOf(c10::intrusive_ptr<c10d::Store> store, int rank);

}  // namespace ddpbench
