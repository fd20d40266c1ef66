// Harness-level collectives on the run's process group. Figures are gathered
// as float64 so nothing is lost on the way to rank 0's row.
#include "harness/dist.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/torch.h>

#include <exception>

namespace ddpbench {

namespace {
thread_local const char* g_collective = nullptr;
thread_local const char* g_failed = nullptr;
}  // namespace

CollectiveLabel::CollectiveLabel(const char* name)
    : previous_(g_collective), uncaught_(std::uncaught_exceptions()) {
  g_collective = name;
}
CollectiveLabel::~CollectiveLabel() {
  if (std::uncaught_exceptions() > uncaught_ && !g_failed) g_failed = g_collective;
  g_collective = previous_;
}
const char* CurrentCollective() { return g_collective; }
const char* FailedCollective() { return g_failed; }

void DistContext::Barrier() {
  if (world == 1 || !group) return;
  CollectiveLabel label("barrier");
  // A tiny all-reduce rather than barrier(): it works the same on Gloo and
  // NCCL and honours the group's timeout.
  AllReduceSum(0.0);
}

std::vector<double> DistContext::AllGather(const std::vector<double>& values) {
  if (world == 1 || !group) return values;
  CollectiveLabel label("all-gather of the figures");
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  auto mine = torch::tensor(values, torch::kFloat64).to(device);
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world; ++r) outputs[0].push_back(torch::empty({static_cast<int64_t>(values.size())}, opts));
  std::vector<at::Tensor> inputs{mine};
  group->allgather(outputs, inputs)->wait();
  std::vector<double> all;
  for (auto& t : outputs[0]) {
    auto cpu = t.to(torch::kCPU);
    all.insert(all.end(), cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel());
  }
  return all;
}

void DistContext::BroadcastFromRoot(const std::vector<at::Tensor>& tensors, const char* label) {
  BroadcastFrom(0, tensors, label);
}

void DistContext::BroadcastFrom(int root, const std::vector<at::Tensor>& tensors, const char* label) {
  if (world == 1 || !group || tensors.empty()) return;
  constexpr size_t kBroadcastBytes = 250 * 1024 * 1024;  // DDP's broadcast_bucket_size
  torch::NoGradGuard no_grad;
  CollectiveLabel collective(label);
  c10d::broadcast_coalesced(group, tensors, kBroadcastBytes, root);
}

namespace {
double Reduce(DistContext& d, double value, c10d::ReduceOp::RedOpType op) {
  if (d.world == 1 || !d.group) return value;
  CollectiveLabel label(CurrentCollective() ? CurrentCollective() : "all-reduce of a figure");
  std::vector<at::Tensor> t{torch::full({1}, value, torch::kFloat64).to(d.device)};
  d.group->allreduce(t, c10d::AllreduceOptions{op})->wait();
  return t[0].item<double>();
}
}  // namespace

std::vector<std::string> DistContext::GatherTextToRoot(const std::string& key, const std::string& mine,
                                                       const char* label) {
  if (world == 1 || !group) return {mine};
  CollectiveLabel collective(label);
  auto store = group->getStore();
  if (!is_root()) {
    store->set(key + "/" + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    return {};
  }
  std::vector<std::string> all{mine};
  for (int r = 1; r < world; ++r) {
    const std::vector<uint8_t> bytes = store->get(key + "/" + std::to_string(r));
    all.emplace_back(bytes.begin(), bytes.end());
  }
  return all;
}

double DistContext::AllReduceSum(double value) { return Reduce(*this, value, c10d::ReduceOp::SUM); }
double DistContext::AllReduceMax(double value) { return Reduce(*this, value, c10d::ReduceOp::MAX); }

}  // namespace ddpbench
