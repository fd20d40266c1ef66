// The few CUDA-only calls the harness makes, behind a plain interface so that
// only cuda_support.cpp includes CUDA headers; without CUDA in LibTorch every
// function degrades to a clear "no CUDA" answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace at {
class Tensor;
}

namespace ddpbench {

bool CudaAvailable();
int CudaDeviceCount();
std::string CudaDeviceName(int index);
std::string CudaRuntimeVersion();  // "" without CUDA
std::string NcclVersion();         // "" without NCCL

struct CudaMemoryPeaks {
  double allocated = 0;  // bytes
  double reserved = 0;
  double allocated_now = 0;  // bytes allocated at the call
};
CudaMemoryPeaks CudaPeaks(int device);
double CudaTotalBytes(int device);  // the device's memory (0 without CUDA)
void CudaResetPeak(int device);
void CudaSynchronize(int device);
// The caching allocator's history: recording on from the call (every
// allocation, free and segment event with its C++ stack), and the snapshot
// written to `path` as PyTorch's pickle (what torch.cuda.memory._snapshot()
// returns: segments, device_traces). Without CUDA both throw.
void CudaRecordMemoryHistory();
void CudaWriteMemorySnapshot(const std::string& path);

// A pinned host tensor copied to CUDA `device` (-1: the current one) on a side stream of the pool;
// the device's current stream waits for the copy through an event (the host
// never does), and the copy's memory is recorded as used by that stream.
// Without CUDA: host.to(device).
at::Tensor CopyToDeviceOnSideStream(const at::Tensor& host, int device);

// One timing event recorded on the current stream of `device`: marks when the
// work enqueued before it on that stream is done, without waiting for it.
class CudaMark {
 public:
  explicit CudaMark(int device);
  ~CudaMark();
  void Record();
  // Milliseconds from `earlier` to this mark (negative if this came first);
  // waits for both to complete, so read it after the timed loop.
  double MsAfter(CudaMark& earlier);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Elapsed-time measurement with CUDA events on the current stream.
class CudaEventPair {
 public:
  explicit CudaEventPair(int device) : start_(device), end_(device) {}
  void RecordStart() { start_.Record(); }
  void RecordEnd() { end_.Record(); }
  double ElapsedMs() { return end_.MsAfter(start_); }  // synchronises on the events

 private:
  CudaMark start_, end_;
};

}  // namespace ddpbench
