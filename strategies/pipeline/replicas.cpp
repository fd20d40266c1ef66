// The replicate all-reduce of pipelines replicated by data parallelism.
#include "strategies/pipeline/replicas.h"

#include <torch/torch.h>

#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/trace.h"

namespace ddpbench::pipeline {

// One chunk's all-reduce: its gradients, the flat buffer they travel in, and
// the collective's work.
struct ReplicaGradients::InFlight {
  std::vector<torch::Tensor> grads;
  std::vector<at::Tensor> flat;
  c10::intrusive_ptr<c10d::Work> work;
  c10::intrusive_ptr<c10::ivalue::Future> stamped;  // the trace's end, taken when the transfer ends
  torch::Device device = torch::kCPU;
};

ReplicaGradients::ReplicaGradients(c10d::ProcessGroup& group, int replicas, PhaseTimer& timer)
    : group_(group), replicas_(replicas), timer_(timer) {}

ReplicaGradients::~ReplicaGradients() = default;

void ReplicaGradients::Launch(int chunk, const std::vector<torch::Tensor>& params, torch::Device device) {
  auto f = std::make_unique<InFlight>();
  f->device = device;
  std::vector<torch::Tensor> views;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    f->grads.push_back(p.grad());
    views.push_back(p.grad().reshape({-1}));
  }
  if (f->grads.empty()) return;
  f->flat = {torch::cat(views)};
  CollectiveLabel label("pipeline replicate all-reduce");
  const auto start = trace::Clock::now();
  f->work = group_.allreduce(f->flat);
  if (trace::Enabled() && device.is_cpu())  // a Gloo future completes when the transfer has
    f->stamped = f->work->getFuture()->then(
        [start, chunk](c10::ivalue::Future&) {
          trace::Collective("replicate all-reduce", chunk, start, trace::Clock::now());
          return c10::IValue();
        },
        c10::NoneType::get());
  in_flight_.push_back(std::move(f));
}

void ReplicaGradients::Finish() {
  torch::NoGradGuard no_grad;
  for (auto& f : in_flight_) {
    {
      auto scope = timer_.Measure(Phase::kCommunication, f->device);
      CollectiveLabel label("pipeline replicate all-reduce");
      f->work->wait();
      if (f->stamped) f->stamped->wait();
    }
    torch::Tensor mean = f->flat.front().div_(replicas_);
    int64_t at = 0;
    for (auto& g : f->grads) {
      g.copy_(mean.narrow(0, at, g.numel()).view_as(g));
      at += g.numel();
    }
  }
  in_flight_.clear();
}

}  // namespace ddpbench::pipeline
