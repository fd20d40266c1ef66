// The Strategy interface: a strategy owns the whole training step (forward,
// backward, communication, optimizer) because pipeline parallelism changes the
// step itself; the harness owns everything else (timing, data, memory, rows).
// A strategy is a small file that fills this in, as a collective is in
// nccl-tests.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/memory.h"
#include "harness/state_layout.h"
#include "harness/state_map.h"
#include "models/resnet.h"
#include "planning/traits.h"

namespace ddpbench {

struct RunConfig;
class PhaseTimer;
struct DistContext;

// The registry row's traits (name, family, flags ...): planning/traits.h.
using StrategyInfo = StrategyTraits;

struct RunContext {
  const RunConfig* config = nullptr;
  DistContext* dist = nullptr;          // rank/world/process group; world 1 if none
  std::vector<torch::Device> devices;   // logical devices this process drives
  ResNetOptions model;                  // classes/channels already set from the data
  double lr = 0.1;                      // after --lr-scaling
  PhaseTimer* timer = nullptr;          // Scope(Phase::...) for NVTX + phase times
};

struct StepResult {
  torch::Tensor loss;  // scalar, detached: the mean loss of this process's batch
};

struct EvalCounts {
  int64_t correct = 0;
  int64_t total = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Builds replicas/stages, optimizer and process groups. The model weights
  // come from torch::manual_seed(config.seed) right before building, so every
  // strategy starts from the single-device run's weights.
  virtual void Setup(const RunContext& ctx) = 0;
  // One training step on this process's batch.
  virtual StepResult Step(const Batch& batch) = 0;
  // Logits for a test batch (eval mode), on any device; an undefined tensor
  // on a rank that does not hold the model's output (mp/pmp --stage-ranks:
  // every stage's rank but the last), which then counts nothing.
  virtual torch::Tensor Predict(const torch::Tensor& images) = 0;
  // All parameters in model order (for the parity check), on any device.
  virtual std::vector<torch::Tensor> Parameters() = 0;
  // The options of the model the strategy built, where it chose some of
  // them itself (pmp --units=auto picks half or whole blocks, which order the
  // parameters differently); nullptr: RunContext::model as given. The parity
  // check builds its reference alike.
  virtual const ResNetOptions* BuiltModel() const { return nullptr; }
  // Extra CSV columns this strategy reports (split, bubble, optimizer state...).
  virtual std::map<std::string, std::string> Extras() { return {}; }
  // Optimizer-state bytes held by this process (for optimizer_state_mb).
  virtual double OptimizerStateMb() { return -1; }

  // Snapshots. TensorMap (harness/state_map.h): everything the
  // next training step depends on, by stable name.
  // Every tensor the next step depends on in this process: parameters and buffers
  // ("model.<name>", BatchNorm running stats and num_batches_tracked included), optimizer
  // state ("optim.<...>", e.g. momentum buffers, Adam exp_avg/exp_avg_sq/step), loss scaler
  // ("scaler.scale", "scaler.growth"). Values may alias live tensors: the caller copies them
  // (to CPU) before the next step. zero1/2/3: this rank's shard of what is sharded, plus
  // whatever the rank holds in full. Pure (no collectives), callable between steps.
  virtual TensorMap SaveState() = 0;
  // The whole model's buffers (BatchNorm's running statistics) by SaveState()'s
  // "model.<name>" keys, as rank 0 holds them, for --export. The default:
  // SaveState(); pipelines across ranks (--stage-ranks) first gather every
  // stage's from the rank that runs it. Collective over the world there.
  // (Parameters come whole from Parameters(), called first.)
  virtual TensorMap ModelBuffers() { return SaveState(); }
  // Restores a SaveState() map into a strategy after Setup(), before its first Step(): the
  // same keys, shapes and dtypes (values may be CPU tensors; copy them to the right device),
  // else throws std::runtime_error naming the first key that is missing, extra or differs.
  // Optimizer state that is created lazily on the first step must be created here so the
  // next Step() continues exactly. No collectives.
  virtual void LoadState(const TensorMap& state) = 0;
  // How SaveState()'s tensors hold the logical state (harness/state_layout.h),
  // so that a snapshot resumes on another world or strategy. The default:
  // nothing sliced, every "model."/"optim."/"scaler." tensor whole on every rank.
  virtual StateLayout DescribeState() { return {}; }
};

}  // namespace ddpbench
