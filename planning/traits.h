// What code outside a strategy may ask about it, in one row per strategy
// (traits.cpp): its family, ZeRO stage, the flags it reads, whether its
// BatchNorm sees other samples than single's, whether --cuda-graphs can
// capture it. Validation, --help, the run's expectation and the projection
// branch on these traits, never on a strategy's name. Torch-free, so that the
// projection can read it.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ddpbench {

// How a strategy uses devices; the harness derives batch sizes, the number of
// processes and learning-rate scaling from this.
enum class Parallelism {
  kNone,              // one device (single)
  kDataInProcess,     // one process drives --gpus replicas (dp)
  kDataMultiProcess,  // one rank per device (ddp, zero1)
  kModel,             // one model cut across --gpus devices (mp, pmp)
};

// What a strategy does with its devices, as the projection models it.
enum class Family {
  kSingle,         // the whole model, one device
  kDataInProcess,  // replicas driven by one process, gradients reduced to one device
  kDataRanks,      // a replica per rank, gradients all-reduced
  kSharded,        // a replica per rank, ZeRO-sharded states (zero_stage)
  kPipeline,       // the model cut into stages
};

struct StrategyTraits {
  std::string name;
  std::string description;
  Family family = Family::kSingle;
  int zero_stage = 0;  // kSharded: 1, 2 or 3
  // True when BatchNorm statistics are taken over a different set of samples
  // than in the single-device run (per-replica or per-micro-batch), so the
  // parity check must use a batch-independent norm.
  bool batch_norm_differs = false;
  // kPipeline: stages work at once on micro-batches (else one stage at a time).
  bool micro_batches = false;
  // The strategy-specific flags it reads (every other flag applies to all).
  std::vector<std::string> flags;
  // Why --cuda-graphs cannot capture its step; "" when it can.
  std::string no_cuda_graphs;
  // --replicate-degree left out: one replica per node (hsdp) rather than 1.
  bool replicate_by_node = false;

  Parallelism parallelism() const;
  int min_devices() const;         // a pipeline needs two stages
  bool devices_at_once() const;    // dp's replicas, pmp's stages: one process keeps several busy
  bool Reads(const std::string& flag) const;
};

const std::vector<StrategyTraits>& StrategyTraitsTable();
const StrategyTraits* FindTraits(const std::string& name);  // nullptr when unregistered
// The strategies that read `flag`, in table order ({} when every one does).
std::vector<std::string> StrategiesReading(const std::string& flag);
// The strategies whose row `pick` accepts, in table order: every list of
// strategies a message or a default names comes from the rows, never typed.
std::vector<std::string> StrategiesWhere(const std::function<bool(const StrategyTraits&)>& pick);
// `names` joined by `separator` ("zero1|zero2|zero3"): every list a message prints.
std::string JoinNames(const std::vector<std::string>& names, const char* separator = "|");

}  // namespace ddpbench
