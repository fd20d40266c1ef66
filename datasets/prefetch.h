// A bounded, ordered prefetcher: `threads` workers build batches 0, 1, 2, ...
// ahead of the consumer, at most `threads` batches ahead. Batch k is produced
// by build(k) alone, and the consumer always receives batch k on its k-th call
// whatever the threads' timing, so a prefetching source yields exactly what a
// synchronous one does (the determinism the parity check relies on). Private
// to datasets/.
#pragma once

#include "datasets/dataset.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace ddpbench::detail {

class PrefetchQueue {
 public:
  using BuildFn = std::function<Batch(int64_t)>;
  // limit < 0: endless; else Next() returns an empty Batch once batch `limit`
  // is reached. threads == 0: build(k) runs inside Next(). The first batch
  // is number `first`. At most `ahead` batches (0: `threads`) are built or
  // waiting beyond the one the consumer takes next.
  PrefetchQueue(BuildFn build, int64_t limit, int threads, int64_t first = 0, int ahead = 0);
  ~PrefetchQueue();  // stops and joins the workers; never waits for the consumer
  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // The next batch in order; rethrows (on the consumer's thread) an error that
  // building that batch raised.
  Batch Next();

  // Batches built so far and the seconds the builders spent on them (summed
  // over threads): the rate the builders sustain when never kept waiting.
  int64_t Built() const { return built_.load(); }
  double BusySeconds() const { return static_cast<double>(busy_ns_.load()) * 1e-9; }
  int Threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void Work();
  Batch TimedBuild(int64_t k);  // build_(k), its time and count added to busy_ns_ and built_

  BuildFn build_;
  const int64_t limit_;
  const int64_t capacity_;
  std::mutex mu_;
  std::condition_variable ready_;  // a slot was filled
  std::condition_variable space_;  // the consumer advanced, or stop
  int64_t next_claim_ = 0;         // next batch a worker will build
  int64_t next_take_ = 0;          // next batch the consumer will get
  std::map<int64_t, Slot> done_;   // built, not yet taken
  bool stop_ = false;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> built_{0}, busy_ns_{0};
};

}  // namespace ddpbench::detail
