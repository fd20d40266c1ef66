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
  Timeline(const std::vector<TimelineOp>& ops, int comm_lanes, std::optional<CoreWait> wait)
      : ops_(ops), n_(static_cast<int>(ops.size())), wait_(wait), end_(n_, -1),
        comm_{std::vector<double>(comm_lanes, 0)} {
    for (const TimelineOp& op : ops) {
      if (op.stream != 0 && op.stream != 1) throw std::invalid_argument("timeline: stream must be 0 or 1");
      for (int a : op.after)
        if (a < 0 || a >= n_) throw std::invalid_argument("timeline: an operation waits for one that does not exist");
    }
    Advance(0), Advance(1);
  }

  std::vector<double> Run() {
    while (done_ < n_) {
      bool progressed = false;
      // Every compute operation that can be placed: a pending call's end
      // depends on what computes at its end on idle cores.
      for (double ready; next_[0] < n_ && Ready(next_[0], &ready); progressed = true)
        Place(0, compute_.Run(ready, ops_[next_[0]].ms));
      if (pending_) {
        FinishPending();
        progressed = true;
      } else if (double ready; next_[1] < n_ && Ready(next_[1], &ready)) {
        StartCall(ready);
        progressed = true;
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
  void StartCall(double ready) {
    const auto [lane, end] = comm_.Start(ops_[next_[1]], ready);
    if (!wait_) {
      comm_.Finish(lane, end);
      Place(1, end);
      return;
    }
    pending_ = true, pending_lane_ = lane, pending_end_ = end;
  }
  // The compute stream is placed up to the pending call's end, or waits:
  // the call ends then, or where it falls inside a stretch of computation,
  // `wake_ms` after that stretch or `latency_ms` after its due end, whichever
  // comes first.
  void FinishPending() {
    const double busy_until = compute_.BusyUntil(pending_end_);
    const double end = busy_until < 0 ? pending_end_
                                      : std::min(pending_end_ + wait_->latency_ms, busy_until + wait_->wake_ms);
    comm_.Finish(pending_lane_, end);
    Place(1, end);
    pending_ = false;
  }

  const std::vector<TimelineOp>& ops_;
  const int n_;
  const std::optional<CoreWait> wait_;
  std::vector<double> end_;
  int next_[2] = {0, 0};  // per stream: the index to look at next
  int done_ = 0;
  ComputeStream compute_;
  CommLanes comm_;
  bool pending_ = false;  // the call at next_[1] has started and waits to end
  size_t pending_lane_ = 0;
  double pending_end_ = 0;
};

}  // namespace

std::vector<double> RunTimeline(const std::vector<TimelineOp>& ops, int comm_lanes, std::optional<CoreWait> wait) {
  if (comm_lanes < 1) throw std::invalid_argument("timeline: the communication stream needs a lane at least");
  if (wait && !(wait->wake_ms >= 0 && wait->latency_ms >= 0))
    throw std::invalid_argument("timeline: a call's wait for the core must be >= 0");
  return Timeline(ops, comm_lanes, wait).Run();
}

}  // namespace ddpbench
