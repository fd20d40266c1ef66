// Reused memory for the float batches a CPU image loader hands out. A batch
// of 64 x 3 x 224 x 224 floats is 38.5 MB, above glibc's largest mmap
// threshold (32 MB), so every fresh one is mapped, faulted in page by page
// and unmapped again when freed: about 0.35 ms per image on the 2-core VM, a
// quarter of the loader's time. A batch's memory comes back to the pool when
// the last tensor using it is freed, and the next batch takes it.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace ddpbench::detail {

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  // Made shared: the tensors it hands out hold it until they are freed.
  static std::shared_ptr<BatchPool> Make(size_t keep = 8) { return std::shared_ptr<BatchPool>(new BatchPool(keep)); }
  ~BatchPool();

  // An uninitialised float tensor of `sizes` ([N, C, H, W]), channels-last
  // strides when `channels_last`, its memory from the pool when it has a
  // buffer of that size.
  torch::Tensor EmptyFloat(const std::vector<int64_t>& sizes, bool channels_last);

  size_t Free() const;  // buffers waiting to be reused

 private:
  explicit BatchPool(size_t keep) : keep_(keep) {}
  void* Take(size_t bytes);
  void Give(void* data, size_t bytes);  // back to the pool; freed beyond `keep_` buffers

  struct Buffer {
    void* data;
    size_t bytes;
  };
  const size_t keep_;
  mutable std::mutex mu_;
  std::vector<Buffer> free_;
};

}  // namespace ddpbench::detail
