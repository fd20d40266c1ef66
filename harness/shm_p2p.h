// Point-to-point sends and receives through shared memory, for the
// shared-memory backend (shm_backend.h) of a group whose ranks share a host:
// what the pipelines' --stage-ranks hand-offs use. Each ordered pair of ranks
// has a mailbox of a few message slots in the group's segment; a send copies
// the tensor into the next free slot of its mailbox (at once when one is free,
// else on the sender's thread once the receiver frees one) and completes;
// the receiver's thread takes each message in order, into the receive posted
// for its tag or, when none is posted yet, into a held copy. Waiting is a
// futex, as the collectives' barrier is; a peer that exits is named.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddpbench {

// A finished operation's outputs, through its future, as Gloo's Work gives them.
class ShmWork : public c10d::Work {
 public:
  ShmWork(c10d::OpType type, std::vector<at::Tensor> outputs);
  void Complete(const std::exception_ptr& error);
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

struct MailboxSpec {
  char* base = nullptr;                  // the mail area of the segment (MailboxBytes)
  int rank = 0, size = 0;                // in the group
  std::vector<int> ranks;                // global ranks, for errors
  std::string name;                      // the group's, for errors
  std::atomic<int32_t>* pids = nullptr;  // each group rank's pid, from the segment's header
  std::atomic<uint64_t>* start_ticks = nullptr;  // and when each started (shm_futex.h: a reused pid is not it)
  int64_t message_bytes = 0;             // the largest message a slot holds
  std::chrono::milliseconds timeout{300000};
};

constexpr int kMailSlots = 4;  // messages in flight per ordered pair of ranks

// The bytes the mail area of `size` ranks takes.
size_t MailboxBytes(int size, int64_t message_bytes);

class ShmMailboxes {
 public:
  explicit ShmMailboxes(MailboxSpec spec);
  ~ShmMailboxes();
  ShmMailboxes(const ShmMailboxes&) = delete;
  ShmMailboxes& operator=(const ShmMailboxes&) = delete;

  // Whether `t` (one contiguous CPU tensor of at most message_bytes) goes
  // through the mailboxes; both sides of a message decide it from its size.
  bool Takes(const std::vector<at::Tensor>& t) const;
  c10::intrusive_ptr<c10d::Work> Send(const at::Tensor& t, int dst, int tag);
  c10::intrusive_ptr<c10d::Work> Recv(const at::Tensor& t, int src, int tag);
  void Stop();

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace ddpbench
