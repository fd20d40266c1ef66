// The recording backend (recording_backend.h): each call is entered in the
// flight recorder, forwarded, and its Work wrapped so that its end (a wait
// returning or throwing, or its future completing) is recorded too.
#include "harness/recording_backend.h"

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "harness/dist.h"
#include "harness/flight_recorder.h"

namespace ddpbench {
namespace {

int64_t Bytes(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += static_cast<int64_t>(t.numel() * t.element_size());
  return n;
}

// A Work whose end is recorded; everything else is the wrapped Work's.
class RecordedWork : public c10d::Work {
 public:
  RecordedWork(c10::intrusive_ptr<c10d::Work> inner, uint64_t id) : inner_(std::move(inner)), id_(id) {}
  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  std::vector<at::Tensor> result() override { return inner_->result(); }
  void synchronize() override { inner_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout) override {
    flight::Waited(id_);
    try {
      const bool done = inner_->wait(timeout);
      flight::End(id_, true);
      return done;
    } catch (...) {
      flight::End(id_, false);
      throw;
    }
  }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return inner_->getFuture(); }
  float getDuration() const override { return inner_->getDuration(); }
  uint64_t getSequencenumber() const override { return inner_->getSequencenumber(); }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  uint64_t id_;
};

class Recording : public c10d::Backend {
 public:
  Recording(c10::intrusive_ptr<c10d::Backend> inner, const std::string& name, const std::vector<int>& ranks)
      : Backend(inner->getRank(), inner->getSize()), inner_(std::move(inner)),
        group_(flight::RegisterGroup(name, ranks)) {}

  const std::string getBackendName() const override { return inner_->getBackendName(); }
  c10::intrusive_ptr<Options> getBackendOptions() override { return inner_->getBackendOptions(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void shutdown() override { inner_->shutdown(); }
  void abort() override { inner_->abort(); }
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
  void enableCollectivesTiming() override { inner_->enableCollectivesTiming(); }
  c10d::ErrorType getError() override { return inner_->getError(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) override {
    return Run("broadcast", Bytes(t), [&] { return inner_->broadcast(t, o); });
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) override {
    return Run("allreduce", Bytes(t), [&] { return inner_->allreduce(t, o); });
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& t,
                                                     const c10d::AllreduceCoalescedOptions& o) override {
    return Run("allreduce_coalesced", Bytes(t), [&] { return inner_->allreduce_coalesced(t, o); });
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& t, const c10d::ReduceOptions& o) override {
    return Run("reduce", Bytes(t), [&] { return inner_->reduce(t, o); });
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& o) override {
    return Run("allgather", Bytes(in), [&] { return inner_->allgather(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& o) override {
    return Run("allgather", Bytes({in}), [&] { return inner_->_allgather_base(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& out,
                                                     std::vector<at::Tensor>& in,
                                                     const c10d::AllgatherOptions& o) override {
    return Run("allgather_coalesced", Bytes(in), [&] { return inner_->allgather_coalesced(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::AllgatherOptions& o) override {
    return Run("allgather_coalesced", Bytes(in), [&] { return inner_->allgather_into_tensor_coalesced(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                        const c10d::GatherOptions& o) override {
    return Run("gather", Bytes(in), [&] { return inner_->gather(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& out, std::vector<std::vector<at::Tensor>>& in,
                                         const c10d::ScatterOptions& o) override {
    return Run("scatter", Bytes(out), [&] { return inner_->scatter(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& out,
                                                std::vector<std::vector<at::Tensor>>& in,
                                                const c10d::ReduceScatterOptions& o) override {
    return Run("reduce_scatter", Bytes(out), [&] { return inner_->reduce_scatter(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    return Run("reduce_scatter", Bytes({in}), [&] { return inner_->_reduce_scatter_base(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& out,
                                                                 std::vector<at::Tensor>& in,
                                                                 const c10d::ReduceScatterOptions& o) override {
    return Run("reduce_scatter_coalesced", Bytes(in),
               [&] { return inner_->reduce_scatter_tensor_coalesced(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& o) override {
    return Run("alltoall", Bytes({in}), [&] { return inner_->alltoall_base(out, in, out_splits, in_splits, o); });
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& out, std::vector<at::Tensor>& in,
                                          const c10d::AllToAllOptions& o) override {
    return Run("alltoall", Bytes(in), [&] { return inner_->alltoall(out, in, o); });
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override {
    return Run("barrier", 0, [&] { return inner_->barrier(o); });
  }
  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) override {
    inner_->monitoredBarrier(o, wait_all_ranks);
  }
  // Gloo's send and recv Works have no future: their end is the wait's.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int dst, int tag) override {
    const uint64_t id = flight::Enter(group_, "send", dst, tag, Bytes(t), CurrentCollective());
    return Wrap(Forward(id, [&] { return inner_->send(t, dst, tag); }), id, false);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int src, int tag) override {
    const uint64_t id = flight::Enter(group_, "recv", src, tag, Bytes(t), CurrentCollective());
    return Wrap(Forward(id, [&] { return inner_->recv(t, src, tag); }), id, false);
  }

 private:
  template <typename F>
  c10::intrusive_ptr<c10d::Work> Run(const char* op, int64_t bytes, F&& call) {
    const uint64_t id = flight::Enter(group_, op, -1, 0, bytes, CurrentCollective());
    return Wrap(Forward(id, call), id, true);
  }
  template <typename F>
  static c10::intrusive_ptr<c10d::Work> Forward(uint64_t id, F&& call) {
    try {
      return call();
    } catch (...) {
      flight::End(id, false);
      throw;
    }
  }
  // A collective's future completes when it ends, whoever waits on it (the
  // Reducer waits on futures, never on the Work).
  static c10::intrusive_ptr<c10d::Work> Wrap(c10::intrusive_ptr<c10d::Work> work, uint64_t id, bool has_future) {
    if (id == 0 || !work) return work;
    if (has_future)
      work->getFuture()->addCallback([id](c10::ivalue::Future& f) { flight::End(id, !f.hasError()); });
    return c10::make_intrusive<RecordedWork>(std::move(work), id);
  }

  c10::intrusive_ptr<c10d::Backend> inner_;
  int group_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend> RecordingBackend(c10::intrusive_ptr<c10d::Backend> inner, const std::string& name,
                                                   const std::vector<int>& ranks) {
  if (!flight::Enabled()) return inner;
  return c10::make_intrusive<Recording>(std::move(inner), name, ranks);
}

}  // namespace ddpbench
