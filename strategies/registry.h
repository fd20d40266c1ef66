// The strategy registry: every strategy's traits row (planning/traits.cpp)
// with the factory its own file registers (DDPBENCH_REGISTER_STRATEGY), read
// by --strategy validation and `ddpbench --list`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace ddpbench {

struct RunConfig;

struct StrategyEntry {
  StrategyInfo info;
  std::function<std::unique_ptr<Strategy>()> make;
};

// Registers `make` under `name` at program start (DDPBENCH_REGISTER_STRATEGY).
class StrategyRegistration {
 public:
  StrategyRegistration(const char* name, std::unique_ptr<Strategy> (*make)());
};

// In a strategy's own file, at namespace scope: its factory under the name of
// its traits row. (The strategies' library is linked whole, so every file's
// registration runs.)
#define DDPBENCH_REGISTER_STRATEGY(name, factory) \
  static const ::ddpbench::StrategyRegistration ddpbench_registered_##factory(name, factory)

// The registered strategies in the traits table's order; throws when a
// traits row has no factory or a factory no traits row.
const std::vector<StrategyEntry>& StrategyTable();
std::vector<std::string> StrategyNames();
// The reference every other strategy is checked against (--verify): the
// registered strategy of the single-device family.
const StrategyEntry& ReferenceStrategy();
// Throws ConfigError listing the registered names when `name` is unknown.
const StrategyEntry& FindStrategy(const std::string& name);

// Whether a run starts (or joins) one rank per device: the data-parallel
// multi-process strategies, and mp/pmp with --stage-ranks (one rank per stage).
bool RunsRankPerDevice(const StrategyInfo& info, const RunConfig& config);

}  // namespace ddpbench
