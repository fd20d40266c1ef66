// See prefetch.h. Workers claim batch numbers under one mutex and build them
// outside it; finished batches wait in a map keyed by number, so a slow batch
// never lets a later one overtake it. The bound (claimed < taken + capacity)
// keeps memory fixed when the consumer is slow, and the destructor only has to
// wait for batches already being built, never for the consumer.
#include "datasets/prefetch.h"

#include <torch/torch.h>

#include <chrono>

namespace ddpbench::detail {

PrefetchQueue::PrefetchQueue(BuildFn build, int64_t limit, int threads, int64_t first, int ahead)
    : build_(std::move(build)), limit_(limit), capacity_(threads <= 0 ? 0 : ahead > 0 ? ahead : threads), next_claim_(first),
      next_take_(first) {
  if (threads < 0) throw std::invalid_argument("prefetch must be >= 0, got " + std::to_string(threads));
  threads_.reserve(static_cast<size_t>(threads));
  try {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

PrefetchQueue::~PrefetchQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_.notify_all();
  for (auto& t : threads_) t.join();
}

Batch PrefetchQueue::TimedBuild(int64_t k) {
  const auto start = std::chrono::steady_clock::now();
  struct Count {  // counted whether build_ returns or throws
    PrefetchQueue* q;
    std::chrono::steady_clock::time_point start;
    ~Count() {
      q->busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
      ++q->built_;
    }
  } count{this, start};
  return build_(k);
}

void PrefetchQueue::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    space_.wait(lock, [this] {
      return stop_ || (next_claim_ < next_take_ + capacity_ && (limit_ < 0 || next_claim_ < limit_));
    });
    if (stop_) return;
    const int64_t k = next_claim_++;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = TimedBuild(k);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    done_.emplace(k, std::move(slot));
    ready_.notify_all();
  }
}

Batch PrefetchQueue::Next() {
  if (threads_.empty()) {
    if (limit_ >= 0 && next_take_ >= limit_) return {};
    return TimedBuild(next_take_++);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (limit_ >= 0 && next_take_ >= limit_) return {};
  const int64_t k = next_take_;
  ready_.wait(lock, [&] { return done_.count(k) != 0; });
  auto node = done_.extract(k);
  ++next_take_;
  lock.unlock();
  space_.notify_all();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().batch);
}

}  // namespace ddpbench::detail
