// The timeline of a data-parallel step: compute and its communication streams (timeline.h).
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

  // Starts `op`, ready at `ready`: its lane and its end on idle cores. The
  // lane stays taken until Finish says when the call ended.
  std::pair<size_t, double> Start(const TimelineOp& op, double ready) {
    const auto lane = static_cast<size_t>(std::min_element(free_at.begin(), free_at.end()) - free_at.begin());
    const double start = std::max({ready, free_at[lane], last_start});
    const double wire = std::clamp(op.wire_ms, 0.0, op.ms);
    const double end = wire > 0 ? std::max(start + op.ms - wire, link_free) + wire : start + op.ms;
    if (wire > 0) link_free = end;
    last_start = start;
    return {lane, end};
  }
  void Finish(size_t lane, double end) { free_at[lane] = end; }
};

// The compute stream's operations placed so far, in order.
struct ComputeStream {
  std::vector<std::pair<double, double>> ran;  // (start, end)
  double free = 0;

  double Run(double ready, double ms) {
    const double start = std::max(ready, free);
    ran.emplace_back(start, free = start + ms);
    return free;
  }
  // The end of the busy stretch (operations one straight after another)
  // that `t` falls strictly inside, or -1 where the stream waits at `t`.
  double BusyUntil(double t) const {
    size_t i = ran.size();
    while (i > 0 && ran[i - 1].first >= t) --i;
    if (i == 0 || ran[i - 1].second <= t) return -1;
    double end = ran[i - 1].second;
    for (size_t k = i; k < ran.size() && ran[k].first <= end; ++k) end = ran[k].second;
    return end;
  }
};

class Timeline {
 public:
  Timeline(const std::vector<TimelineOp>& ops, const std::vector<int>& comm_lanes, std::optional<CoreWait> wait)
      : ops_(ops), n_(static_cast<int>(ops.size())), wait_(wait), end_(n_, -1),
        next_(comm_lanes.size() + 1, 0), pending_(comm_lanes.size()) {
    for (int lanes : comm_lanes) comm_.push_back(CommLanes{std::vector<double>(lanes, 0)});
    const int streams = static_cast<int>(next_.size());
    for (const TimelineOp& op : ops) {
      if (op.stream < 0 || op.stream >= streams)
        throw std::invalid_argument("timeline: stream must be 0 (compute) or a communication stream");
      for (int a : op.after)
        if (a < 0 || a >= n_) throw std::invalid_argument("timeline: an operation waits for one that does not exist");
    }
    for (int s = 0; s < streams; ++s) Advance(s);
  }

  std::vector<double> Run() {
    while (done_ < n_) {
      bool progressed = false;
      // Every compute operation that can be placed: a pending call's end
      // depends on what computes at its end on idle cores.
      for (double ready; next_[0] < n_ && Ready(next_[0], &ready); progressed = true)
        Place(0, compute_.Run(ready, ops_[next_[0]].ms));
      for (int s = 1; s < static_cast<int>(next_.size()); ++s) {
        if (pending_[s - 1].on) {
          FinishPending(s);
          progressed = true;
        } else if (double ready; next_[s] < n_ && Ready(next_[s], &ready)) {
          StartCall(s, ready);
          progressed = true;
        }
      }
      if (!progressed) throw std::invalid_argument("timeline: the operations wait for each other (deadlock)");
    }
    return end_;
  }

 private:
  void Advance(int s) {
    while (next_[s] < n_ && ops_[next_[s]].stream != s) ++next_[s];
  }
  bool Ready(int i, double* ready) const {
    *ready = 0;
    for (int a : ops_[i].after) {
      if (end_[a] < 0) return false;
      *ready = std::max(*ready, end_[a]);
    }
    return true;
  }
  void Place(int s, double end) {
    end_[next_[s]] = end;
    ++next_[s], ++done_;
    Advance(s);
  }
  // A call on cores that also compute cannot end until it is let onto one:
  // it stays pending until the compute stream is placed past its end.
  void StartCall(int s, double ready) {
    const auto [lane, end] = comm_[s - 1].Start(ops_[next_[s]], ready);
    if (!wait_) {
      comm_[s - 1].Finish(lane, end);
      Place(s, end);
      return;
    }
    pending_[s - 1] = {true, lane, end};
  }
  // The compute stream is placed up to the pending call's end, or waits:
  // the call ends then, or where it falls inside a stretch of computation,
  // `wake_ms` after that stretch or `latency_ms` after its due end, whichever
  // comes first.
  void FinishPending(int s) {
    Pending& p = pending_[s - 1];
    const double busy_until = compute_.BusyUntil(p.end);
    const double end = busy_until < 0 ? p.end : std::min(p.end + wait_->latency_ms, busy_until + wait_->wake_ms);
    comm_[s - 1].Finish(p.lane, end);
    Place(s, end);
    p.on = false;
  }

  // A communication stream's call that has started and waits to end.
  struct Pending {
    bool on = false;
    size_t lane = 0;
    double end = 0;
  };

  const std::vector<TimelineOp>& ops_;
  const int n_;
  const std::optional<CoreWait> wait_;
  std::vector<double> end_;
  std::vector<int> next_;  // per stream: the index to look at next
  int done_ = 0;
  ComputeStream compute_;
  std::vector<CommLanes> comm_;    // per communication stream (1, 2, ...)
  std::vector<Pending> pending_;   // per communication stream
};

}  // namespace

std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops, int comm_lanes, std::optional<CoreWait> wait) {
  return RunTimeline(ops, std::vector<int>{comm_lanes}, wait);
}

std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops, const std::vector<int>& comm_lanes,
                                std::optional<CoreWait> wait) {
  if (comm_lanes.empty()) throw std::invalid_argument("timeline: a communication stream at least");
  for (int lanes : comm_lanes)
    if (lanes < 1) throw std::invalid_argument("timeline: the communication stream needs a lane at least");
  if (wait && !(wait->wake_ms >= 0 && wait->latency_ms >= 0))
    throw std::invalid_argument("timeline: a call's wait for the core must be >= 0");
  return Timeline(ops, comm_lanes, wait).Run();
}

}  // namespace ddpbench
