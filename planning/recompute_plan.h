// Activation recompute as numbers (--recompute, --memory-budget-mb): which
// units a run recomputes, read from the flag, and the set that fits a memory
// budget at the least added time. Torch-free, so that the runner, the step
// model (projection/) and --search share one arithmetic.
//
// A unit kept as usual holds its activations from its forward to its
// backward (`kept_bytes`, its output among them); recomputed, it holds its
// output alone (`output_bytes`; its input is the previous unit's output) and
// re-creates the rest while its own backward runs, for one unit at a time,
// and its forward runs twice (`forward_ms` added). So a plan's activation
// memory is the sum over kept units of kept_bytes, over recomputed units of
// output_bytes, plus the largest (kept - output) among the recomputed ones:
// the bound of Chen et al. 2016, exact for a chain of units.
#pragma once

#include <string>
#include <vector>

namespace ddpbench {

// --recompute=none|all|LIST as one flag per unit of `unit_names` ("stem",
// "layer1.0" or "layer1.0a", ..., "head"). LIST: a comma list of unit names,
// stem, head, blocks (every residual block), layerN (its blocks) and every-K
// (every K-th block, counting from the first). ConfigError naming the bad
// item and what is accepted. "auto" is not parsed here (it needs a budget).
std::vector<bool> ParseRecompute(const std::string& spec, const std::vector<std::string>& unit_names);

// The recomputed units as the row's recompute column says them: "none",
// "all", or their names joined by ';'.
std::string DescribeRecompute(const std::vector<bool>& recompute, const std::vector<std::string>& unit_names);

struct UnitActivation {
  double kept_bytes = 0;    // held from forward to backward without recompute
  double output_bytes = 0;  // held with recompute
  double forward_ms = 0;    // added by recomputing it
};

// Activation bytes a plan holds at its peak (the bound above).
double RecomputePeakBytes(const std::vector<UnitActivation>& units, const std::vector<bool>& recompute);

struct RecomputePlan {
  bool fits = false;
  std::vector<bool> recompute;  // per unit
  double added_ms = 0;          // forward time run twice
  double peak_bytes = 0;        // RecomputePeakBytes of the plan
};

// The units to recompute so that RecomputePeakBytes <= budget_bytes at the
// least added time (an exact dynamic programme over the units, bytes counted
// in granules rounded up: `granule_bytes`, or where 0 the larger of 64 KiB
// and 1/4096 of the budget, so a plan may leave up to a granule per unit of
// the budget unused; among equal times the fewest bytes). Not
// fitting even with every unit recomputed: fits = false and the plan of every
// unit recomputed.
RecomputePlan PlanRecompute(const std::vector<UnitActivation>& units, double budget_bytes,
                            double granule_bytes = 0);

}  // namespace ddpbench
