// See batch_pool.h.
#include "datasets/batch_pool.h"

#include <cstdlib>
#include <new>

namespace ddpbench::detail {

BatchPool::~BatchPool() {
  for (const Buffer& b : free_) std::free(b.data);
}

void* BatchPool::Take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->bytes != bytes) continue;
      void* data = it->data;
      free_.erase(it);
      return data;
    }
  }
  void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (data == nullptr) throw std::bad_alloc();
  return data;
}

void BatchPool::Give(void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.size() < keep_) {
    free_.push_back({data, bytes});
    return;
  }
  std::free(data);
}

size_t BatchPool::Free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

torch::Tensor BatchPool::EmptyFloat(const std::vector<int64_t>& sizes, bool channels_last) {
  TORCH_CHECK(sizes.size() == 4, "BatchPool::EmptyFloat: wants [N, C, H, W], got ", sizes.size(), " sizes");
  const int64_t n = sizes[0], c = sizes[1], h = sizes[2], w = sizes[3];
  const std::vector<int64_t> strides = channels_last ? std::vector<int64_t>{c * h * w, 1, w * c, c}
                                                     : std::vector<int64_t>{c * h * w, h * w, w, 1};
  const size_t bytes = static_cast<size_t>(n * c * h * w) * sizeof(float);
  void* data = Take(bytes);
  auto self = shared_from_this();
  return torch::from_blob(data, sizes, strides, [self, bytes](void* p) { self->Give(p, bytes); },
                          torch::TensorOptions().dtype(torch::kFloat));
}

}  // namespace ddpbench::detail
