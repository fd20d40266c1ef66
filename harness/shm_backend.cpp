// The shared-memory backend (shm_backend.h): the segment (made by group rank
// 0, named by the run, unlinked as soon as every rank has mapped it), the
// futex barrier that names a rank that never came, and the collectives, run
// one at a time in call order on one thread per group, as every rank calls
// them in the same order.
#include "harness/shm_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "base/crash_point.h"
#include "base/log.h"
#include "harness/shm_arena.h"
#include "harness/shm_futex.h"
#include "harness/shm_names.h"
#include "harness/shm_p2p.h"
#include "planning/shm_chunks.h"

namespace ddpbench {
namespace {

constexpr int kMaxRanks = 256;
constexpr int kSpins = 256;  // polls before sleeping on the futex

struct alignas(64) Counter {
  std::atomic<uint64_t> value{0};
};

// The segment's first page(s): the barrier's futex word, each rank's count of
// barriers reached and its pid (so a waiter can tell a dead peer from a slow one).
struct Header {
  alignas(64) std::atomic<uint32_t> generation{0};
  Counter arrived[kMaxRanks];
  std::atomic<int32_t> pid[kMaxRanks];
  std::atomic<uint64_t> start_ticks[kMaxRanks];  // when that pid started: a reused pid is not the rank
  // An all-reduce's tensor on each rank where the group has arenas: its
  // offset in the rank's arena (-1: not in it) and its length.
  std::atomic<int64_t> arena_offset[kMaxRanks];
  std::atomic<int64_t> numel[kMaxRanks];
};

size_t DataOffset() { return (sizeof(Header) + 4095) / 4096 * 4096; }

void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

[[noreturn]] void Fail(const std::string& message) { C10_THROW_ERROR(DistBackendError, message); }


bool Reducible(c10d::ReduceOp::RedOpType op) {
  return op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::MAX || op == c10d::ReduceOp::MIN ||
         op == c10d::ReduceOp::PRODUCT;
}

// `acc` op= `part`, elementwise.
void Combine(at::Tensor& acc, const at::Tensor& part, c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: acc.add_(part); break;
    case c10d::ReduceOp::PRODUCT: acc.mul_(part); break;
    case c10d::ReduceOp::MAX: at::maximum_out(acc, acc, part); break;
    default: at::minimum_out(acc, acc, part); break;
  }
}

// `out` = a op b, one pass (out aliases neither).
void CombineInto(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: at::add_out(out, a, b); break;
    case c10d::ReduceOp::PRODUCT: at::mul_out(out, a, b); break;
    case c10d::ReduceOp::MAX: at::maximum_out(out, a, b); break;
    default: at::minimum_out(out, a, b); break;
  }
}

// `out` = parts[0] op parts[1] op ... in rank order, then divided by
// `divisor` (an average: ReduceOp::AVG); half precisions in fp32.
// `out` aliases none of the parts.
void ReduceInto(at::Tensor out, const std::vector<at::Tensor>& parts, c10d::ReduceOp::RedOpType op,
                int64_t divisor = 1) {
  const bool half = out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf;
  if (!half && parts.size() > 1) {
    CombineInto(out, parts[0], parts[1], op);
    for (size_t j = 2; j < parts.size(); ++j) Combine(out, parts[j], op);
    if (divisor != 1) out.div_(divisor);
    return;
  }
  at::Tensor acc = half ? parts[0].to(at::kFloat) : out;
  if (!half) acc.copy_(parts[0]);
  for (size_t j = 1; j < parts.size(); ++j) Combine(acc, half ? parts[j].to(at::kFloat) : parts[j], op);
  if (divisor != 1) acc.div_(divisor);
  if (half) out.copy_(acc);
}

constexpr int64_t kSumBlock = 2048;  // elements summed per pass, in a buffer on the stack
constexpr int64_t kOnePassBytes = 4 << 20;  // shares this large are summed by AddParts, smaller by ATen

// acc[0, m) = (p[0][i] + p[1][i] + ...) / divisor, summed in rank order;
// m <= kSumBlock.
template <typename T>
void AddParts(const std::vector<const T*>& p, int64_t m, T* acc, int64_t divisor) {
  for (int64_t i = 0; i < m; ++i) acc[i] = p[0][i] + p[1][i];
  for (size_t j = 2; j < p.size(); ++j)
    for (int64_t i = 0; i < m; ++i) acc[i] += p[j][i];
  if (divisor == 1) return;
  if ((divisor & (divisor - 1)) == 0) {  // by a power of two: the reciprocal is exact, and a product is cheaper
    const T r = T(1) / static_cast<T>(divisor);
    for (int64_t i = 0; i < m; ++i) acc[i] *= r;
  } else {
    const T d = static_cast<T>(divisor);
    for (int64_t i = 0; i < m; ++i) acc[i] /= d;
  }
}

