#include "harness/cuda_support.h"

#include <torch/cuda.h>

#ifdef DDPBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/csrc/cuda/nccl.h>
#endif

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace ddpbench {
namespace {

// Written beside itself and renamed into place: a reader never sees half.
[[maybe_unused]] void WriteWhole(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) throw std::runtime_error(fmt::format("{}: cannot be written", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(fmt::format("{}: cannot be renamed to {}", tmp, path));
}

}  // namespace

bool CudaAvailable() { return torch::cuda::is_available(); }
int CudaDeviceCount() { return CudaAvailable() ? static_cast<int>(torch::cuda::device_count()) : 0; }

#ifdef DDPBENCH_WITH_CUDA
std::string CudaDeviceName(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "";
  return prop.name;
}
std::string CudaRuntimeVersion() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}
std::string NcclVersion() {
  // The NCCL that LibTorch loaded (and its process groups use).
  auto v = torch::cuda::nccl::version();
  if (v == 0) return "";
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}
CudaMemoryPeaks CudaPeaks(int device) {
  using c10::CachingDeviceAllocator::StatType;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  return {static_cast<double>(stats.allocated_bytes[agg].peak),
          static_cast<double>(stats.reserved_bytes[agg].peak),
          static_cast<double>(stats.allocated_bytes[agg].current)};
}
void CudaResetPeak(int device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device); }
double CudaTotalBytes(int device) {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, device) == cudaSuccess ? static_cast<double>(prop.totalGlobalMem) : 0.0;
}
void CudaSynchronize(int device) {
  // device_synchronize() waits for the current device only: make `device`
  // current for the call, so a multi-GPU step is timed to its last GPU.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  c10::cuda::device_synchronize();
}

at::Tensor CopyToDeviceOnSideStream(const at::Tensor& host, int device) {
  const auto index = device < 0 ? c10::cuda::current_device() : static_cast<c10::DeviceIndex>(device);
  c10::cuda::CUDAGuard on_device(index);
  const c10::cuda::CUDAStream consumer = c10::cuda::getCurrentCUDAStream(index);
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  at::Tensor out;
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    out = host.to(c10::Device(c10::DeviceType::CUDA, index), /*non_blocking=*/true);
  }
  at::cuda::CUDAEvent copied;
  copied.record(side);
  copied.block(consumer);
  // Allocated on the side stream, used on the consumer's: the caching
  // allocator must not hand the block out again before the consumer is done.
  c10::cuda::CUDACachingAllocator::recordStream(out.storage().data_ptr(), consumer);
  return out;
}

void CudaRecordMemoryHistory() {
  // Every action, with its C++ stack (no Python here), and no cap on entries:
  // a benchmark run is a few steps.
  torch::cuda::_record_memory_history("all", "all", "cpp");
}
void CudaWriteMemorySnapshot(const std::string& path) {
  WriteWhole(path, torch::cuda::_memory_snapshot_pickled());
}

struct CudaMark::Impl {
  at::cuda::CUDAEvent event{cudaEventDefault};
  int device;
};
CudaMark::CudaMark(int device) : impl_(std::make_unique<Impl>()) { impl_->device = device; }
CudaMark::~CudaMark() = default;
void CudaMark::Record() { impl_->event.record(c10::cuda::getCurrentCUDAStream(impl_->device)); }
double CudaMark::MsAfter(CudaMark& earlier) {
  impl_->event.synchronize();
  earlier.impl_->event.synchronize();
  return earlier.impl_->event.elapsed_time(impl_->event);
}
#else
std::string CudaDeviceName(int) { return ""; }
std::string CudaRuntimeVersion() { return ""; }
std::string NcclVersion() { return ""; }
CudaMemoryPeaks CudaPeaks(int) { return {}; }
double CudaTotalBytes(int) { return 0; }
void CudaResetPeak(int) {}
void CudaSynchronize(int) {}
at::Tensor CopyToDeviceOnSideStream(const at::Tensor& host, int) { return host; }
void CudaRecordMemoryHistory() { throw std::runtime_error("--memory-snapshot: this LibTorch has no CUDA"); }
void CudaWriteMemorySnapshot(const std::string&) {
  throw std::runtime_error("--memory-snapshot: this LibTorch has no CUDA");
}
struct CudaMark::Impl {};
CudaMark::CudaMark(int) {}
CudaMark::~CudaMark() = default;
void CudaMark::Record() {}
double CudaMark::MsAfter(CudaMark&) { return 0; }
#endif

}  // namespace ddpbench
