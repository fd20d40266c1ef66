#include "harness/memory.h"

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>

#include <climits>

#include <array>
#include <atomic>
#include <mutex>
#include <new>

#include "harness/config.h"
#include "harness/cuda_support.h"
#include "harness/log.h"

namespace ddpbench {
namespace {

thread_local int t_device = -1;

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
};
std::array<Counters, kMaxCpuDevices> g_counters;

void Add(int device, int64_t bytes) {
  if (device < 0 || device >= kMaxCpuDevices) return;
  auto& c = g_counters[device];
  int64_t now = c.current.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

// Each block carries a 64-byte header (the original allocation and whom it
// was charged to) in front of the data, because c10 requires a CPU DataPtr's
// context to be its data pointer; 64 bytes keep c10's 64-byte alignment.
struct TrackedHeader {
  c10::DataPtr inner;
  int64_t bytes;
  int device;
};
constexpr size_t kHeader = 64;
static_assert(sizeof(TrackedHeader) <= kHeader, "tracked header too large");

void DeleteTracked(void* data) {
  auto* header = reinterpret_cast<TrackedHeader*>(static_cast<char*>(data) - kHeader);
  Add(header->device, -header->bytes);
  c10::DataPtr inner = std::move(header->inner);
  header->~TrackedHeader();
  // `inner` frees the whole block when it goes out of scope.
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n + kHeader);
    char* block = static_cast<char*>(inner.get());
    int device = t_device;
    Add(device, static_cast<int64_t>(n));
    new (block) TrackedHeader{std::move(inner), static_cast<int64_t>(n), device};
    void* data = block + kHeader;
    return {data, data, &DeleteTracked, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &DeleteTracked; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void ConfigureCpuMalloc(const std::string& mode) {
  if (mode == "system") return;
  if (mode != "reuse")
    throw ConfigError(fmt::format("--cpu-malloc={}: not accepted; accepted values: reuse|system", mode));
#ifdef __GLIBC__
  const bool ok = mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  if (!ok) LogWarn("--cpu-malloc=reuse: glibc refused a setting; freed memory may be unmapped and faulted in again");
#else
  LogWarn("--cpu-malloc=reuse: not a glibc system; the C library's defaults apply");
#endif
}

void InstallCpuMemoryTracker() {
  static std::once_flag once;
  std::call_once(once, [] {
    static TrackingAllocator tracker(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&tracker, /*priority=*/100);
  });
}

CpuDeviceScope::CpuDeviceScope(int index) : previous_(t_device) { t_device = index; }
CpuDeviceScope::~CpuDeviceScope() { t_device = previous_; }
int CurrentCpuDevice() { return t_device; }

int64_t CpuAllocatedBytes(int index) {
  return index >= 0 && index < kMaxCpuDevices ? g_counters[index].current.load() : 0;
}
int64_t CpuPeakBytes(int index) {
  return index >= 0 && index < kMaxCpuDevices ? g_counters[index].peak.load() : 0;
}

void ResetPeakMemory(const std::vector<torch::Device>& devices) {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].is_cuda()) {
      CudaResetPeak(devices[i].index());
    } else if (i < static_cast<size_t>(kMaxCpuDevices)) {
      g_counters[i].peak.store(g_counters[i].current.load());
    }
  }
}

DeviceMemory MeasureDeviceMemory(const torch::Device& device, int logical_index) {
  constexpr double kMb = 1024.0 * 1024.0;
  DeviceMemory m;
  if (device.is_cuda()) {
    CudaMemoryPeaks peaks = CudaPeaks(device.index());
    m.peak_allocated_mb = peaks.allocated / kMb;
    m.peak_reserved_mb = peaks.reserved / kMb;
  } else {
    m.peak_allocated_mb = CpuPeakBytes(logical_index) / kMb;
  }
  return m;
}

int64_t AllocatedBytesNow(const torch::Device& device, int logical_index) {
  if (device.is_cuda()) return static_cast<int64_t>(CudaPeaks(device.index()).allocated_now);
  return CpuAllocatedBytes(logical_index);
}

double PeakRssMb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace ddpbench
