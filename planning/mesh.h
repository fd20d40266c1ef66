// The device mesh of the two-dimensional strategies: the world cut into
// groups that each run the strategy (a shard group of zero1/2/3, whose
// all-gathers and reduce-scatters stay inside it), replicated
// --replicate-degree times (torchtitan's data_parallel_replicate_degree,
// FSDP's hybrid shard): each replicate group holds the ranks at the same
// place in every group and all-reduces what the group reduced. Groups are
// runs of consecutive ranks, so under every launcher's numbering (spawn,
// torchrun, Slurm, mpirun: a node's ranks are consecutive) a group whose size
// divides a node's ranks stays on one node and only the replicate groups
// cross the slow link. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace ddpbench {

struct RunConfig;

struct MeshCoords {
  int replicas = 1;     // R: the replicate degree
  int group_size = 1;   // S = world / R
  int replica = 0;      // which group this rank is in (0..R-1)
  int index = 0;        // its place in the group (0..S-1): its shard
  std::vector<int> group_ranks;      // the S ranks of its group
  std::vector<int> replicate_ranks;  // the R ranks at its place in every group
  // The row's `mesh` column (DescribeMesh).
  std::string Describe(bool pipeline) const;
};

// The `mesh` column of a run's row and of a projected one: "replicate=R,shard=S"
// for a shard group of S ranks replicated R times, "pp=S,dp=R" for a pipeline
// of S stages replicated R times.
std::string DescribeMesh(bool pipeline, int group_size, int replicas);

// Rank `rank`'s place in a world of `world` ranks replicated `replicas`
// times; std::invalid_argument unless 1 <= replicas and world % replicas == 0.
MeshCoords MeshOf(int rank, int world, int replicas);

// Whether every group lies within one node when the world's ranks sit
// `local_world` to a node (node-major): the group size divides local_world.
bool GroupsWithinNodes(int group_size, int local_world);

// --replicate-degree=R against a world of `world` ranks: a ConfigError naming
// R unless it divides the world (for a pipeline, into pipelines of at least 2
// stages; a shard group may be one rank: plain replication).
void CheckMeshOfWorld(const RunConfig& config, int world);

}  // namespace ddpbench
