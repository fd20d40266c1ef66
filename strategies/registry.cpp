// The strategies this build can run: each traits row (traits.cpp) with its
// factory. A new strategy adds one traits row there and its factory here.
#include "strategies/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "strategies/factories.h"

namespace ddpbench {

const std::vector<StrategyEntry>& StrategyTable() {
  // Each factory beside its traits row (traits.cpp), by name.
  static const std::vector<std::pair<std::string, std::unique_ptr<Strategy> (*)()>> factories = {
      {"single", MakeSingleStrategy}, {"dp", MakeDpStrategy},       {"ddp", MakeDdpStrategy},
      {"mp", MakeMpStrategy},         {"pmp", MakePmpStrategy},     {"zero1", MakeZero1Strategy},
      {"zero2", MakeZero2Strategy},   {"zero3", MakeZero3Strategy},
  };
  static const std::vector<StrategyEntry> table = [] {
    std::vector<StrategyEntry> rows;
    for (const auto& [name, make] : factories) {
      const StrategyTraits* traits = FindTraits(name);
      TORCH_CHECK(traits, "strategy registry: '", name, "' has a factory but no traits row (planning/traits.cpp)");
      rows.push_back({*traits, make});
    }
    TORCH_CHECK(rows.size() == StrategyTraitsTable().size(),
                "strategy registry: a traits row (planning/traits.cpp) has no factory here");
    return rows;
  }();
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
  return info.parallelism() == Parallelism::kDataMultiProcess ||
         (info.parallelism() == Parallelism::kModel && config.stage_ranks);
}

}  // namespace ddpbench
