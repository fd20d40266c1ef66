// The logical training state behind a strategy's SaveState() map, so that a
// snapshot written by one world and strategy resumes on another. A strategy
// that shards its parameters says which slices of which parameter each rank
// stores where (StateLayout); everything else it saves under "model.",
// "optim." or "scaler." is held whole, by every rank, under its logical name
// (single, dp and ddp store nothing else). The optimizer's per-parameter
// fields follow their parameter: "optim.<stored>.exp_avg" holds the same
// slices of "optim.<param>.exp_avg" as the parameter's stored tensor does of
// the parameter; the scalar fields ("step", "fused_step") are whole copies.
// Keys outside those prefixes ("meta.", "ddp.", "rng.") describe one layout
// or one process and are never resharded. The arithmetic is
// planning/reshard.h; this file turns tensors into its pieces and back.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "harness/state_map.h"
#include "planning/reshard.h"

namespace ddpbench {

struct StateLayout {
  // False: the stored state cannot be read by another layout (pipelines).
  bool reshardable = true;
  // Slices of parameters: logical = the parameter's dotted name (no
  // "model."), stored = the SaveState() key holding it, holder = the
  // global rank storing it. Every rank's, so that rank 0 can describe all.
  // A key without an `optim_name` entry has no optimizer fields (a buffer
  // held by some ranks only: a stage rank's BatchNorm statistics).
  std::vector<ShardPiece> params;
  // The optimizer's name of each stored key in `params` ("shard.bucket3" ->
  // "bucket3"): its fields are "optim.<name>.<field>".
  std::map<std::string, std::string> optim_name;
  // The shape of each sliced parameter.
  std::map<std::string, std::vector<int64_t>> shapes;
  // The dtype of each whose stored key the describing rank does not hold
  // (another stage rank's layers); else the stored tensor's.
  std::map<std::string, torch::ScalarType> dtypes;
};

struct LogicalTensor {
  std::vector<int64_t> shape;
  torch::ScalarType dtype = torch::kFloat;
};

// A snapshot's state as planning/reshard.h sees it.
struct StateDescription {
  int world = 1;
  std::vector<std::string> whole;        // logical tensors every rank holds whole under their own name
  std::vector<ShardPiece> pieces;        // the sliced ones, every rank's
  std::map<std::string, LogicalTensor> logical;  // every logical tensor
};

// Is `key` part of the logical state (else layout- or process-specific)?
bool IsLogicalKey(const std::string& key);

// What `stored` (one rank's SaveState() map, the same keys on every rank)
// holds, for a world of `world` ranks.
StateDescription DescribeState(const StateLayout& layout, const TensorMap& stored, int world);

// Every rank's pieces of a description.
std::vector<ShardPiece> AllPieces(const StateDescription& d);

// This rank's SaveState() map under `layout`, allocated (zeros) from
// `fresh` (the new strategy's SaveState() before any step, whose
// layout-specific keys are kept as they are) and the logical tensors the
// snapshot holds; `want` receives the pieces to fill.
TensorMap AllocateTarget(const StateLayout& layout, const TensorMap& fresh,
                         const std::map<std::string, LogicalTensor>& logical, int rank, std::vector<ShardPiece>* want);

// Carries out `copies` from the old ranks' maps (`from[holder]`) into `to`.
void ApplyCopies(const std::vector<SliceCopy>& copies, const std::map<int, TensorMap>& from, TensorMap* to);

}  // namespace ddpbench
