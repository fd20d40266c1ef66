// What the multi-process data-parallel strategies (ddp, zero1) share: torch
// DDP's bucket sizes, and the start and end of the asynchronous collectives
// of one backward pass with the length of their union: how long
// communication took, and how much of it happened before backward's compute
// ended (hidden behind it). On CPU these are host timestamps (Gloo completes
// a future when the transfer is done); on CUDA, where a NCCL future completes
// when the work is enqueued, they are CUDA events: the start on the compute
// stream when the bucket is handed over, the end on a stream that waits for
// the collective, read after the timed loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "harness/cuda_support.h"
#include "harness/phase.h"
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

  // CUDA: the same intervals as pairs of events.
  std::vector<std::pair<std::shared_ptr<CudaMark>, std::shared_ptr<CudaMark>>> marks;
  // A bucket's collective starts: on CUDA an event on the current (compute)
  // stream, where the bucket's gradients are ready; none on CPU.
  static std::shared_ptr<CudaMark> CudaStart(bool cuda, int device) {
    if (!cuda) return nullptr;
    auto mark = std::make_shared<CudaMark>(device);
    mark->Record();
    return mark;
  }
  // Called from the collective's then-callback: the interval ends now (CPU),
  // or at an event on the callback's current stream, which waits for the
  // collective (CUDA).
  void End(CommClock::time_point start, const std::shared_ptr<CudaMark>& cuda_start, int device, const char* op,
           int64_t bucket) {
    if (!cuda_start) return Add(start, CommClock::now(), op, bucket);
    auto end = std::make_shared<CudaMark>(device);
    end->Record();
    std::lock_guard<std::mutex> lock(mutex);
    marks.emplace_back(cuda_start, std::move(end));
  }
  // Takes this backward's events; the function returns what BackwardMs()
  // does, once the device has run them (it waits for them; call it after the
  // timed loop). Reads the events once however often it is called.
  std::function<std::pair<double, double>()> TakeCudaBackwardMs();
};

// Gradient communication per step, and its part hidden behind backward
// (CUDA: read from events once the loop is done).
struct OverlapStats {
  std::vector<std::function<std::pair<double, double>()>> steps;  // {communication, hidden} ms
  void Add(double comm, double hidden) {
    steps.push_back([comm, hidden] { return std::make_pair(comm, hidden); });
  }
  void AddDeferred(std::function<std::pair<double, double>()> step) { steps.push_back(std::move(step)); }
  // hidden / communication over the steps from `first` on (the timed steps
  // when `first` is the warm-up); negative when nothing was communicated.
  double HiddenFraction(size_t first) const {
    double comm = 0, hidden = 0;
    for (size_t i = first; i < steps.size(); ++i) {
      const auto [c, h] = steps[i]();
      comm += c;
      hidden += h;
    }
    return comm > 0 ? hidden / comm : -1;
  }
};

// CUDA: this backward's communication, read after the timed loop, into the
// step's communication time and the overlap figures.
inline void DeferCudaBackwardComm(CommTimeline& timeline, PhaseTimer& timer, OverlapStats& overlap) {
  auto backward_ms = timeline.TakeCudaBackwardMs();
  timer.AddDeferred(Phase::kCommunication, [backward_ms] { return backward_ms().first; });
  overlap.AddDeferred(std::move(backward_ms));
}

// Length of the union of `intervals` (ms offsets), and of its part before
// `until`, in ms.
inline std::pair<double, double> UnionMs(std::vector<std::pair<double, double>> intervals, double until) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, before = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  auto close = [&] {
    if (!open) return;
    total += cur_end - cur_start;
    before += std::max(0.0, std::min(cur_end, until) - cur_start);
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

// The same on host timestamps.
inline std::pair<double, double> UnionMs(
    const std::vector<std::pair<CommClock::time_point, CommClock::time_point>>& intervals,
    CommClock::time_point until) {
  if (intervals.empty()) return {0, 0};
  CommClock::time_point origin = intervals.front().first;
  for (const auto& iv : intervals) origin = std::min(origin, iv.first);
  auto ms = [&](CommClock::time_point t) { return std::chrono::duration<double, std::milli>(t - origin).count(); };
  std::vector<std::pair<double, double>> offsets;
  for (const auto& [s, e] : intervals) offsets.emplace_back(ms(s), ms(e));
  return UnionMs(std::move(offsets), ms(until));
}

inline std::pair<double, double> CommTimeline::BackwardMs() {
  std::lock_guard<std::mutex> lock(mutex);
  if (intervals.empty()) return {0, 0};
  CommClock::time_point compute_end = intervals.front().first;
  for (const auto& iv : intervals) compute_end = std::max(compute_end, iv.first);
  return UnionMs(intervals, compute_end);
}

inline std::function<std::pair<double, double>()> CommTimeline::TakeCudaBackwardMs() {
  struct Step {
    std::vector<std::pair<std::shared_ptr<CudaMark>, std::shared_ptr<CudaMark>>> marks;
    std::optional<std::pair<double, double>> result;
  };
  auto step = std::make_shared<Step>();
  {
    std::lock_guard<std::mutex> lock(mutex);
    step->marks.swap(marks);
  }
  return [step] {
    if (!step->result) {
      std::vector<std::pair<double, double>> offsets;
      double compute_end = 0;
      for (auto& [start, end] : step->marks) {
        CudaMark& origin = *step->marks.front().first;  // offsets from the first hand-over
        const double s = start->MsAfter(origin);
        offsets.emplace_back(s, end->MsAfter(origin));
        compute_end = std::max(compute_end, s);
      }
      step->result = offsets.empty() ? std::make_pair(0.0, 0.0) : UnionMs(std::move(offsets), compute_end);
      step->marks.clear();  // the events are read: release them
    }
    return *step->result;
  };
}

}  // namespace ddpbench