// a = b = parts[0] + parts[1] + ... in rank order, one pass over the parts
// block by block (float and double sums of at least kOnePassBytes: the
// all-reduce's share, written to the result slot and to the rank's own
// tensor, which may be one of the parts); anything else through ReduceInto
// and a copy. Measured on the 2-core VM: a third fewer bytes read pays
// 1.13-1.18x at 64 MiB all-reduces, where memory bounds the sum (16 MiB:
// 1.02-1.16x); on shares that stay in the cache ATen's vectorized add is
// faster (a 4 MiB all-reduce all through this loop: 0.71x).
template <typename T>
void SumBlocks(at::Tensor& a, at::Tensor& b, const std::vector<at::Tensor>& parts, int64_t divisor) {
  alignas(64) T acc[kSumBlock];
  std::vector<const T*> p, at_block(parts.size());
  for (const auto& t : parts) p.push_back(t.const_data_ptr<T>());
  T* to_a = a.mutable_data_ptr<T>();
  T* to_b = b.mutable_data_ptr<T>();
  const int64_t n = a.numel();
  for (int64_t at = 0; at < n; at += kSumBlock) {
    const int64_t m = std::min(kSumBlock, n - at);
    for (size_t j = 0; j < p.size(); ++j) at_block[j] = p[j] + at;
    AddParts(at_block, m, acc, divisor);
    std::memcpy(to_a + at, acc, m * sizeof(T));
    std::memcpy(to_b + at, acc, m * sizeof(T));
  }
}

void SumToBoth(at::Tensor a, at::Tensor b, const std::vector<at::Tensor>& parts, c10d::ReduceOp::RedOpType op,
               int64_t divisor) {
  const auto dtype = a.scalar_type();
  if (op != c10d::ReduceOp::SUM || parts.size() < 2 || (dtype != at::kFloat && dtype != at::kDouble) ||
      a.numel() * a.element_size() < kOnePassBytes) {
    ReduceInto(a, parts, op, divisor);
    b.copy_(a);
  } else if (dtype == at::kFloat) {
    SumBlocks<float>(a, b, parts, divisor);
  } else {
    SumBlocks<double>(a, b, parts, divisor);
  }
}

// `bytes` of segment `name` mapped, or null with `why` set. With `create` the
// segment is made first and filled to its size, so that a /dev/shm without
// room shows here and not as a SIGBUS mid-collective.
char* MapSegment(const std::string& name, size_t bytes, bool create, std::string* why) {
  const int fd = ::shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  int error = fd < 0 ? errno : create ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) : 0;
  void* base = MAP_FAILED;
  if (error == 0) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  if (fd >= 0) ::close(fd);
  if (error == 0) return static_cast<char*>(base);
  if (create && fd >= 0) ::shm_unlink(name.c_str());
  *why = std::strerror(error);
  return nullptr;
}

// A segment's name unlinked when this leaves scope, on every path (its
// mappings stay until unmapped), so a set-up that fails leaves nothing in
// /dev/shm. "" unlinks nothing.
class UnlinkOnExit {
 public:
  explicit UnlinkOnExit(std::string name) : name_(std::move(name)) {}
  ~UnlinkOnExit() {
    if (!name_.empty()) ::shm_unlink(name_.c_str());
  }
  UnlinkOnExit(const UnlinkOnExit&) = delete;
  UnlinkOnExit& operator=(const UnlinkOnExit&) = delete;

 private:
  std::string name_;
};

class ShmBackend : public c10d::Backend {
 public:
  // `base`: the group's segment as mapped here, already unlinked (MakeShmBackend).
  ShmBackend(const ShmGroupSpec& spec, void* base, size_t bytes)
      : Backend(spec.rank, static_cast<int>(spec.ranks.size())), spec_(spec),
        base_(static_cast<char*>(base)), bytes_(bytes), header_(static_cast<Header*>(base)),
        mail_(spec.p2p_bytes > 0 ? std::make_unique<ShmMailboxes>(MailSpec()) : nullptr),
        worker_([this] { Loop(); }) {}
  ~ShmBackend() override { Stop(); }

  const std::string getBackendName() const override { return "shm"; }
  void setTimeout(std::chrono::milliseconds timeout) override {
    spec_.timeout = timeout;
    spec_.fallback->setTimeout(timeout);
  }
  void shutdown() override {
    Stop();
    spec_.fallback->shutdown();
  }
  void abort() override { spec_.fallback->abort(); }

