// The two-stream timeline of a data-parallel step (timeline.h).
#include "projection/timeline.h"

#include <algorithm>
#include <stdexcept>

namespace ddpbench {

std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops) {
  const int n = static_cast<int>(ops.size());
  std::vector<double> end(n, -1);
  std::vector<int> next(2, 0);       // per stream: the index to look at next
  std::vector<double> free_at(2, 0);
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
      double start = free_at[s];
      bool ready = true;
      for (int a : op.after) {
        if (a < 0 || a >= n) throw std::invalid_argument("timeline: an operation waits for one that does not exist");
        if (end[a] < 0) ready = false;
        else start = std::max(start, end[a]);
      }
      if (!ready) continue;
      end[next[s]] = free_at[s] = start + op.ms;
      ++next[s], ++done, progressed = true;
      advance(s);
    }
    if (!progressed) throw std::invalid_argument("timeline: the operations wait for each other (deadlock)");
  }
  return end;
}

}  // namespace ddpbench
