// Pipelines replicated by data parallelism (pmp/mp --stage-ranks
// --replicate-degree=D): every stage's rank has D - 1 twins, one in each
// other pipeline, that ran the same chunks on other batches. Each chunk's
// gradients are all-reduced across its twins as soon as that chunk's last
// backward of the step is done on this rank (the replicate group of the
// device mesh, planning/mesh.h), so the all-reduce of an early stage runs
// while the later stages still drain the pipeline; the optimizer waits for
// them all and steps on the mean over the replicas, which is single's
// gradient of the whole global batch.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/types.h>

#include <memory>
#include <vector>

namespace ddpbench {

class PhaseTimer;

namespace pipeline {

class ReplicaGradients {
 public:
  // `group`: this rank's replicate group, of `replicas` ranks.
  ReplicaGradients(c10d::ProcessGroup& group, int replicas, PhaseTimer& timer);
  ~ReplicaGradients();
  ReplicaGradients(const ReplicaGradients&) = delete;
  ReplicaGradients& operator=(const ReplicaGradients&) = delete;

  // Starts the all-reduce of chunk `chunk`'s gradients (the .grad of
  // `params`, flattened into one buffer). Every twin launches its chunks in
  // the same order (the same schedule row).
  void Launch(int chunk, const std::vector<torch::Tensor>& params, torch::Device device);
  // Waits for every launched all-reduce, in launch order, and leaves each
  // gradient the mean over the replicas. The wait counts as communication.
  void Finish();

 private:
  struct InFlight;
  c10d::ProcessGroup& group_;
  int replicas_;
  PhaseTimer& timer_;
  std::vector<std::unique_ptr<InFlight>> in_flight_;
};

}  // namespace pipeline
}  // namespace ddpbench
