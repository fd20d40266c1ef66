// How far the model was from measured runs, per strategy family: the figures
// of results/cpu-2core-projection-validation.md and -pmp.md (scripts/bench_projection.py),
// copied here so that every projected row says how sure it is. A family not
// validated yet has none (the row's error_pct stays empty).
#include <map>
#include <string>

#include "projection/project.h"

namespace ddpbench {

double ValidatedErrorPct(const std::string& strategy) {
  // results/cpu-2core-projection-validation.csv, the three runs of the current model pooled
  // (scripts/bench_projection.py --pool=2026-11-26T00:06:01Z,2026-11-26T01:35:57Z,2026-11-26T02:16:36Z):
  // 2 ranks over veth links shaped to 2 Gbit/s, 500 and 100 Mbit/s and on loopback, and 1 rank
  // (15 configurations a strategy, 3-5 interleaved rounds each, profiles calibrated in every round).
  // pmp: results/cpu-2core-projection-validation-pmp.csv, 2026-11-26T00:57:17Z and 03:11:24Z pooled:
  // --stage-ranks, one stage per namespace, 1f1b and zero-bubble together (16 configurations, 3 rounds each).
  // zero3: its model changed in 271b3c1 (a neighbour's gather waits for the unit's own): the two
  // runs of that model and the three above predicted again from their stored profiles with it
  // (--pool=<all five> --repredict; 25 configurations; largest 27.4%, at 2 Gbit/s: the goal's
  // "none above 20%" is not met).
  static const std::map<std::string, double> kMedianAbsErrorPct = {
      {"ddp", 2.5}, {"zero1", 6.9}, {"zero2", 6.5}, {"zero3", 9.4}, {"pmp", 4.3}};
  const auto it = kMedianAbsErrorPct.find(strategy);
  return it == kMedianAbsErrorPct.end() ? -1 : it->second;
}

int ValidatedWorld() { return 2; }

}  // namespace ddpbench
