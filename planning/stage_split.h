// Stage splits as numbers: the contiguous cut of a model's units (stem,
// every block, head) into stages, --split read and checked, and a split's
// stage times. Torch-free, so that the step model (projection/) and the
// pipeline engines (strategies/) share one arithmetic.
#pragma once

#include <string>
#include <vector>

namespace ddpbench {

// The contiguous partition of `costs` (one per unit, in order) into `parts`
// non-empty stages that minimises the largest stage cost (exact dynamic
// programme over cut positions; among equal optima the earliest cuts win).
// Returns the number of units of each stage. Requires 1 <= parts <= units.
std::vector<int> BalanceSplit(const std::vector<double>& costs, int parts);

// Throws ConfigError when the model's units cannot give one stage per device
// (virtual_stages > 1: V stages per device).
void CheckStageCount(const std::string& strategy, int devices, const std::vector<std::string>& unit_names,
                     int virtual_stages = 1);

// Parses --split ("4,6": units per stage, in stage order) and checks it
// against the model: exactly `stages` counts >= 1 summing to the number of
// units; otherwise a ConfigError naming the value and what is accepted.
// `stages_from` names where the stage count comes from ("--gpus=2").
std::vector<int> ParseSplit(const std::string& split, int stages, const std::vector<std::string>& unit_names,
                            const std::string& stages_from = "");

// "8,2": the form --split accepts, as recorded in the row's split column.
std::string SplitCounts(const std::vector<int>& counts);
// "stem..layer4.0 | layer4.1..head", for the log.
std::string DescribeSplit(const std::vector<int>& counts, const std::vector<std::string>& unit_names);

// Each unit's forward+backward and forward ms on one batch size.
struct UnitTimes {
  std::vector<double> total_ms, forward_ms;
};

// Forward+backward ms of each stage: the sums of `unit_ms` over `counts`.
std::vector<double> StageTimes(const std::vector<int>& counts, const std::vector<double>& unit_ms);

struct StagePlan {
  std::vector<int> counts;        // units per stage
  std::vector<double> stage_ms;   // measured forward+backward ms per stage (one micro-batch)
  std::vector<double> unit_ms;    // the same per unit
  std::vector<double> unit_forward_ms;  // the forward part of unit_ms
};

// The plan of the split `counts` with unit times `times` (stage_ms: StageTimes).
StagePlan PlanOfSplit(const std::vector<int>& counts, const UnitTimes& times);

}  // namespace ddpbench
