// The shared-memory mailboxes (shm_p2p.h): the mail area's layout, the
// send path (inline when a slot is free, else the sender thread), and the
// receiver thread that takes each mailbox's messages in order.
#include "harness/shm_p2p.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "harness/shm_futex.h"

namespace ddpbench {

ShmWork::ShmWork(c10d::OpType type, std::vector<at::Tensor> outputs)
    : Work(-1, type), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void ShmWork::Complete(const std::exception_ptr& error) {
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

namespace mail {

constexpr int kSlots = kMailSlots;

struct alignas(64) Word {
  std::atomic<uint32_t> value{0};
};

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> full{0};
  int32_t tag = 0;
  int64_t bytes = 0;
};

int64_t SlotStride(int64_t message_bytes) { return sizeof(SlotHeader) + (message_bytes + 63) / 64 * 64; }

int64_t Bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

using Clock = std::chrono::steady_clock;

// A DistBackendError (what Gloo's failures are) saying `message`.
std::exception_ptr Error(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace mail

using namespace mail;  // NOLINT: this file's own helpers
using shm::Bump;
using shm::SleepOn;

size_t MailboxBytes(int size, int64_t message_bytes) {
  return static_cast<size_t>(2 * size) * sizeof(Word) +
         static_cast<size_t>(size) * size * kSlots * SlotStride(message_bytes);
}

struct ShmMailboxes::State {
  explicit State(MailboxSpec s) : spec(std::move(s)), next_send(spec.size, 0), next_recv(spec.size, 0) {
    auto* words = reinterpret_cast<Word*>(spec.base);
    incoming = words;               // [r]: bumped when a message lands in one of r's mailboxes
    freed = words + spec.size;      // [r]: bumped when a slot of one of r's mailboxes is freed
  }

  SlotHeader& Slot(int src, int dst, int i) const {
    char* mail = spec.base + 2 * spec.size * sizeof(Word);
    const int64_t stride = SlotStride(spec.message_bytes);
    return *reinterpret_cast<SlotHeader*>(mail + ((static_cast<int64_t>(src) * spec.size + dst) * kSlots + i) * stride);
  }
  static char* Data(SlotHeader& slot) { return reinterpret_cast<char*>(&slot) + sizeof(SlotHeader); }

  // The error when group rank `peer` has exited, or the wait since `since` passed the timeout.
  std::exception_ptr PeerGone(const char* op, int peer, int tag, Clock::time_point since) const {
    const int pid = spec.pids[peer].load();
    std::string why;
    if (shm::ProcessExited(pid, spec.start_ticks ? spec.start_ticks[peer].load() : 0))
      why = fmt::format("rank {} (pid {}) has exited", spec.ranks[peer], pid);
    else if (Clock::now() - since > spec.timeout)
      why = fmt::format("timed out after {} ms waiting for rank {}", spec.timeout.count(), spec.ranks[peer]);
    if (why.empty()) return nullptr;
    return Error(fmt::format("shared-memory {} of tag {} in group {}: {}", op, tag, spec.name, why));
  }

  std::exception_ptr SizeMismatch(int tag, int64_t posted, int64_t sent, int src) const {
    return Error(fmt::format("shared-memory recv of tag {} in group {}: {} bytes posted, {} sent by rank {}", tag,
                             spec.name, posted, sent, spec.ranks[src]));
  }

  // Under send_mutex: the message into the next slot of its mailbox, if free.
  bool TryPut(const at::Tensor& t, int dst, int tag) {
    SlotHeader& slot = Slot(spec.rank, dst, next_send[dst]);
    if (slot.full.load(std::memory_order_acquire) != 0) return false;
    std::memcpy(Data(slot), t.const_data_ptr(), Bytes(t));
    slot.tag = tag;
    slot.bytes = Bytes(t);
    slot.full.store(1, std::memory_order_release);
    next_send[dst] = (next_send[dst] + 1) % kSlots;
    Bump(incoming[dst].value);
    return true;
  }

  // The sender thread: queued sends in order, each once its slot is free.
  void SendLoop() {
    std::unique_lock<std::mutex> lock(send_mutex);
    while (true) {
      send_ready.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;  // Stop fails what is left
      Outgoing& o = queue.front();
      const uint32_t seen = freed[spec.rank].value.load();
      std::exception_ptr error = broken;
      if (!error && !TryPut(o.tensor, o.dst, o.tag)) {
        lock.unlock();
        SleepOn(freed[spec.rank].value, seen);
        lock.lock();
        if (!(error = PeerGone("send", o.dst, o.tag, o.since))) continue;
        broken = error;
      }
      auto work = o.work;
      queue.pop_front();
      lock.unlock();
      work->Complete(error);
      lock.lock();
    }
  }

  // Under recv_mutex: a message of `bytes` from `src` under `tag` into the
  // receive posted for it, or held until one is.
  void Deliver(int src, SlotHeader& slot) {
    const auto key = std::make_pair(src, slot.tag);
    auto it = posted.find(key);
    if (it == posted.end()) {
      at::Tensor copy = torch::empty({slot.bytes}, torch::kUInt8);
      std::memcpy(copy.data_ptr(), Data(slot), slot.bytes);
      held.emplace(key, copy);
      return;
    }
    Pending p = std::move(it->second);
    posted.erase(it);
    std::exception_ptr error;
    if (Bytes(p.tensor) != slot.bytes)
      error = SizeMismatch(slot.tag, Bytes(p.tensor), slot.bytes, src);
    else
      std::memcpy(p.tensor.mutable_data_ptr(), Data(slot), slot.bytes);
    done.emplace_back(p.work, error);
  }

  // The receiver thread: every mailbox into this rank, in slot order.
  void RecvLoop() {
    while (!stopping_flag.load()) {
      const uint32_t seen = incoming[spec.rank].value.load();
      bool any = false;
      {
        std::lock_guard<std::mutex> lock(recv_mutex);
        for (int src = 0; src < spec.size; ++src)
          for (SlotHeader* slot = &Slot(src, spec.rank, next_recv[src]);
               src != spec.rank && slot->full.load(std::memory_order_acquire) != 0;
               slot = &Slot(src, spec.rank, next_recv[src])) {
            Deliver(src, *slot);
            slot->full.store(0, std::memory_order_release);
            next_recv[src] = (next_recv[src] + 1) % kSlots;
            Bump(freed[src].value);
            any = true;
          }
        if (!any) FailGone();
      }
      Finish();
      if (!any) SleepOn(incoming[spec.rank].value, seen);
    }
  }

  // Under recv_mutex: posted receives whose sender has exited or is past the timeout.
  void FailGone() {
    for (auto it = posted.begin(); it != posted.end();) {
      if (auto error = PeerGone("recv", it->first.first, it->first.second, it->second.since)) {
        done.emplace_back(it->second.work, error);
        it = posted.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Completes what Deliver and FailGone decided, outside the lock.
  void Finish() {
    std::vector<std::pair<c10::intrusive_ptr<ShmWork>, std::exception_ptr>> ready;
    {
      std::lock_guard<std::mutex> lock(recv_mutex);
      ready.swap(done);
    }
    for (auto& [work, error] : ready) work->Complete(error);
  }

  struct Outgoing {
    at::Tensor tensor;
    int dst, tag;
    c10::intrusive_ptr<ShmWork> work;
    Clock::time_point since;
  };
  struct Pending {
    at::Tensor tensor;
    c10::intrusive_ptr<ShmWork> work;
    Clock::time_point since;
  };

  MailboxSpec spec;
  Word* incoming = nullptr;
  Word* freed = nullptr;
  std::mutex send_mutex, recv_mutex;
  std::condition_variable send_ready;
  std::deque<Outgoing> queue;     // sends waiting for a slot, in call order
  std::vector<int> next_send;     // per destination: the slot the next message takes
  std::vector<int> next_recv;     // per source: the slot its next message is in
  std::multimap<std::pair<int, int>, Pending> posted;  // (source, tag): receives not yet filled
  std::multimap<std::pair<int, int>, at::Tensor> held;  // (source, tag): messages not yet received
  std::vector<std::pair<c10::intrusive_ptr<ShmWork>, std::exception_ptr>> done;
  std::exception_ptr broken;      // a send that failed: every later one fails with it
  bool stopping = false;          // under send_mutex
  std::atomic<bool> stopping_flag{false};
  std::thread sender, receiver;
};

ShmMailboxes::ShmMailboxes(MailboxSpec spec) : s_(std::make_unique<State>(std::move(spec))) {
  s_->sender = std::thread([this] { s_->SendLoop(); });
  s_->receiver = std::thread([this] { s_->RecvLoop(); });
}

ShmMailboxes::~ShmMailboxes() { Stop(); }

bool ShmMailboxes::Takes(const std::vector<at::Tensor>& t) const {
  return t.size() == 1 && t[0].device().is_cpu() && t[0].is_contiguous() && !t[0].is_sparse() &&
         Bytes(t[0]) <= s_->spec.message_bytes;
}

c10::intrusive_ptr<c10d::Work> ShmMailboxes::Send(const at::Tensor& t, int dst, int tag) {
  auto work = c10::make_intrusive<ShmWork>(c10d::OpType::SEND, std::vector<at::Tensor>{t});
  std::unique_lock<std::mutex> lock(s_->send_mutex);
  if (s_->stopping)
    C10_THROW_ERROR(DistBackendError, fmt::format("shared-memory group {}: send after shutdown", s_->spec.name));
  if (!s_->broken && s_->queue.empty() && s_->TryPut(t, dst, tag)) {
    lock.unlock();
    work->Complete(nullptr);
    return work;
  }
  s_->queue.push_back({t, dst, tag, work, Clock::now()});
  lock.unlock();
  s_->send_ready.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> ShmMailboxes::Recv(const at::Tensor& t, int src, int tag) {
  auto work = c10::make_intrusive<ShmWork>(c10d::OpType::RECV, std::vector<at::Tensor>{t});
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(s_->recv_mutex);
    auto it = s_->held.find({src, tag});
    if (it == s_->held.end()) {
      s_->posted.emplace(std::make_pair(src, tag), State::Pending{t, work, Clock::now()});
      return work;
    }
    const at::Tensor& bytes = it->second;
    if (bytes.numel() != Bytes(t))
      error = s_->SizeMismatch(tag, Bytes(t), bytes.numel(), src);
    else
      std::memcpy(t.mutable_data_ptr(), bytes.const_data_ptr(), bytes.numel());
    s_->held.erase(it);
  }
  work->Complete(error);
  return work;
}

void ShmMailboxes::Stop() {
  {
    std::lock_guard<std::mutex> lock(s_->send_mutex);
    if (s_->stopping) return;
    s_->stopping = true;
  }
  s_->stopping_flag = true;
  s_->send_ready.notify_all();
  Bump(s_->incoming[s_->spec.rank].value);
  if (s_->sender.joinable()) s_->sender.join();
  if (s_->receiver.joinable()) s_->receiver.join();
  const auto error = Error(fmt::format("shared-memory group {}: shut down", s_->spec.name));
  for (auto& o : s_->queue) o.work->Complete(error);
  for (auto& [key, p] : s_->posted) p.work->Complete(error);
  s_->queue.clear();
  s_->posted.clear();
}

}  // namespace ddpbench
