#include "strategies/device_workers.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <future>
#include <optional>

#include "harness/memory.h"
#include "harness/trace.h"

#ifdef DDPBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddpbench {

#ifdef DDPBENCH_WITH_CUDA
namespace {
struct CudaReady {
  explicit CudaReady(c10::cuda::CUDAStream s) : stream(s) {}
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAEvent event;
};
}  // namespace
#endif

Handoff Send(const torch::Tensor& tensor, bool host) {
  Handoff handoff;
  handoff.tensor = tensor;
  handoff.from_cpu_device = host ? -1 : CurrentCpuDevice();
#ifdef DDPBENCH_WITH_CUDA
  if (tensor.is_cuda()) {
    auto ready = std::make_shared<CudaReady>(c10::cuda::getCurrentCUDAStream(tensor.device().index()));
    ready->event.record(ready->stream);
    handoff.cuda_ready = ready;
  }
#endif
  return handoff;
}

torch::Tensor Receive(const Handoff& handoff, torch::Device device) {
  const torch::Tensor& t = handoff.tensor;
#ifdef DDPBENCH_WITH_CUDA
  if (t.is_cuda() && device.is_cuda()) {
    auto ready = std::static_pointer_cast<CudaReady>(handoff.cuda_ready);
    auto mine = c10::cuda::getCurrentCUDAStream(device.index());
    if (t.device() == device) {
      // A shared GPU: no copy. This stream waits for the sender, and the
      // caching allocator must not reuse the memory before this stream is done.
      ready->event.block(mine);
      t.record_stream(mine);
      return t;
    }
    // ATen copies between GPUs on the source device's current stream of the
    // calling thread (with a two-way barrier against the destination's
    // current stream): make that the sender's stream, so the copy follows the
    // work that produced the tensor.
    c10::cuda::CUDAStreamGuard source(ready->stream);
    return t.to(device);
  }
#endif
  if (!device.is_cpu() || !t.is_cpu()) return t.to(device);
  // CPU logical devices share memory; a tensor from another logical device is
  // copied so the receiving device owns its copy, as after a transfer.
  const int here = CurrentCpuDevice();
  if (handoff.from_cpu_device >= 0 && handoff.from_cpu_device != here) return t.clone();
  return t;
}

void WaitForCurrentStream(torch::Device device) {
#ifdef DDPBENCH_WITH_CUDA
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#endif
}

struct DeviceWorkers::Worker {
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::packaged_task<void()>> jobs;
  bool stop = false;

  void Loop(int index, torch::Device device, bool own_stream, int threads) {
    // A logical device's intra-op threads (the creating thread's count: the
    // runner sets it to --threads-per-device) and memory account.
    at::set_num_threads(threads);
    at::init_num_threads();
    CpuDeviceScope scope(device.is_cpu() ? index : -1);
    trace::NameThread("device " + std::to_string(index) + " worker", 1 + index);
#ifdef DDPBENCH_WITH_CUDA
    std::optional<c10::cuda::CUDAGuard> device_guard;
    std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
    if (device.is_cuda()) {
      device_guard.emplace(device.index());
      if (own_stream) stream_guard.emplace(c10::cuda::getStreamFromPool(false, device.index()));
    }
#endif
    for (;;) {
      std::packaged_task<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || !jobs.empty(); });
        if (jobs.empty()) return;  // stop, and nothing left to do
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();  // exceptions land in the job's future
    }
  }

  std::future<void> Post(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    auto done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex);
      jobs.push_back(std::move(task));
    }
    wake.notify_one();
    return done;
  }
};

DeviceWorkers::DeviceWorkers(const std::vector<torch::Device>& devices, bool own_streams) {
  const int threads = at::get_num_threads();
  for (size_t i = 0; i < devices.size(); ++i) {
    workers_.push_back(std::make_unique<Worker>());
    Worker* w = workers_.back().get();
    w->thread = std::thread([w, i, d = devices[i], own_streams, threads] {
      w->Loop(static_cast<int>(i), d, own_streams, threads);
    });
  }
}

DeviceWorkers::~DeviceWorkers() {
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lock(w->mutex);
      w->stop = true;
    }
    w->wake.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

void DeviceWorkers::RunAll(const std::function<void(int)>& job, int count) {
  if (count < 0 || count > size()) count = size();
  std::vector<std::future<void>> done;
  for (int i = 0; i < count; ++i) done.push_back(workers_[i]->Post([&job, i] { job(i); }));
  std::exception_ptr first, first_real;
  for (auto& f : done) {
    try {
      f.get();
    } catch (const PipelineAborted&) {
      if (!first) first = std::current_exception();
    } catch (...) {
      if (!first_real) first_real = std::current_exception();
    }
  }
  if (first_real) std::rethrow_exception(first_real);
  if (first) std::rethrow_exception(first);
}

void DeviceWorkers::Run(int i, const std::function<void()>& job) {
  TORCH_CHECK(i >= 0 && i < size(), "DeviceWorkers::Run: no worker ", i);
  workers_[i]->Post(job).get();
}

}  // namespace ddpbench