  // ReduceOp::AVG (which Gloo refuses) divides in the sum's own pass; a
  // tensor Gloo takes is divided first and summed there.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) override {
    if (o.reduceOp == c10d::ReduceOp::AVG) {
      if (!Averaged(t)) return spec_.fallback->allreduce(t, DividedForSum(t, o));
    } else if (!Ours(t) || !Reducible(o.reduceOp)) {
      return spec_.fallback->allreduce(t, o);
    }
    auto op = o.reduceOp.op_;
    return Enqueue(c10d::OpType::ALLREDUCE, t, [this, t, op] { AllReduce(t[0], op); });
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& t,
                                                     const c10d::AllreduceCoalescedOptions& o) override {
    if (o.reduceOp == c10d::ReduceOp::AVG) {
      if (!Averaged(t, true)) return spec_.fallback->allreduce_coalesced(t, DividedForSum(t, o));
    } else if (!Ours(t, true) || !Reducible(o.reduceOp)) {
      return spec_.fallback->allreduce_coalesced(t, o);
    }
    auto op = o.reduceOp.op_;
    return Enqueue(c10d::OpType::ALLREDUCE_COALESCED, t, [this, t, op] {
      for (const auto& x : t) AllReduce(x, op);
    });
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) override {
    if (!Ours(t)) return spec_.fallback->broadcast(t, o);
    const int root = static_cast<int>(o.rootRank);
    return Enqueue(c10d::OpType::BROADCAST, t, [this, t, root] { Broadcast(t[0], root); });
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& o) override {
    if (out.size() != 1 || !Ours(in) || !Ours(out[0], true) || static_cast<int>(out[0].size()) != size_ ||
        !SameShapes(out[0], in[0]))
      return spec_.fallback->allgather(out, in, o);
    auto rows = out[0];
    return Enqueue(c10d::OpType::ALLGATHER, rows, [this, rows, in] { AllGather(rows, in[0]); });
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& o) override {
    if (!Ours({out, in}, true) || out.numel() != in.numel() * size_) return spec_.fallback->_allgather_base(out, in, o);
    return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, [this, out, in] { AllGather(Rows(out), in); });
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::AllgatherOptions& o) override {
    if (!Ours(out, true) || !Ours(in, true) || out.size() != in.size() || !Gathers(out, in))
      return spec_.fallback->allgather_into_tensor_coalesced(out, in, o);
    return Enqueue(c10d::OpType::COALESCED, out, [this, out, in] {
      for (size_t i = 0; i < out.size(); ++i) AllGather(Rows(out[i]), in[i]);
    });
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out,
                                                std::vector<std::vector<at::Tensor>>& in,
                                                const c10d::ReduceScatterOptions& o) override {
    if (in.size() != 1 || !Ours(out) || !Ours(in[0], true) || static_cast<int>(in[0].size()) != size_ ||
        !SameShapes(in[0], out[0]) || !Reducible(o.reduceOp))
      return spec_.fallback->reduce_scatter(out, in, o);
    auto rows = in[0];
    auto op = o.reduceOp.op_;
    return Enqueue(c10d::OpType::REDUCE_SCATTER, out, [this, out, rows, op] { ReduceScatter(out[0], rows, op); });
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    if (!Ours({out, in}, true) || in.numel() != out.numel() * size_ || !Reducible(o.reduceOp))
      return spec_.fallback->_reduce_scatter_base(out, in, o);
    auto op = o.reduceOp.op_;
    return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, [this, out, in, op] { ReduceScatter(out, Rows(in), op); });
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::ReduceScatterOptions& o) override {
    if (!Ours(out, true) || !Ours(in, true) || out.size() != in.size() || !Gathers(in, out) || !Reducible(o.reduceOp))
      return spec_.fallback->reduce_scatter_tensor_coalesced(out, in, o);
    auto op = o.reduceOp.op_;
    return Enqueue(c10d::OpType::COALESCED, out, [this, out, in, op] {
      for (size_t i = 0; i < out.size(); ++i) ReduceScatter(out[i], Rows(in[i]), op);
    });
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return Enqueue(c10d::OpType::BARRIER, {}, [this] { Barrier("barrier"); });
  }

  // Handed to Gloo: what the strategies do not send through shared memory.
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions& o) override {
    return spec_.fallback->reduce(t, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                     std::vector<at::Tensor>& in,
                                                     const c10d::AllgatherOptions& o) override {
    return spec_.fallback->allgather_coalesced(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                        const c10d::GatherOptions& o) override {
    return spec_.fallback->gather(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& o) override {
    return spec_.fallback->scatter(out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& o) override {
    return spec_.fallback->alltoall_base(out, in, out_splits, in_splits, o);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                          const c10d::AllToAllOptions& o) override {
    return spec_.fallback->alltoall(out, in, o);
  }
  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) override {
    spec_.fallback->monitoredBarrier(o, wait_all_ranks);
  }
  // Through the mailboxes where the group has them (ShmGroupSpec::p2p_bytes) and the message fits.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dst, int tag) override {
    if (mail_ && mail_->Takes(t)) return mail_->Send(t[0], dst, tag);
    return spec_.fallback->send(t, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int src, int tag) override {
    if (mail_ && mail_->Takes(t)) return mail_->Recv(t[0], src, tag);
    return spec_.fallback->recv(t, src, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& t, int tag) override {
    return spec_.fallback->recvAnysource(t, tag);
  }

  // Each rank's arena of `bytes` (shm_arena.h), on the group's thread in
  // call order with the collectives; null on every rank when one has no room.
  std::shared_ptr<ShmArena> AttachArenas(int64_t bytes) {
    std::shared_ptr<ShmArena> made;
    auto work = Enqueue(c10d::OpType::UNKNOWN, {}, [this, bytes, &made] { made = MakeArenas(bytes); });
    work->wait();
    return made;
  }

 private:
  MailboxSpec MailSpec() const {
    MailboxSpec m;
    m.base = base_ + DataOffset() + static_cast<size_t>(size_ + 1) * spec_.slot_bytes;
    m.rank = rank_, m.size = size_, m.ranks = spec_.ranks, m.name = spec_.name;
    m.pids = header_->pid;
    m.start_ticks = header_->start_ticks;
    m.message_bytes = spec_.p2p_bytes;
    m.timeout = spec_.timeout;
    return m;
  }

  // This rank's arena segment made, every rank's mapped here, and each
  // unlinked once all have mapped it (as the group's segment is).
  std::shared_ptr<ShmArena> MakeArenas(int64_t bytes) {
    if (arena_ || size_ < 2) return arena_;
    auto key = [](const char* what, int r) { return fmt::format("shm/arena/{}/{}", what, r); };
    std::string name = SegmentName(spec_.name + "-arena" + std::to_string(rank_));
    std::string why;
    char* own = MapSegment(name, static_cast<size_t>(bytes), /*create=*/true, &why);
    if (!own) name.clear();
    // Unlinked once every rank has mapped it, or on whichever path leaves first.
    UnlinkOnExit unlink_own(name);
    CrashPoint("shm: arena made");
    const std::string mine = fmt::format("{} {}", bytes, name);
    spec_.store->set(key("name", rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
    std::vector<std::string> names(size_);
    bool all = true;
    for (int r = 0; r < size_; ++r) {
      const auto value = spec_.store->get(key("name", r));
      const std::string theirs(value.begin(), value.end());
      const size_t cut = theirs.find(' ');
      if (theirs.substr(0, cut) != std::to_string(bytes))
        Fail(fmt::format("shared-memory group {}: rank {} asks for an arena of {} bytes, rank {} of {}", spec_.name,
                         spec_.ranks[rank_], bytes, spec_.ranks[r], theirs.substr(0, cut)));
      names[r] = theirs.substr(cut + 1);
      all = all && !names[r].empty();
    }
    if (!all) {
      if (own) ::munmap(own, bytes);
      if (!why.empty())  // the rank that had no room says why
        LogWarn("shared-memory group {}: no arena of {:.1f} MiB per rank ({}): buffers all-reduce through the slots",
                spec_.name, bytes / 1048576.0, why);
      return nullptr;
    }
    peer_arena_.assign(size_, nullptr);
    arena_bytes_ = static_cast<size_t>(bytes);
    for (int r = 0; r < size_; ++r) {
      peer_arena_[r] = r == rank_ ? own : MapSegment(names[r], arena_bytes_, /*create=*/false, &why);
      if (!peer_arena_[r])
        Fail(fmt::format("shared-memory group {}: mapping rank {}'s arena: {}", spec_.name, spec_.ranks[r], why));
    }
    CrashPoint("shm: every arena mapped");
    spec_.store->set(key("mapped", rank_), std::vector<uint8_t>{1});
    for (int r = 0; r < size_; ++r) spec_.store->get(key("mapped", r));
    arena_ = std::make_shared<ShmArena>(own, arena_bytes_);
    if (rank_ == 0)
      LogInfo("shared-memory group {}: arenas of {:.1f} MiB per rank; tensors placed there all-reduce in place",
              spec_.name, bytes / 1048576.0);
    return arena_;
  }

  // One contiguous CPU tensor (or, with `many`, any number), of a dtype the
  // reductions know, all of one dtype.
  static bool Ours(const std::vector<at::Tensor>& t, bool many = false) {
    if (t.empty() || (!many && t.size() != 1)) return false;
    for (const auto& x : t)
      if (!x.device().is_cpu() || !x.is_contiguous() || x.scalar_type() != t[0].scalar_type() ||
          x.is_sparse() || x.is_complex() || x.scalar_type() == at::kBool)
        return false;
    return true;
  }
  // An average (ReduceOp::AVG) this backend takes: floating tensors it reduces.
  static bool Averaged(const std::vector<at::Tensor>& t, bool many = false) {
    if (!Ours(t, many)) return false;
    for (const auto& x : t)
      if (!at::isFloatingType(x.scalar_type())) return false;
    return true;
  }
  // `o` as a sum, each tensor divided by the group's size first: an average
  // Gloo takes.
  template <typename Options>
  Options DividedForSum(std::vector<at::Tensor>& t, Options o) const {
    for (auto& x : t) x.div_(size_);
    o.reduceOp = c10d::ReduceOp::SUM;
    return o;
  }
  static bool SameShapes(const std::vector<at::Tensor>& t, const at::Tensor& like) {
    for (const auto& x : t)
      if (x.numel() != like.numel()) return false;
    return true;
  }
  // Each whole[i] holds size() parts[i].
  bool Gathers(const std::vector<at::Tensor>& whole, const std::vector<at::Tensor>& parts) const {
    for (size_t i = 0; i < whole.size(); ++i)
      if (whole[i].numel() != parts[i].numel() * size_ || whole[i].scalar_type() != parts[i].scalar_type())
        return false;
    return true;
  }
  std::vector<at::Tensor> Rows(const at::Tensor& whole) const {
    return whole.reshape({size_, -1}).unbind(0);
  }

  // `count` elements of `dtype` in rank r's slot (r == size(): the result
  // slot), from element `offset`.
  at::Tensor Slot(int r, at::ScalarType dtype, int64_t count, int64_t offset = 0) const {
    const int64_t item = c10::elementSize(dtype);
    char* at = base_ + DataOffset() + r * spec_.slot_bytes + offset * item;
    return at::from_blob(at, {count}, at::TensorOptions().dtype(dtype));
  }
  int64_t Capacity(const at::Tensor& t, int64_t per = 1) const {
    return std::max<int64_t>(1, spec_.slot_bytes / (t.element_size() * per));
  }

  // Per chunk: each rank publishes the shares the others sum (its own it reads
  // in place), sums its share of every rank's chunk in rank order into the
  // result slot and its tensor, then copies the others' sums back. No barrier
  // between chunks: the next chunk writes the ranks' slots, which every rank
  // has read once all have passed the middle barrier, and its sums go to the
  // result slot only after every rank has copied this chunk's out of it.
  void AllReduce(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
    if (size_ == 1) return;  // one rank's sum, average, min, max or product is its own tensor
    const auto dtype = tensor.scalar_type();
    const int64_t divisor = op == c10d::ReduceOp::AVG ? size_ : 1;
    if (divisor != 1) op = c10d::ReduceOp::SUM;
    if (arena_ && op == c10d::ReduceOp::SUM && (dtype == at::kFloat || dtype == at::kDouble) &&
        AllReduceInArenas(tensor, divisor))
      return;
    for (const Span c : Chunks(tensor.numel(), Capacity(tensor))) {
      at::Tensor local = tensor.view(-1).narrow(0, c.offset, c.count);
      auto others = [&](auto&& copy) {  // each other rank's share of the chunk
        for (int r = 0; r < size_; ++r)
          if (const Span s = ShareOf(c.count, r, size_); r != rank_ && s.count > 0) copy(s);
      };
      others([&](Span s) { Slot(rank_, dtype, s.count, s.offset).copy_(local.narrow(0, s.offset, s.count)); });
      Barrier("allreduce");
      const Span mine = ShareOf(c.count, rank_, size_);
      if (mine.count > 0) {
        std::vector<at::Tensor> parts;
        for (int r = 0; r < size_; ++r)
          parts.push_back(r == rank_ ? local.narrow(0, mine.offset, mine.count) : Slot(r, dtype, mine.count, mine.offset));
        SumToBoth(Slot(size_, dtype, mine.count, mine.offset), local.narrow(0, mine.offset, mine.count), parts, op,
                  divisor);
      }
      Barrier("allreduce");
      others([&](Span s) { local.narrow(0, s.offset, s.count).copy_(Slot(size_, dtype, s.count, s.offset)); });
    }
    Barrier("allreduce");  // the result slot is free for the next collective
  }

  // A tensor that lives in this rank's arena, where every rank's does
  // (shm_arena.h): each rank sums its share of every rank's tensor in rank
  // order, read where it lies, and writes the sum into every rank's tensor.
  // Per rank, memory sees the tensor's size read once and written once (the
  // slots' path also writes every published share and the result slot and
  // reads them back: 2x fewer bytes), with two meetings of the ranks. The
  // same bits (rank order). False, on every rank alike, when some rank's
  // tensor is elsewhere.
  bool AllReduceInArenas(const at::Tensor& tensor, int64_t divisor) {
    const int64_t n = tensor.numel();
    header_->arena_offset[rank_].store(arena_->OffsetOf(tensor.data_ptr(), tensor.nbytes()));
    header_->numel[rank_].store(n);
    Barrier("allreduce");
    for (int r = 0; r < size_; ++r)
      if (header_->arena_offset[r].load() < 0) return false;
    for (int r = 0; r < size_; ++r)
      if (const int64_t theirs = header_->numel[r].load(); theirs != n)
        Fail(fmt::format("shared-memory allreduce of group {}: rank {} reduces {} elements, rank {} {}", spec_.name,
                         spec_.ranks[rank_], n, spec_.ranks[r], theirs));
    if (tensor.scalar_type() == at::kFloat) SumInArenas<float>(tensor, divisor);
    else SumInArenas<double>(tensor, divisor);
    Barrier("allreduce");  // every share summed into every tensor: each rank may use its own again
    return true;
  }

  // Rank r's all-reduce tensor, as this rank sees it.
  char* InArena(int r) const { return peer_arena_[r] + header_->arena_offset[r].load(); }

  // This rank's share of every rank's tensor = every rank's share summed in
  // rank order: a share that stays in the cache through ATen's vectorized
  // add (into a temporary, as every part is also a destination), a larger
  // one block by block. No other rank reads or writes this share meanwhile.
  template <typename T>
  void SumInArenas(const at::Tensor& tensor, int64_t divisor) {
    const Span mine = ShareOf(tensor.numel(), rank_, size_);
    std::vector<T*> parts(size_);
    std::vector<const T*> block(size_);
    for (int r = 0; r < size_; ++r) parts[r] = reinterpret_cast<T*>(InArena(r)) + mine.offset;
    if (mine.count * static_cast<int64_t>(sizeof(T)) < kOnePassBytes) {
      std::vector<at::Tensor> addends;
      for (T* p : parts) addends.push_back(at::from_blob(p, {mine.count}, tensor.options()));
      at::Tensor sum = at::empty({mine.count}, tensor.options());
      ReduceInto(sum, addends, c10d::ReduceOp::SUM, divisor);
      for (auto& part : addends) part.copy_(sum);
      return;
    }
    alignas(64) T acc[kSumBlock];
    for (int64_t i = 0; i < mine.count; i += kSumBlock) {
      const int64_t k = std::min(kSumBlock, mine.count - i);
      for (int r = 0; r < size_; ++r) block[r] = parts[r] + i;
      AddParts(block, k, acc, divisor);
      for (T* p : parts) std::memcpy(p + i, acc, k * sizeof(T));
    }
  }

  void Broadcast(const at::Tensor& tensor, int root) {
    if (size_ == 1) return;  // the root's tensor is the only one
    at::Tensor flat = tensor.view(-1);
    for (const Span c : Chunks(flat.numel(), Capacity(flat))) {
      if (rank_ == root) Slot(size_, flat.scalar_type(), c.count).copy_(flat.narrow(0, c.offset, c.count));
      Barrier("broadcast");
      if (rank_ != root) flat.narrow(0, c.offset, c.count).copy_(Slot(size_, flat.scalar_type(), c.count));
      Barrier("broadcast");
    }
  }

  void AllGather(const std::vector<at::Tensor>& rows, const at::Tensor& part) {
    at::Tensor flat = part.view(-1);
    for (const Span c : Chunks(flat.numel(), Capacity(flat))) {
      Slot(rank_, flat.scalar_type(), c.count).copy_(flat.narrow(0, c.offset, c.count));
      Barrier("allgather");
      for (int r = 0; r < size_; ++r)
        rows[r].view(-1).narrow(0, c.offset, c.count).copy_(Slot(r, flat.scalar_type(), c.count));
      Barrier("allgather");
    }
  }

  // out = the reduction of every rank's rows[rank_], chunk by chunk: each
  // rank writes a chunk of every other rank's row into its slot, then sums its
  // own row (its own part read where it is).
  void ReduceScatter(const at::Tensor& out, const std::vector<at::Tensor>& rows, c10d::ReduceOp::RedOpType op) {
    at::Tensor flat = out.view(-1);
    const auto dtype = flat.scalar_type();
    // An output inside its own row (a reduce-scatter in place) goes through
    // the slot as the other rows do: the sum would overwrite it mid-read.
    const bool in_place = at::get_overlap_status(flat, rows[rank_]) != at::MemOverlapStatus::No;
    // Two ranks, the output exactly its own row (zero1's slice of its bucket),
    // not a half precision: the other rank's part is added into it where it
    // lies, nothing of it staged through the slot (a op b == b op a: the bits
    // of the rank-order sum).
    const at::Tensor own = rows[rank_].view(-1);
    const bool add_in_place = in_place && size_ == 2 && flat.data_ptr() == own.data_ptr() &&
                              flat.numel() == own.numel() && dtype != at::kBFloat16 && dtype != at::kHalf;
    for (const Span c : Chunks(flat.numel(), Capacity(flat, size_))) {
      for (int j = 0; j < size_; ++j)
        if (j != rank_ || (in_place && !add_in_place))
          Slot(rank_, dtype, c.count, j * c.count).copy_(rows[j].view(-1).narrow(0, c.offset, c.count));
      Barrier("reduce_scatter");
      if (add_in_place) {
        at::Tensor acc = flat.narrow(0, c.offset, c.count);
        Combine(acc, Slot(1 - rank_, dtype, c.count, rank_ * c.count), op);
        Barrier("reduce_scatter");
        continue;
      }
      std::vector<at::Tensor> parts;
      for (int r = 0; r < size_; ++r)
        parts.push_back(r == rank_ && !in_place ? rows[r].view(-1).narrow(0, c.offset, c.count)
                                                : Slot(r, dtype, c.count, rank_ * c.count));
      ReduceInto(flat.narrow(0, c.offset, c.count), parts, op);
      Barrier("reduce_scatter");
    }
  }

  // Every rank's count of barriers reached; the first rank still short of
  // `target`, or -1 when all have reached it.
  int Missing(uint64_t target) const {
    for (int r = 0; r < size_; ++r)
      if (header_->arrived[r].value.load() < target) return r;
    return -1;
  }

  // All ranks of the group meet: spin briefly, then sleep on the futex,
  // waking every shm::kWaitSlice to check that the rank not yet here is alive and the
  // timeout has not passed (then the error names it, as Gloo's would).
  void Barrier(const char* op) {
    StopPoint("shm: inside a collective");  // entered, not yet here: the others wait for it
    const uint64_t target = ++passed_;
    header_->arrived[rank_].value.store(target);
    if (Missing(target) < 0) {
      shm::Bump(header_->generation);
      return;
    }
    for (int i = 0; i < kSpins; ++i) {
      if (Missing(target) < 0) return;
      Pause();
    }
    const auto deadline = std::chrono::steady_clock::now() + spec_.timeout;
    while (true) {
      const uint32_t generation = header_->generation.load();
      const int missing = Missing(target);
      if (missing < 0) return;
      shm::SleepOn(header_->generation, generation);
      if (Missing(target) < 0) return;
      CheckPeer(op, missing, deadline);
    }
  }

  void CheckPeer(const char* op, int missing, std::chrono::steady_clock::time_point deadline) const {
    const int pid = header_->pid[missing].load();
    const int global = spec_.ranks[missing];
    if (shm::ProcessExited(pid, header_->start_ticks[missing].load()))
      Fail(fmt::format("shared-memory {} of group {}: rank {} (pid {}) has exited without entering it", op,
                       spec_.name, global, pid));
    if (std::chrono::steady_clock::now() > deadline)
      Fail(fmt::format("shared-memory {} of group {}: timed out after {} ms waiting for rank {}", op, spec_.name,
                       spec_.timeout.count(), global));
  }

  struct Job {
    c10::intrusive_ptr<ShmWork> work;
    std::function<void()> body;
  };

  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<void()> body) {
    auto work = c10::make_intrusive<ShmWork>(type, std::move(outputs));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) Fail(fmt::format("shared-memory group {}: used after shutdown", spec_.name));
      jobs_.push_back({work, std::move(body)});
    }
    ready_.notify_one();
    return work;
  }

  // The group's collectives in call order; after one fails, every later one
  // fails with its error (the group's segment is no longer in step).
  void Loop() {
    std::exception_ptr broken;
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (!broken) {
        try {
          at::NoGradGuard no_grad;
          job.body();
        } catch (...) {
          broken = std::current_exception();
        }
      }
      job.work->Complete(broken);
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    ready_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (mail_) mail_->Stop();
    for (int r = 0; r < static_cast<int>(peer_arena_.size()); ++r)
      if (r != rank_) ::munmap(peer_arena_[r], arena_bytes_);
    ::munmap(base_, bytes_);
  }

  ShmGroupSpec spec_;
  char* base_;
  size_t bytes_;
  Header* header_;
  std::unique_ptr<ShmMailboxes> mail_;  // point-to-point, where the group has mailboxes
  std::shared_ptr<ShmArena> arena_;      // this rank's, once attached (worker thread only)
  std::vector<char*> peer_arena_;        // every rank's arena as mapped here (this rank's: arena_'s)
  size_t arena_bytes_ = 0;
  uint64_t passed_ = 0;  // barriers this rank reached (worker thread only)
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once everything above is made
};

}  // namespace

// The smallest slot: one element of the widest type for each rank (a chunk
// is split into one share per rank), whatever --bucket-cap-mb asked for.
static int64_t SmallestSlotBytes(int size) { return (int64_t{16} * size + 63) / 64 * 64; }

// Why a segment of `bytes` could not be made: /dev/shm's room against the
// need where it is too small, else the error.
static std::string NoRoomReason(size_t bytes, const std::string& error) {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) == 0) {
    const double free_mib = static_cast<double>(fs.f_bavail) * fs.f_frsize / 1048576.0;
    if (free_mib * 1048576.0 < static_cast<double>(bytes))
      return fmt::format("/dev/shm {:.0f} MiB free < {:.0f} MiB needed", free_mib, bytes / 1048576.0);
  }
  return fmt::format("/dev/shm: {} for {:.0f} MiB", error, bytes / 1048576.0);
}

