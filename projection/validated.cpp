// How far the model was from measured runs, per strategy family: the figures
// of results/cpu-2core-projection-validation.md and -pmp.md (scripts/bench_projection.py),
// copied here so that every projected row says how sure it is. A family not
// validated yet has none (the row's error_pct stays empty).
#include <map>
#include <string>

#include "projection/project.h"

namespace ddpbench {

double ValidatedErrorPct(const std::string& strategy) {
  // results/cpu-2core-projection-validation.csv: the runs of the current calibration (collective
  // sizes timed to 0.3 s, interference terms as trimmed means of 45 rounds) pooled
  // (scripts/bench_projection.py --pool=2026-11-26T10:33:25Z,2026-11-26T11:04:34Z): 2 ranks over
  // veth links shaped to 2 Gbit/s, 500 and 100 Mbit/s and on loopback, and 1 rank (10
  // configurations per strategy, 3 interleaved rounds each, profiles calibrated in every round).
  // Largest errors: ddp 21.0% (2 loopback ranks), zero1 12.9, zero2 14.2, zero3 18.6; the goal
  // (median <= 10%, none above 20%) is not met for zero3's median nor ddp's largest.
  // pmp: results/cpu-2core-projection-validation-pmp.csv, 2026-11-26T00:57:17Z and 03:11:24Z pooled:
  // --stage-ranks, one stage per namespace, 1f1b and zero-bubble together (16 configurations, 3 rounds each).
  static const std::map<std::string, double> kMedianAbsErrorPct = {
      {"ddp", 4.2}, {"zero1", 7.2}, {"zero2", 6.5}, {"zero3", 11.5}, {"pmp", 4.3}};
  const auto it = kMedianAbsErrorPct.find(strategy);
  return it == kMedianAbsErrorPct.end() ? -1 : it->second;
}

int ValidatedWorld() { return 2; }

}  // namespace ddpbench
