// Per-device memory. CUDA: the caching allocator's peak allocated and peak
// reserved bytes. CPU: a tracking allocator installed in front of c10's CPU
// allocator attributes every tensor allocation to the logical device of the
// thread that made it (CpuDeviceScope), so a CPU "device" reports a peak of
// live tensor bytes just as a GPU does; peak RSS is reported beside it.
#pragma once

#include <torch/types.h>

#include <stdexcept>
#include <string>

namespace ddpbench {

// A device's peak memory over the timed steps, as a row reports it.
struct DeviceMemory {
  double peak_allocated_mb = 0;  // CUDA caching-allocator / CPU tracked tensor bytes
  double peak_reserved_mb = -1;  // CUDA only; -1: not applicable
};

constexpr int kMaxCpuDevices = 1024;

// Installs the tracking allocator (idempotent, thread-safe). `device_limit_bytes`
// > 0 gives every CPU logical device that capacity (--cpu-device-memory-mb): an
// allocation that would take a device past it fails as a GPU's would.
void InstallCpuMemoryTracker(int64_t device_limit_bytes = 0);

// A device ran out of memory. what(): one line naming the device, the bytes
// asked for and the bytes the run held there (without the advice, which the
// entry point adds).
class DeviceOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// "out of memory on DEVICE: asked for X, the run held Y there" (sizes in MiB/GiB).
std::string OutOfMemoryLine(const std::string& device, int64_t asked_bytes, int64_t held_bytes);
// "12.3 MiB" / "4.56 GiB".
std::string FormatBytes(int64_t bytes);
// What to try, appended to every out-of-memory message (the strategies that
// divide the memory named from their traits).
std::string OutOfMemoryAdvice();

// How freed CPU tensor memory is reused (--cpu-malloc), set once per process
// before the worker threads start. "reuse": every thread allocates from
// glibc's main heap, blocks up to 32 MiB come from it (not a private mmap
// each) and it is never trimmed, so a step's activations and gradients land
// on pages already mapped. "system": glibc's defaults: per-thread heaps of at
// most 64 MiB that are trimmed and unmapped as they empty, and a moving
// mmap threshold, so a step may fault its pages in again. On the 2-core VM
// that made the same zero-bubble run fault 1.8 or 3.4 million times from one
// process to the next (its second stage 1.6x slower in the second case);
// "reuse" faulted 0.12 million times, every run. ConfigError on another mode.
void ConfigureCpuMalloc(const std::string& mode);

// Attributes CPU allocations made by this thread to logical device `index`
// while alive (-1: none, e.g. data-loading threads).
class CpuDeviceScope {
 public:
  explicit CpuDeviceScope(int index);
  ~CpuDeviceScope();
  CpuDeviceScope(const CpuDeviceScope&) = delete;
  CpuDeviceScope& operator=(const CpuDeviceScope&) = delete;

 private:
  int previous_;
};
int CurrentCpuDevice();

// Current and peak tracked bytes of CPU logical device `index`.
int64_t CpuAllocatedBytes(int index);
int64_t CpuPeakBytes(int index);

void ResetPeakMemory(const std::vector<torch::Device>& devices);
// `logical_index` is the CPU logical device number (ignored for CUDA).
DeviceMemory MeasureDeviceMemory(const torch::Device& device, int logical_index);
// Bytes allocated on the device now (CPU: tracked bytes of the logical device).
int64_t AllocatedBytesNow(const torch::Device& device, int logical_index);
double PeakRssMb();

}  // namespace ddpbench
