// How zero1, zero2 and zero3 lay the model's trainable parameters out
// (zero_sharded.h has what each stage shards): one flat layout
// (planning/zero_partition.h) cut into buckets, each padded and split into
// N equal slices, rank r owning slice r of every bucket. Stages 1 and 2
// order it by gradient readiness (learnt from a probe backward, as DDP learns
// it from its first) and cut it by --bucket-cap-mb; stage 3 orders it by
// model units (stem, every block, head), one bucket per unit. The model's
// parameters become views of their bucket's buffer. The gathers
// (gathers.h) and the reductions (reductions.h) work on this layout.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "models/resnet.h"
#include "planning/zero_partition.h"

namespace c10d {
class ProcessGroup;
}

namespace ddpbench {

struct RunConfig;

namespace sharded {

// Names of the collectives of each stage (static: an error may name one
// after the strategy is gone).
struct Labels {
  const char* name;
  const char* initial;
  const char* buffers;
  const char* reduce_scatter;
  const char* all_reduce;
  const char* found_inf;
  const char* gather;
};
const Labels& LabelsOf(int stage);

int64_t Bytes(const torch::Tensor& t);

struct Layout {
  int stage = 1;
  // This rank's place in its shard group and the group's size: the world,
  // or with --replicate-degree one group of the mesh (planning/mesh.h).
  int rank = 0, world = 1;
  bool comm = false;  // world > 1: the shard group's collectives (gathers, reduce-scatters)
  int data_world = 1;  // the ranks whose gradients are averaged: the group times its replicas
  // Collectives over every rank (the gradients' reduction, rank 0's initial
  // state and buffers): also with a shard group of one rank replicated.
  bool world_comm() const { return data_world > 1; }
  c10d::ProcessGroup* group = nullptr;      // the shard group's collectives
  c10d::ProcessGroup* replicate = nullptr;  // across the replicas of the group (null: none)
  torch::Device device = torch::kCPU;
  ResNet model{nullptr};
  std::vector<torch::Tensor> params;                // in layout order
  std::vector<int64_t> param_unit;                  // the unit of each of params
  std::vector<std::vector<int64_t>> unit_buckets;   // per unit: the buckets holding its parameters
  ZeroPartition partition;
  std::vector<size_t> launch_order;  // the order gradients complete buckets in
  // Stage 1, 2: the flat parameter buffer; stage 3: this rank's slices.
  torch::Tensor flat_params, shard_params;
  // Stage 1: the flat gradient buffer; stages 2, 3: this rank's slices.
  torch::Tensor flat_grads, grad_shard;
  // Per bucket: its parameters in full (stage 3: memory only while held),
  // this rank's slice of them, its gradients in full (stages 2, 3: only
  // between the first gradient and the reduction), and this rank's reduced
  // gradient slice.
  std::vector<torch::Tensor> bucket_params, slice_params, bucket_grads, slice_grads;

  size_t buckets() const { return partition.buckets.size(); }
  torch::Tensor OwnSlice(const torch::Tensor& bucket, const ZeroBucket& b) const {
    return bucket.narrow(0, rank * b.shard_numel, b.shard_numel);
  }
  torch::Tensor InBucket(const torch::Tensor& bucket, const ZeroSlot& slot) const {
    return bucket.narrow(0, slot.offset - partition.buckets[slot.bucket].offset, slot.numel);
  }
  // The bucket of unit u's parameters (stage 3: one per unit), or -1.
  int64_t UnitBucket(size_t u) const { return unit_buckets[u].empty() ? -1 : unit_buckets[u].front(); }
  // The bucket of the nearest unit after (step +1) or before (-1) unit u that has one, or -1.
  int64_t NeighbourBucket(size_t u, int step) const;
};

// `layout`'s model's trainable parameters collected (stages 1, 2: in the
// order backward makes their gradients) and laid out in buckets, each
// parameter now a view of its bucket (stage 1: its .grad too). `layout`
// holds the stage, rank, world, device and model already.
void LayOut(Layout& layout, const RunConfig& config);

}  // namespace sharded
}  // namespace ddpbench
