// The shared-memory arena's first-fit allocator and the thread's placement
// scope (shm_arena.h).
#include "harness/shm_arena.h"

#include <sys/mman.h>

#include <ATen/ops/from_blob.h>

namespace ddpbench {
namespace {

constexpr size_t kAlign = 64;
thread_local ShmArena* t_arena = nullptr;

// What a placed block's DataPtr carries: the arena (kept alive) and where.
struct Placed {
  std::shared_ptr<ShmArena> arena;
  size_t offset;
};

}  // namespace

ShmArena::ShmArena(char* base, size_t bytes) : base_(base), bytes_(bytes) {
  if (bytes_ > 0) free_[0] = bytes_;
}

ShmArena::~ShmArena() {
  if (base_) ::munmap(base_, bytes_);
}

c10::DataPtr ShmArena::Allocate(size_t bytes) {
  const size_t want = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.begin();
    while (it != free_.end() && it->second < want) ++it;
    if (it == free_.end()) return {};
    offset = it->first;
    const size_t left = it->second - want;
    free_.erase(it);
    if (left > 0) free_[offset + want] = left;
    used_[offset] = want;
  }
  void* data = base_ + offset;
  auto* placed = new Placed{shared_from_this(), offset};
  return {data, placed,
          [](void* ctx) {
            auto* p = static_cast<Placed*>(ctx);
            p->arena->Free(p->offset);
            delete p;
          },
          c10::Device(c10::DeviceType::CPU)};
}

at::Tensor ShmArena::Empty(int64_t numel, at::ScalarType dtype) {
  c10::DataPtr block = Allocate(static_cast<size_t>(numel) * c10::elementSize(dtype));
  if (!block) return {};
  void* data = block.get();
  auto holder = std::make_shared<c10::DataPtr>(std::move(block));
  return at::from_blob(data, {numel}, [holder](void*) mutable { holder.reset(); },
                       at::TensorOptions().dtype(dtype));
}

void ShmArena::Free(size_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto used = used_.find(offset);
  if (used == used_.end()) return;
  size_t start = offset, length = used->second;
  used_.erase(used);
  // Joined with the free runs on either side.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == start) {
      start = before->first;
      length += before->second;
      free_.erase(before);
    }
  }
  free_[start] = length;
}

int64_t ShmArena::OffsetOf(const void* p, size_t bytes) const {
  const char* at = static_cast<const char*>(p);
  if (at < base_ || at + bytes > base_ + bytes_) return -1;
  return at - base_;
}

size_t ShmArena::free_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& [offset, length] : free_) total += length;
  return total;
}

ShmArenaScope::ShmArenaScope(ShmArena* arena) : previous_(t_arena) {
  if (arena) t_arena = arena;
}
ShmArenaScope::~ShmArenaScope() { t_arena = previous_; }

ShmArena* CurrentShmArena() { return t_arena; }

}  // namespace ddpbench
