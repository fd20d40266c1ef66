#include "planning/mesh.h"

#include <stdexcept>

#include <fmt/format.h>

#include "base/config.h"
#include "planning/traits.h"

namespace ddpbench {

std::string DescribeMesh(bool pipeline, int group_size, int replicas) {
  return pipeline ? fmt::format("pp={},dp={}", group_size, replicas)
                  : fmt::format("replicate={},shard={}", replicas, group_size);
}

std::string MeshCoords::Describe(bool pipeline) const { return DescribeMesh(pipeline, group_size, replicas); }

MeshCoords MeshOf(int rank, int world, int replicas) {
  if (replicas < 1 || world < 1 || world % replicas != 0 || rank < 0 || rank >= world)
    throw std::invalid_argument(fmt::format("MeshOf: rank {} of a world of {} replicated {} times", rank, world,
                                            replicas));
  MeshCoords m;
  m.replicas = replicas;
  m.group_size = world / replicas;
  m.replica = rank / m.group_size;
  m.index = rank % m.group_size;
  for (int i = 0; i < m.group_size; ++i) m.group_ranks.push_back(m.replica * m.group_size + i);
  for (int r = 0; r < replicas; ++r) m.replicate_ranks.push_back(r * m.group_size + m.index);
  return m;
}

bool GroupsWithinNodes(int group_size, int local_world) {
  if (group_size < 1 || local_world < 1) return false;
  return local_world % group_size == 0;
}

void CheckMeshOfWorld(const RunConfig& config, int world) {
  const int64_t R = config.replicate_degree;
  if (R <= 1) return;
  // A shard group of one rank is plain replication (its gathers and
  // reduce-scatters are copies, the replicate all-reduce is ddp's); a
  // pipeline of one stage is no pipeline.
  const StrategyTraits* traits = FindTraits(config.strategy);
  const bool pipeline = traits && traits->family == Family::kPipeline;
  const int least = pipeline ? 2 : 1;
  std::string divisors;
  for (int d = 1; d <= world; ++d)
    if (world % d == 0 && world / d >= least) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
  const std::string accepted = fmt::format("a divisor of {}{} ({})", world,
                                           pipeline ? " that leaves pipelines of 2 or more stages" : "", divisors);
  if (world % R != 0)
    throw ConfigError(fmt::format("--replicate-degree={}: {} ranks do not divide into {} equal groups; accepted: {}",
                                  R, world, R, accepted));
  if (world / R < least)
    throw ConfigError(fmt::format("--replicate-degree={}: {} ranks in {} groups leave 1 rank a group, a pipeline of "
                                  "one stage; accepted: {}", R, world, R, accepted));
}

}  // namespace ddpbench
