// The strategies this build can run: each traits row (planning/traits.cpp)
// with the factory its strategy's file registers.
#include "strategies/registry.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"

namespace ddpbench {
namespace {

using Factory = std::unique_ptr<Strategy> (*)();

// Filled before main, by each strategy file's registration.
std::vector<std::pair<std::string, Factory>>& Factories() {
  static std::vector<std::pair<std::string, Factory>> factories;
  return factories;
}

}  // namespace

StrategyRegistration::StrategyRegistration(const char* name, Factory make) { Factories().emplace_back(name, make); }

const std::vector<StrategyEntry>& StrategyTable() {
  static const std::vector<StrategyEntry> table = [] {
    const auto& factories = Factories();
    for (const auto& entry : factories)
      TORCH_CHECK(FindTraits(entry.first), "strategy registry: '", entry.first,
                  "' has a factory but no traits row (planning/traits.cpp)");
    std::vector<StrategyEntry> rows;
    for (const StrategyTraits& traits : StrategyTraitsTable()) {
      auto it = std::find_if(factories.begin(), factories.end(),
                             [&](const auto& entry) { return entry.first == traits.name; });
      TORCH_CHECK(it != factories.end(), "strategy registry: the traits row '", traits.name,
                  "' (planning/traits.cpp) has no factory: DDPBENCH_REGISTER_STRATEGY in its strategy's file");
      rows.push_back({traits, it->second});
    }
    return rows;
  }();
  return table;
}

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& e : StrategyTable()) names.push_back(e.info.name);
  return names;
}

const StrategyEntry& ReferenceStrategy() {
  const auto& table = StrategyTable();
  auto it = std::find_if(table.begin(), table.end(), [](const auto& e) { return e.info.family == Family::kSingle; });
  TORCH_CHECK(it != table.end(), "strategy registry: no strategy of the single-device family");
  return *it;
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
