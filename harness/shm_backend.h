// Collectives through shared memory for the ranks of a group that sit on one
// host (--cpu-backend=auto|shm): each rank copies the parts the others sum
// into its slot of a POSIX shared-memory segment, each sums its share of every
// rank's buffer in rank order (bf16 and fp16 in fp32), and each copies the
// others' sums back: no socket, no kernel copy, no transport thread, the same
// bits on every rank. Tensors the ranks placed in their shared-memory arenas
// (shm_arena.h, AttachShmArenas below) skip the slots: each rank sums its
// share where the tensors lie and writes the sum into every rank's tensor.
// Waiting is a short spin, then a futex, so a waiting rank leaves its core to
// the peer.
// A c10d::Backend below the recording backend (recording_backend.h), so the
// flight recorder and straggler figures read it as they read Gloo. What it
// does not do itself (all-to-all, gather, scatter, non-contiguous or non-CPU
// tensors, AVG and bitwise reductions, and point-to-point messages unless the
// group has mailboxes for them, shm_p2p.h) it hands to the Gloo backend it is
// given.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ddpbench {

class ShmArena;

struct ShmGroupSpec {
  c10::intrusive_ptr<c10d::Store> store;  // the group's own (prefixed) store
  int rank = 0;                           // in the group
  std::vector<int> ranks;                 // the group's global ranks, for errors
  std::string name;                       // "world", "group0", ... for errors and the segment's name
  std::chrono::milliseconds timeout{300000};
  int64_t slot_bytes = 25 << 20;          // each rank's slot: the largest bucket (larger buffers stream through)
  int64_t p2p_bytes = 0;  // > 0: point-to-point mailboxes (shm_p2p.h) for messages up to this size
  c10::intrusive_ptr<c10d::Backend> fallback;  // Gloo, for what shared memory does not do
};

// The group's shared-memory backend; null on every rank of the group when
// /dev/shm has no room for the segment (group rank 0 decides and logs one
// line; the caller then uses `fallback` alone), and then `why_not` says why
// on every rank ("/dev/shm 64 MiB free < 75 MiB needed"). Collective over the store.
c10::intrusive_ptr<c10d::Backend> MakeShmBackend(const ShmGroupSpec& spec, std::string* why_not = nullptr);

// Each rank's arena of `bytes` in shared memory (shm_arena.h), mapped by
// every rank of `backend`'s group: float and double sums of tensors placed
// there are all-reduced in place. Null where `backend` is not a shared-memory
// backend of two or more ranks, and on every rank when one had no room in
// /dev/shm (one line says so) or the environment says DDPBENCH_SHM_ARENAS=0
// (for comparisons). Collective: every rank of the group calls it.
std::shared_ptr<ShmArena> AttachShmArenas(const c10::intrusive_ptr<c10d::Backend>& backend, int64_t bytes);

}  // namespace ddpbench
