// The one table of strategy traits (traits.h). A new strategy adds its row
// here and its factory in registry.cpp.
#include "planning/traits.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace ddpbench {
namespace {

const std::vector<std::string> kRankFlags = {"--bucket-cap-mb", "--timeout", "--cpu-backend"};
const std::vector<std::string> kPipelineFlags = {"--timeout", "--cpu-backend", "--balance", "--split", "--units", "--stage-ranks",
                                                 "--replicate-degree", "--overlap-optimizer"};

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::string kZeroNoGraphs =
    "its step times its gathers and reductions with CUDA events, which a capture cannot hold, and has no untimed "
    "path yet";
const std::string kPipelineNoGraphs =
    "its stages run from host threads per device, or as ranks whose messages' sizes are read on the host";

}  // namespace

const std::vector<StrategyTraits>& StrategyTraitsTable() {
  static const std::vector<StrategyTraits> table = {
      {"single", "one device: the reference every other strategy is checked against", Family::kSingle, 0, false,
       false, {"--cuda-graphs"}, ""},
      {"dp", "DataParallel: replicas on every device of one process, batch scattered, gradients reduced to device 0",
       Family::kDataInProcess, 0, true, false, {}, "its step drives every device from a host thread of its own"},
      {"ddp",
       "DistributedDataParallel: one rank per device, PyTorch's c10d::Reducer (bucketed all-reduce overlapping "
       "backward)",
       Family::kDataRanks, 0, true, false, Plus(kRankFlags, {"--grad-accum", "--compression", "--cuda-graphs", "--overlap-optimizer",
                                                      "--gradient-as-bucket-view"}),
       ""},
      {"mp", "model parallel: the model's units split over the devices, one stage working at a time",
       Family::kPipeline, 0, false, false, kPipelineFlags, kPipelineNoGraphs},
      {"pmp", "pipelined model parallel: micro-batches through the stages at once (GPipe or 1F1B)", Family::kPipeline,
       0, true, true,
       Plus(kPipelineFlags,
            {"--chunks", "--schedule", "--virtual-stages", "--rebalance", "--fill-waits", "--shape-trials"}),
       kPipelineNoGraphs},
      {"zero1",
       "ZeRO-1: one rank per device, optimizer state sharded 1/N (bucketed reduce-scatter or all-reduce "
       "overlapping backward, bucketed all-gather of the updated parameters overlapping the next forward)",
       Family::kSharded, 1, true, false,
       Plus(kRankFlags, {"--zero-reduce", "--replicate-degree", "--overlap-optimizer"}), kZeroNoGraphs},
      {"zero2",
       "ZeRO-2: as zero1, and gradients sharded 1/N too (each bucket reduce-scattered into the shard, its buffer "
       "given back)",
       Family::kSharded, 2, true, false,
       Plus(kRankFlags, {"--zero-reduce", "--replicate-degree", "--overlap-optimizer"}), kZeroNoGraphs},
      {"zero3",
       "ZeRO-3 (FSDP-style): parameters, gradients and optimizer state sharded 1/N; each unit all-gathered before "
       "its forward and backward, freed after, the next unit's gather prefetched",
       Family::kSharded, 3, true, false, Plus(kRankFlags, {"--zero-reduce", "--replicate-degree", "--overlap-optimizer"}),
       kZeroNoGraphs},
      {"hsdp",
       "HSDP: zero3 inside a shard group of each node's ranks, replicated across the nodes (--replicate-degree, "
       "default the number of nodes): only each reduced gradient shard's all-reduce crosses between nodes",
       Family::kSharded, 3, true, false, Plus(kRankFlags, {"--zero-reduce", "--replicate-degree", "--overlap-optimizer"}),
       kZeroNoGraphs,
       /*replicate_by_node=*/true},
  };
  return table;
}

Parallelism StrategyTraits::parallelism() const {
  switch (family) {
    case Family::kSingle: return Parallelism::kNone;
    case Family::kDataInProcess: return Parallelism::kDataInProcess;
    case Family::kDataRanks:
    case Family::kSharded: return Parallelism::kDataMultiProcess;
    case Family::kPipeline: return Parallelism::kModel;
  }
  return Parallelism::kNone;
}

int StrategyTraits::min_devices() const { return family == Family::kPipeline ? 2 : 1; }

bool StrategyTraits::devices_at_once() const {
  return family == Family::kDataInProcess || (family == Family::kPipeline && micro_batches);
}

bool StrategyTraits::Reads(const std::string& flag) const {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

const StrategyTraits* FindTraits(const std::string& name) {
  for (const auto& t : StrategyTraitsTable())
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> StrategiesWhere(const std::function<bool(const StrategyTraits&)>& pick) {
  std::vector<std::string> names;
  for (const auto& t : StrategyTraitsTable())
    if (pick(t)) names.push_back(t.name);
  return names;
}

std::string JoinNames(const std::vector<std::string>& names, const char* separator) {
  return fmt::format("{}", fmt::join(names, separator));
}

std::vector<std::string> StrategiesReading(const std::string& flag) {
  return StrategiesWhere([&flag](const StrategyTraits& t) { return t.Reads(flag); });
}

}  // namespace ddpbench
