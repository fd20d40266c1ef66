// What the multi-process data-parallel strategies (ddp, zero1) share: torch
// DDP's bucket sizes, and the timestamps of the asynchronous
// collectives of one backward pass (CPU only: with NCCL a future completes
// when the work is enqueued, not done) with the length of their union: how
// long communication took, and how much of it happened before backward's
// compute ended (hidden behind it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "harness/trace.h"

namespace ddpbench {

constexpr int64_t kFirstBucketBytes = 1024 * 1024;     // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES

using CommClock = std::chrono::steady_clock;

// Start and end of every bucket's collective in one backward.
struct CommTimeline {
  std::mutex mutex;
  std::vector<std::pair<CommClock::time_point, CommClock::time_point>> intervals;
  bool ends_are_real = true;  // false on CUDA, where a NCCL future completes when enqueued
  // Collective `op` of `bucket`, from its launch to its completion; also on
  // --trace's comm track when the end is the transfer's end.
  void Add(CommClock::time_point start, CommClock::time_point end, const char* op, int64_t bucket) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      intervals.emplace_back(start, end);
    }
    if (ends_are_real) trace::Collective(op, bucket, start, end);
  }
  // The union of the intervals, and its part before backward's compute ended
  // (when the last bucket was handed over), in ms; {0, 0} when empty.
  std::pair<double, double> BackwardMs();
};

// Gradient communication per step, and its part hidden behind backward.
struct OverlapStats {
  std::vector<double> comm_ms, hidden_ms;
  void Add(double comm, double hidden) {
    comm_ms.push_back(comm);
    hidden_ms.push_back(hidden);
  }
  // hidden / communication over the steps from `first` on (the timed steps
  // when `first` is the warm-up); negative when nothing was communicated.
  double HiddenFraction(size_t first) const {
    double comm = 0, hidden = 0;
    for (size_t i = first; i < comm_ms.size(); ++i) {
      comm += comm_ms[i];
      hidden += hidden_ms[i];
    }
    return comm > 0 ? hidden / comm : -1;
  }
};

// Length of the union of `intervals`, and of its part before `until`, in ms.
inline std::pair<double, double> UnionMs(
    std::vector<std::pair<CommClock::time_point, CommClock::time_point>> intervals,
    CommClock::time_point until) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, before = 0;
  CommClock::time_point cur_start{}, cur_end{};
  bool open = false;
  auto close = [&] {
    if (!open) return;
    total += std::chrono::duration<double, std::milli>(cur_end - cur_start).count();
    auto cut = std::min(cur_end, until);
    if (cut > cur_start) before += std::chrono::duration<double, std::milli>(cut - cur_start).count();
  };
  for (const auto& [s, e] : intervals) {
    if (open && s <= cur_end) {
      cur_end = std::max(cur_end, e);
      continue;
    }
    close();
    cur_start = s;
    cur_end = e;
    open = true;
  }
  close();
  return {total, before};
}

inline std::pair<double, double> CommTimeline::BackwardMs() {
  std::lock_guard<std::mutex> lock(mutex);
  if (intervals.empty()) return {0, 0};
  CommClock::time_point compute_end = intervals.front().first;
  for (const auto& iv : intervals) compute_end = std::max(compute_end, iv.first);
  return UnionMs(intervals, compute_end);
}

}  // namespace ddpbench
