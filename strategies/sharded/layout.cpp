// The sharded strategies' parameter layout: buckets, slices and views.
#include "strategies/sharded/layout.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "base/config.h"
#include "strategies/data/data_parallel.h"

namespace ddpbench::sharded {
namespace {

constexpr int64_t kAlignBytes = 64;  // parameters and slices start on 64-byte boundaries

constexpr Labels kLabels[] = {
    {"zero1", "ZeRO-1 broadcast of the initial parameters and buffers", "ZeRO-1 buffer broadcast",
     "ZeRO-1 gradient reduce-scatter", "ZeRO-1 gradient all-reduce", "ZeRO-1 found-inf all-reduce",
     "ZeRO-1 parameter all-gather"},
    {"zero2", "ZeRO-2 broadcast of the initial parameters and buffers", "ZeRO-2 buffer broadcast",
     "ZeRO-2 gradient reduce-scatter", "ZeRO-2 gradient all-reduce", "ZeRO-2 found-inf all-reduce",
     "ZeRO-2 parameter all-gather"},
    {"zero3", "ZeRO-3 broadcast of the initial parameters and buffers", "ZeRO-3 buffer broadcast",
     "ZeRO-3 gradient reduce-scatter", "ZeRO-3 gradient all-reduce", "ZeRO-3 found-inf all-reduce",
     "ZeRO-3 unit parameter all-gather"},
};

// The order backward produces the gradients of l.params in. DDP learns it
// from its first backward and rebuilds its buckets; here a probe backward
// of one small image in eval mode (no running statistics change, no random
// numbers drawn) gives the same order before the layout is made, since the
// graph does not depend on the data. Parameters without a gradient go last.
std::vector<size_t> GradientOrder(Layout& l) {
  std::vector<size_t> order;
  std::vector<unsigned> hooks;
  for (size_t i = 0; i < l.params.size(); ++i)
    hooks.push_back(l.params[i].register_hook([&order, i](const torch::Tensor&) { order.push_back(i); }));
  l.model->eval();
  const auto& options = l.model->options();
  auto image = torch::zeros({1, options.in_channels, 32, 32}, l.params.front().options());
  l.model->forward(image).sum().backward();
  l.model->train();
  std::vector<bool> seen(l.params.size(), false);
  for (size_t i : order) seen[i] = true;
  for (size_t i = 0; i < l.params.size(); ++i) {
    l.params[i].remove_hook(hooks[i]);
    l.params[i].mutable_grad().reset();
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

// The trainable parameters in layout order (stages 1, 2: the order their
// gradients become ready; stage 3: model order), with each one's unit.
void CollectParameters(Layout& l) {
  const char* name = LabelsOf(l.stage).name;
  auto& units = *l.model->units();
  for (size_t u = 0; u < units.size(); ++u)
    for (auto& p : units.ptr(u)->parameters())
      if (p.requires_grad()) {
        l.params.push_back(p);
        l.param_unit.push_back(static_cast<int64_t>(u));
      }
  TORCH_CHECK(!l.params.empty(), name, ": the model has no trainable parameters");
  for (const auto& p : l.params)
    TORCH_CHECK(p.scalar_type() == l.params.front().scalar_type(), name,
                ": all trainable parameters must share one dtype");
  if (l.stage == 3) return;
  std::vector<torch::Tensor> params;
  std::vector<int64_t> unit_of;
  for (size_t i : GradientOrder(l)) {
    params.push_back(l.params[i]);
    unit_of.push_back(l.param_unit[i]);
  }
  l.params = std::move(params);
  l.param_unit = std::move(unit_of);
}

// The partition of the collected parameters, each unit's buckets and the
// order the buckets' reductions launch in.
void Partition(Layout& l, const RunConfig& config) {
  std::vector<int64_t> numels;
  for (const auto& p : l.params) numels.push_back(p.numel());
  const int64_t element = l.params.front().element_size();
  const int64_t align = std::max<int64_t>(kAlignBytes / element, 1);
  if (l.stage == 3) {
    l.partition = PartitionForZeroByGroup(numels, l.param_unit, l.world, align);
  } else {
    const int64_t cap = std::max<int64_t>(static_cast<int64_t>(config.bucket_cap_mb * 1024 * 1024), 1);
    // As ddp: torch's 1 MiB first bucket with the default cap.
    const int64_t first_cap = config.bucket_cap_mb == 25.0 ? std::min(kFirstBucketBytes, cap) : cap;
    l.partition = PartitionForZero(numels, element, cap, first_cap, l.world, align);
  }
  l.unit_buckets.assign(l.model->units()->size(), {});
  for (size_t i = 0; i < l.params.size(); ++i) {
    auto& mine = l.unit_buckets[l.param_unit[i]];
    const int64_t b = l.partition.slots[i].bucket;
    if (std::find(mine.begin(), mine.end(), b) == mine.end()) mine.push_back(b);
  }
  l.launch_order.resize(l.buckets());
  std::iota(l.launch_order.begin(), l.launch_order.end(), size_t{0});
  if (l.stage == 3)
    std::reverse(l.launch_order.begin(), l.launch_order.end());  // backward visits units from the end
}

// The flat buffers and each bucket's views of them.
void MakeBuffers(Layout& l) {
  const int stage = l.stage;
  auto options = l.params.front().options();
  if (stage < 3) l.flat_params = torch::zeros({l.partition.total_numel}, options);
  if (stage == 3) l.shard_params = torch::zeros({l.partition.ShardNumel()}, options);
  if (stage == 1) l.flat_grads = torch::zeros({l.partition.total_numel}, options);
  if (stage >= 2) l.grad_shard = torch::zeros({l.partition.ShardNumel()}, options);
  int64_t shard_offset = 0;
  for (const auto& b : l.partition.buckets) {
    l.bucket_params.push_back(stage < 3 ? l.flat_params.narrow(0, b.offset, b.numel)
                                        : torch::zeros({b.numel}, options));
    l.slice_params.push_back(stage < 3 ? l.OwnSlice(l.bucket_params.back(), b)
                                       : l.shard_params.narrow(0, shard_offset, b.shard_numel));
    l.bucket_grads.push_back(stage == 1 ? l.flat_grads.narrow(0, b.offset, b.numel) : torch::Tensor());
    l.slice_grads.push_back(stage == 1 ? l.OwnSlice(l.bucket_grads.back(), b)
                                       : l.grad_shard.narrow(0, shard_offset, b.shard_numel));
    shard_offset += b.shard_numel;
  }
}

}  // namespace

const Labels& LabelsOf(int stage) { return kLabels[stage - 1]; }

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

int64_t Layout::NeighbourBucket(size_t u, int step) const {
  for (int64_t v = static_cast<int64_t>(u) + step; v >= 0 && v < static_cast<int64_t>(unit_buckets.size()); v += step)
    if (UnitBucket(v) >= 0) return UnitBucket(v);
  return -1;
}

void LayOut(Layout& l, const RunConfig& config) {
  CollectParameters(l);
  Partition(l, config);
  MakeBuffers(l);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < l.params.size(); ++i) {
    auto& p = l.params[i];
    const ZeroSlot& slot = l.partition.slots[i];
    auto view = l.InBucket(l.bucket_params[slot.bucket], slot).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
    if (l.stage == 1) p.mutable_grad() = l.InBucket(l.bucket_grads[slot.bucket], slot).view(p.sizes());
  }
}

}  // namespace ddpbench::sharded
