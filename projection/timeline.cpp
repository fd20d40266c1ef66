// The two-stream timeline of a data-parallel step (timeline.h).
#include "projection/timeline.h"

#include <algorithm>
#include <stdexcept>

namespace ddpbench {

namespace {

// Where the communication stream's calls run: its lanes, the link their
// bytes share, and the last call's start (calls start in order).
struct CommLanes {
  std::vector<double> free_at;
  double link_free = 0, last_start = 0;

  // Runs `op`, ready at `ready`; its end.
  double Run(const TimelineOp& op, double ready) {
    auto lane = std::min_element(free_at.begin(), free_at.end());
    const double start = std::max({ready, *lane, last_start});
    const double wire = std::clamp(op.wire_ms, 0.0, op.ms);
    const double end = wire > 0 ? std::max(start + op.ms - wire, link_free) + wire : start + op.ms;
    if (wire > 0) link_free = end;
    last_start = start;
    return *lane = end;
  }
};

}  // namespace

std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops, int comm_lanes) {
  if (comm_lanes < 1) throw std::invalid_argument("timeline: the communication stream needs a lane at least");
  const int n = static_cast<int>(ops.size());
  std::vector<double> end(n, -1);
  std::vector<int> next(2, 0);  // per stream: the index to look at next
  double compute_free = 0;
  CommLanes comm{std::vector<double>(comm_lanes, 0)};
  int done = 0;
  for (const TimelineOp& op : ops)
    if (op.stream != 0 && op.stream != 1) throw std::invalid_argument("timeline: stream must be 0 or 1");
  auto advance = [&](int s) {
    while (next[s] < n && ops[next[s]].stream != s) ++next[s];
  };
  advance(0), advance(1);
  while (done < n) {
    bool progressed = false;
    for (int s = 0; s < 2; ++s) {
      if (next[s] >= n) continue;
      const TimelineOp& op = ops[next[s]];
      double ready = 0;
      bool met = true;
      for (int a : op.after) {
        if (a < 0 || a >= n) throw std::invalid_argument("timeline: an operation waits for one that does not exist");
        if (end[a] < 0) met = false;
        else ready = std::max(ready, end[a]);
      }
      if (!met) continue;
      end[next[s]] = s == 0 ? (compute_free = std::max(ready, compute_free) + op.ms) : comm.Run(op, ready);
      ++next[s], ++done, progressed = true;
      advance(s);
    }
    if (!progressed) throw std::invalid_argument("timeline: the operations wait for each other (deadlock)");
  }
  return end;
}

}  // namespace ddpbench
