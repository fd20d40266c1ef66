// One persistent worker thread per logical device, for the strategies that
// drive several devices from one process (dp replicas, mp/pmp stages), and
// the hand-off of tensors between those threads.
//
// A worker thread is the device: on a CPU machine it runs with the intra-op
// thread count of a logical device (at::init_num_threads) and charges its
// allocations to its logical device (CpuDeviceScope), so N workers model N
// equal compute units; on CUDA it has its device current and, when asked, its
// own stream from the pool for its whole life.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ddpbench {

// Close() on a Mailbox wakes every waiter and makes Pop() throw
// PipelineAborted, so one failing worker cannot leave the others waiting for
// ever.
class PipelineAborted : public std::runtime_error {
 public:
  PipelineAborted() : std::runtime_error("pipeline aborted: another worker failed") {}
};

// Values addressed by key (a micro-batch number): Pop(key) waits until that
// key's value has been pushed, so a pipeline schedule may consume its inputs
// in any order. Reset() reopens and empties it.
template <typename Key, typename T>
class Mailbox {
 public:
  void Push(const Key& key, T value) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.emplace(key, std::move(value));
    }
    ready_.notify_all();
  }
  T Pop(const Key& key) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return closed_ || items_.count(key) > 0; });
    if (closed_) throw PipelineAborted();
    auto it = items_.find(key);
    T value = std::move(it->second);
    items_.erase(it);
    return value;
  }
  // Whether Pop(key) would return at once (no wait).
  bool Has(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.count(key) > 0;
  }
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = false;
    items_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<Key, T> items_;
  bool closed_ = false;
};

// A tensor on its way from one worker to another, with what the receiver
// needs to use it only after the sender's work that produced it.
struct Handoff {
  torch::Tensor tensor;
  int from_cpu_device = -1;          // sender's logical CPU device; -1: host data
  std::shared_ptr<void> cuda_ready;  // CUDA: the sender's stream and an event on it
};

// In the sender's thread. `host` marks data that belongs to no device (a
// batch from the data loader), which a CPU receiver reads in place.
Handoff Send(const torch::Tensor& tensor, bool host = false);
// In the receiver's thread: the tensor on `device`, ordered after the
// sender's work. CPU: a copy owned (and charged to) the receiving logical
// device when it came from another one, as a transfer between GPUs would be;
// CUDA: a copy on the sender's stream into this thread's current stream, or,
// on a shared GPU, the same tensor with this stream waiting for the sender.
torch::Tensor Receive(const Handoff& handoff, torch::Device device);

class DeviceWorkers {
 public:
  // `own_streams`: on CUDA each worker uses its own stream (pipeline stages
  // overlapping on one GPU); otherwise the device's default stream.
  DeviceWorkers(const std::vector<torch::Device>& devices, bool own_streams);
  ~DeviceWorkers();
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  // Runs job(i) on worker i for i in [0, count) (count < 0: all) at the same
  // time and waits for all of them; then rethrows the first failure, one
  // that is not PipelineAborted when there is one.
  void RunAll(const std::function<void(int)>& job, int count = -1);
  // Runs job on worker i and waits for it.
  void Run(int i, const std::function<void()>& job);

 private:
  struct Worker;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Waits until the calling thread's current stream on `device` has finished
// its work (CUDA); nothing on the CPU, where work is done when it returns.
void WaitForCurrentStream(torch::Device device);

}  // namespace ddpbench
