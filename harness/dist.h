// The distributed context of one process: rank, world, the launcher that made
// it, and a c10d process group (Gloo on CPU, NCCL on CUDA) with the few
// collectives the harness itself needs (gathering figures to rank 0). World 1
// has no process group and every collective is the identity.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ddpbench {

struct RunConfig;

struct DistContext {
  int rank = 0;
  int local_rank = 0;
  int world = 1;
  int local_world = 1;
  std::string launcher = "none";  // none|spawn|torchrun|slurm|mpi
  std::string backend;            // gloo|nccl ("" when world == 1)
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  torch::Device device = torch::kCPU;  // where collective buffers live (NCCL: the GPU)

  bool is_root() const { return rank == 0; }
  void Barrier();
  // Every rank's values, concatenated in rank order (all ranks get them).
  std::vector<double> AllGather(const std::vector<double>& values);
  double AllReduceSum(double value);
  double AllReduceMax(double value);
};

}  // namespace ddpbench
