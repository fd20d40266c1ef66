// The sharded strategies' parameter gathers and stage 3's materialisation.
#include "strategies/sharded/gathers.h"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <algorithm>

#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/trace.h"
#include "strategies/data/data_parallel.h"

namespace ddpbench::sharded {

ParameterGathers::ParameterGathers(Layout& layout, DistContext* dist, PhaseTimer& timer)
    : layout_(layout), dist_(dist), timer_(timer), label_(LabelsOf(layout.stage).gather),
      held_(layout.buckets(), true), gathers_(layout.buckets()) {}

ParameterGathers::~ParameterGathers() {
  for (auto& work : gathers_) {
    if (!work) continue;
    try {
      work->wait();
    } catch (...) {  // the run is failing already; its error is reported
    }
  }
}

torch::Tensor ParameterGathers::RunUnits(torch::Tensor x, bool training) {
  size_t u = 0;
  for (auto& unit : *layout_.model->units()) {
    BeforeForward(u);
    x = unit.forward(x);
    AfterForward(u, x, training);
    ++u;
  }
  return x;
}

void ParameterGathers::BeforeForward(size_t u) {
  for (int64_t b : layout_.unit_buckets[u]) Gather(b);
  if (layout_.stage == 3) StartGather(layout_.NeighbourBucket(u, +1));  // prefetch the next unit
}

void ParameterGathers::AfterForward(size_t u, torch::Tensor& out, bool training) {
  const int64_t b = layout_.UnitBucket(u);
  if (layout_.stage < 3 || b < 0 || evaluation_held_) return;
  const bool backward = training && out.requires_grad();
  if (backward) out.register_hook([this, u](const torch::Tensor& /*grad*/) { BeforeBackward(u); });
  // The last unit's backward comes next: keep it.
  if (!backward || layout_.NeighbourBucket(u, +1) >= 0) Release(b);
}

void ParameterGathers::BeforeBackward(size_t u) {
  Gather(layout_.UnitBucket(u));
  StartGather(layout_.NeighbourBucket(u, -1));  // prefetch the previous unit
}

// Starts the all-gather of bucket b's parameters (stage 3: into newly
// allocated memory) unless it is under way or, stage 3, already there.
void ParameterGathers::StartGather(int64_t b) {
  if (b < 0 || gathers_[b]) return;
  if (layout_.stage == 3) {
    if (held_[b]) return;
    Materialize(b);
  }
  if (!layout_.comm) {
    torch::NoGradGuard no_grad;  // stage 3, world 1: this rank's slice is the bucket
    if (layout_.stage == 3) layout_.bucket_params[b].copy_(layout_.slice_params[b]);
    return;
  }
  const auto start = CommClock::now();
  gathers_[b] = layout_.group->_allgather_base(layout_.bucket_params[b], layout_.slice_params[b]);
  if (trace::Enabled() && !layout_.device.is_cuda())  // its real end: Gloo completes the future then
    gathers_[b]->getFuture()->addCallback([start, b](c10::ivalue::Future&) {
      trace::Collective("all-gather", b, start, CommClock::now());
    });
}

// Bucket b's parameters, complete.
void ParameterGathers::Gather(int64_t b) {
  if (b < 0) return;
  if (layout_.stage == 3) StartGather(b);
  if (!gathers_[b]) return;
  CollectiveLabel label(label_);
  gathers_[b]->wait();
  gathers_[b].reset();
}

void ParameterGathers::StartDue() {
  if (!due_) return;
  due_ = false;
  auto scope = timer_.Measure(Phase::kCommunication);
  CollectiveLabel label(label_);
  for (size_t b = layout_.bucket_params.size(); b-- > 0;) StartGather(static_cast<int64_t>(b));
}

void ParameterGathers::GatherAll() {
  StartDue();
  for (size_t b = 0; b < gathers_.size(); ++b) Gather(static_cast<int64_t>(b));
}

void ParameterGathers::WaitUnderWay() {
  for (auto& work : gathers_)
    if (work) {
      work->wait();
      work.reset();
    }
}

void ParameterGathers::GatherForEvaluation() {
  if (evaluation_held_) return;
  const int64_t held_max = held_max_;
  for (size_t b = 0; b < held_.size(); ++b) Gather(static_cast<int64_t>(b));
  held_max_ = held_max;
  evaluation_held_ = true;
}

void ParameterGathers::ReleaseEvaluation() {
  if (!evaluation_held_) return;
  for (size_t b = 0; b < held_.size(); ++b) Release(b);
  evaluation_held_ = false;
}

// Stage 3: bucket b's full parameters get their memory.
void ParameterGathers::Materialize(size_t b) {
  c10::DeviceGuard guard(layout_.device);
  auto storage = layout_.bucket_params[b].storage();
  const size_t bytes = static_cast<size_t>(Bytes(layout_.bucket_params[b]));
  storage.set_data_ptr_noswap(storage.allocator()->allocate(bytes));
  storage.set_nbytes(bytes);
  held_[b] = true;
  held_max_ = std::max(held_max_, static_cast<int64_t>(std::count(held_.begin(), held_.end(), true)));
}

void ParameterGathers::Release(size_t b) {
  if (!held_[b]) return;
  if (gathers_[b]) Gather(static_cast<int64_t>(b));  // a prefetch still writing into it
  c10::DeviceGuard guard(layout_.device);
  auto storage = layout_.bucket_params[b].storage();
  storage.set_data_ptr_noswap(storage.allocator()->allocate(0));
  storage.set_nbytes(0);
  held_[b] = false;
}

}  // namespace ddpbench::sharded
