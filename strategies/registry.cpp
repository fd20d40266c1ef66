// The one table of strategies. A new strategy adds its factory here.
#include "strategies/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/config.h"
#include "strategies/factories.h"

namespace ddpbench {

const std::vector<StrategyEntry>& StrategyTable() {
  static const std::vector<StrategyEntry> table = {
      {{"single", "one device: the reference every other strategy is checked against",
        Parallelism::kNone, false},
       MakeSingleStrategy},
      {{"dp", "DataParallel: replicas on every device of one process, batch scattered, gradients reduced to device 0",
        Parallelism::kDataInProcess, true},
       MakeDpStrategy},
      {{"ddp", "DistributedDataParallel: one rank per device, PyTorch's c10d::Reducer (bucketed all-reduce "
               "overlapping backward)",
        Parallelism::kDataMultiProcess, true},
       MakeDdpStrategy},
      {{"mp", "model parallel: the model's units split over the devices, one stage working at a time",
        Parallelism::kModel, false},
       MakeMpStrategy},
      {{"pmp", "pipelined model parallel: micro-batches through the stages at once (GPipe or 1F1B)",
        Parallelism::kModel, true},
       MakePmpStrategy},
      {{"zero1", "ZeRO-1: one rank per device, optimizer state sharded 1/N (bucketed reduce-scatter or all-reduce "
                 "overlapping backward, bucketed all-gather of the updated parameters overlapping the next forward)",
        Parallelism::kDataMultiProcess, true},
       MakeZero1Strategy},
      {{"zero2", "ZeRO-2: as zero1, and gradients sharded 1/N too (each bucket reduce-scattered into the shard, "
                 "its buffer given back)",
        Parallelism::kDataMultiProcess, true},
       MakeZero2Strategy},
      {{"zero3", "ZeRO-3 (FSDP-style): parameters, gradients and optimizer state sharded 1/N; each unit "
                 "all-gathered before its forward and backward, freed after, the next unit's gather prefetched",
        Parallelism::kDataMultiProcess, true},
       MakeZero3Strategy},
  };
  return table;
}

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& e : StrategyTable()) names.push_back(e.info.name);
  return names;
}

const StrategyEntry& FindStrategy(const std::string& name) {
  for (const auto& e : StrategyTable())
    if (e.info.name == name) return e;
  throw ConfigError(fmt::format("--strategy={}: not registered; registered strategies: {}", name,
                                fmt::join(StrategyNames(), "|")));
}

bool RunsRankPerDevice(const StrategyInfo& info, const RunConfig& config) {
  return info.parallelism == Parallelism::kDataMultiProcess ||
         (info.parallelism == Parallelism::kModel && config.stage_ranks);
}

}  // namespace ddpbench