c10::intrusive_ptr<c10d::Backend> MakeShmBackend(const ShmGroupSpec& given, std::string* why_not) {
  const int size = static_cast<int>(given.ranks.size());
  if (size > kMaxRanks)
    throw std::invalid_argument(fmt::format("--cpu-backend=shm: group {} has {} ranks; shared memory takes at most {}",
                                            given.name, size, kMaxRanks));
  ShmGroupSpec spec = given;
  spec.slot_bytes = std::max(spec.slot_bytes, SmallestSlotBytes(size));
  const size_t bytes = DataOffset() + static_cast<size_t>(size + 1) * static_cast<size_t>(spec.slot_bytes) +
                       (spec.p2p_bytes > 0 ? MailboxBytes(size, spec.p2p_bytes) : 0);
  // Group rank 0 makes the segment (or finds no room and says so), the
  // others map it.
  const std::string key = "shm/segment";
  std::string name, why;
  char* base = nullptr;
  if (spec.rank == 0) {
    name = SegmentName(spec.name);
    base = MapSegment(name, bytes, /*create=*/true, &why);
    if (!base) {
      why = NoRoomReason(bytes, why);
      LogWarn("--cpu-backend: shared memory for group {} needs {:.1f} MiB of /dev/shm ({}): its collectives use Gloo",
              spec.name, bytes / 1048576.0, why);
      name = "!" + why;  // no segment, and why, for the other ranks
    }
    CrashPoint("shm: group segment made");
    spec.store->set(key, std::vector<uint8_t>(name.begin(), name.end()));
  } else {
    const auto value = spec.store->get(key);
    name.assign(value.begin(), value.end());
  }
  if (!name.empty() && name[0] == '!') {
    if (why_not) *why_not = name.substr(1);
    return {};
  }
  if (spec.rank == 0 && spec.p2p_bytes > 0)
    LogInfo("shared-memory group {}: point-to-point mailboxes of {} messages of up to {:.1f} MiB per pair of ranks "
            "(larger ones: Gloo)", spec.name, kMailSlots, spec.p2p_bytes / 1048576.0);
  if (!base) base = MapSegment(name, bytes, /*create=*/false, &why);
  if (base) {
    CrashPoint("shm: group segment mapped");
    reinterpret_cast<Header*>(base)->start_ticks[spec.rank].store(shm::ProcessStartTicks(::getpid()));
    reinterpret_cast<Header*>(base)->pid[spec.rank].store(::getpid());
  }
  // Every rank says whether it mapped the segment: ranks the launcher took to
  // share a host but that share no /dev/shm (LOCAL_WORLD_SIZE left at the
  // world on two hosts) all use Gloo instead, with the reason.
  const std::string mine = base ? "ok" : "cannot map it: " + why;
  spec.store->set(fmt::format("shm/mapped/{}", spec.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::string refused;  // the first rank that could not map it, and why
  for (int r = 0; r < size && refused.empty(); ++r) {
    const auto value = spec.store->get(fmt::format("shm/mapped/{}", r));
    const std::string theirs(value.begin(), value.end());
    if (theirs != "ok") refused = fmt::format("rank {} {}", spec.ranks[r], theirs);
  }
  // Every rank has mapped it or given up: from here a killed run leaves nothing.
  if (spec.rank == 0) ::shm_unlink(name.c_str());
  if (refused.empty()) return c10::make_intrusive<ShmBackend>(spec, base, bytes);
  if (base) ::munmap(base, bytes);
  if (spec.rank == 0) LogWarn("--cpu-backend: group {}'s {}: its collectives use Gloo", spec.name, refused);
  if (why_not) *why_not = refused;
  return {};
}

std::shared_ptr<ShmArena> AttachShmArenas(const c10::intrusive_ptr<c10d::Backend>& backend, int64_t bytes) {
  auto* shm = dynamic_cast<ShmBackend*>(backend.get());
  if (!shm) return nullptr;
  // Every rank reads the same environment, so all skip the collective alike.
  if (const char* env = std::getenv("DDPBENCH_SHM_ARENAS"); env && std::string(env) == "0") {
    if (shm->getRank() == 0) LogInfo("DDPBENCH_SHM_ARENAS=0: no shared-memory arenas; buffers all-reduce through the slots");
    return nullptr;
  }
  return shm->AttachArenas(bytes);
}

}  // namespace ddpbench
