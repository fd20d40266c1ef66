// The strategy registry: one table from name to factory (registry.cpp), read
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

const std::vector<StrategyEntry>& StrategyTable();
std::vector<std::string> StrategyNames();
// Throws ConfigError listing the registered names when `name` is unknown.
const StrategyEntry& FindStrategy(const std::string& name);

// Whether a run starts (or joins) one rank per device: the data-parallel
// multi-process strategies, and mp/pmp with --stage-ranks (one rank per stage).
bool RunsRankPerDevice(const StrategyInfo& info, const RunConfig& config);

}  // namespace ddpbench
