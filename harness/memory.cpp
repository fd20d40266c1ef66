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

#include "base/config.h"
#include "harness/cuda_support.h"
#include "harness/shm_arena.h"
#include "base/log.h"
#include "planning/traits.h"

namespace ddpbench {
namespace {

thread_local int t_device = -1;

struct Counters {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
};
std::array<Counters, kMaxCpuDevices> g_counters;
std::atomic<int64_t> g_device_limit{0};  // bytes per CPU logical device; 0: the machine's memory

std::string CpuDeviceName(int device) {
  return device >= 0 ? fmt::format("cpu device {}", device) : std::string("the host (data, set-up)");
}

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
    const int device = t_device;
    const int64_t held = device >= 0 && device < kMaxCpuDevices ? g_counters[device].current.load() : 0;
    const int64_t limit = g_device_limit.load();
    if (device >= 0 && limit > 0 && held + static_cast<int64_t>(n) > limit)
      throw DeviceOutOfMemory(OutOfMemoryLine(CpuDeviceName(device), static_cast<int64_t>(n), held) +
                              fmt::format(" of its {} (--cpu-device-memory-mb)", FormatBytes(limit)));
    // Inside a ShmArenaScope: in this thread's shared-memory arena, where it fits.
    c10::DataPtr inner = CurrentShmArena() ? CurrentShmArena()->Allocate(n + kHeader) : c10::DataPtr();
    try {
      if (!inner) inner = base_->allocate(n + kHeader);
    } catch (const c10::Error&) {  // the C library refused: the machine is out of memory
      throw DeviceOutOfMemory(OutOfMemoryLine(CpuDeviceName(device), static_cast<int64_t>(n), held));
    }
    char* block = static_cast<char*>(inner.get());
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

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
}

std::string OutOfMemoryLine(const std::string& device, int64_t asked_bytes, int64_t held_bytes) {
  return fmt::format("out of memory on {}: asked for {}, the run held {} there", device, FormatBytes(asked_bytes),
                     FormatBytes(held_bytes));
}

std::string OutOfMemoryAdvice() {
  const auto sharded = StrategiesWhere([](const StrategyTraits& t) { return t.family == Family::kSharded; });
  const auto cut = StrategiesWhere([](const StrategyTraits& t) { return t.family == Family::kPipeline; });
  return fmt::format("; try a smaller --batch-size or --width, --amp=bf16, --recompute=auto (recomputes activations "
                     "to fit), or a strategy that divides the memory ({} shard the model state, {} cut the model "
                     "over devices)", JoinNames(sharded), JoinNames(cut));
}

void InstallCpuMemoryTracker(int64_t device_limit_bytes) {
  g_device_limit.store(device_limit_bytes);
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
