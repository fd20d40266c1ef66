// How far the model was from measured runs, per strategy family: the figures
// of results/cpu-2core-projection-validation.md (scripts/bench_projection.py),
// copied here so that every projected row says how sure it is. A family not
// validated yet has none (the row's error_pct stays empty).
#include <map>
#include <string>

#include "projection/project.h"

namespace ddpbench {

double ValidatedErrorPct(const std::string& strategy) {
  static const std::map<std::string, double> kMedianAbsErrorPct = {};
  const auto it = kMedianAbsErrorPct.find(strategy);
  return it == kMedianAbsErrorPct.end() ? -1 : it->second;
}

int ValidatedWorld() { return 2; }

}  // namespace ddpbench
