// Buffers that live in shared memory: each rank of a shared-memory group can
// own an arena, a region of a POSIX shared-memory segment that every other
// rank of the group has mapped too (shm_backend.h: AttachShmArenas). A
// tensor allocated there is all-reduced in place: the other ranks read and
// write it where it is, so nothing is copied into the group's slots or back
// out (what NCCL's user-buffer registration buys on a GPU). ddp allocates its
// gradient buckets there; the collectives' micro-benchmark its buffers.
// The allocator is first-fit over the region; a request it cannot place gets
// no memory from it, and the caller falls back to the ordinary heap.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace ddpbench {

class ShmArena : public std::enable_shared_from_this<ShmArena> {
 public:
  // Takes over `bytes` mapped at `base` (unmapped when the last tensor placed
  // in it and the arena itself are gone).
  ShmArena(char* base, size_t bytes);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  // `bytes` in the arena (64-byte aligned), or a null DataPtr when it has no room.
  c10::DataPtr Allocate(size_t bytes);
  // A tensor of `numel` elements of `dtype` in the arena; undefined when it has no room.
  at::Tensor Empty(int64_t numel, at::ScalarType dtype);
  // Where [p, p + bytes) starts in the arena, or -1 when it is not all inside.
  int64_t OffsetOf(const void* p, size_t bytes) const;
  size_t bytes() const { return bytes_; }
  size_t free_bytes() const;

 private:
  void Free(size_t offset);

  char* base_;
  size_t bytes_;
  mutable std::mutex mutex_;
  std::map<size_t, size_t> free_;  // offset -> length of each free run, coalesced
  std::map<size_t, size_t> used_;  // offset -> length of each allocation
};

// While one lives, the tensors this thread allocates on the CPU are placed in
// `arena` (null: no change) where they fit, through the run's CPU memory
// tracker (harness/memory.h), so a library's own buffers (c10d's Reducer
// buckets) can be placed without its code knowing. Nests.
class ShmArenaScope {
 public:
  explicit ShmArenaScope(ShmArena* arena);
  ~ShmArenaScope();
  ShmArenaScope(const ShmArenaScope&) = delete;
  ShmArenaScope& operator=(const ShmArenaScope&) = delete;

 private:
  ShmArena* previous_;
};

// This thread's arena from the innermost ShmArenaScope, or null.
ShmArena* CurrentShmArena();

}  // namespace ddpbench
