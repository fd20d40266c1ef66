// The strategy registry: one table from name to factory (registry.cpp), read
// by --strategy validation and `ddpbench --list`.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace ddpbench {

struct StrategyEntry {
  StrategyInfo info;
  std::function<std::unique_ptr<Strategy>()> make;
};

const std::vector<StrategyEntry>& StrategyTable();
std::vector<std::string> StrategyNames();
// Throws ConfigError listing the registered names when `name` is unknown.
const StrategyEntry& FindStrategy(const std::string& name);

}  // namespace ddpbench
