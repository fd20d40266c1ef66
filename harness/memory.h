// Per-device memory. CUDA: the caching allocator's peak allocated and peak
// reserved bytes. CPU: a tracking allocator installed in front of c10's CPU
// allocator attributes every tensor allocation to the logical device of the
// thread that made it (CpuDeviceScope), so a CPU "device" reports a peak of
// live tensor bytes just as a GPU does; peak RSS is reported beside it.
#pragma once

#include <torch/types.h>

#include "strategies/strategy.h"

namespace ddpbench {

constexpr int kMaxCpuDevices = 1024;

// Installs the tracking allocator (idempotent, thread-safe).
void InstallCpuMemoryTracker();

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
