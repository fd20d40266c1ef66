// How far the model was from measured runs, per strategy family: the figures
// of results/cpu-2core-projection-validation.md and -pmp.md (scripts/bench_projection.py),
// copied here so that every projected row says how sure it is. A family not
// validated yet has none (the row's error_pct stays empty).
#include <map>
#include <string>

#include "projection/project.h"

namespace ddpbench {

double ValidatedErrorPct(const std::string& strategy) {
  // results/cpu-2core-projection-validation.csv: every run of the current model pooled, the runs
  // made before its last change predicted again from their stored profiles with it
  // (scripts/bench_projection.py --repredict --pool=2026-11-26T00:06:01Z,2026-11-26T01:35:57Z,
  // 2026-11-26T02:16:36Z,2026-11-26T04:16:29Z,2026-11-26T04:39:57Z,2026-11-26T06:53:09Z; zero3 ran
  // alone at 04:16Z and 04:39Z): 2 ranks over veth links shaped to 2 Gbit/s, 500 and 100 Mbit/s and
  // on loopback, and 1 rank (20 configurations for ddp/zero1/zero2, 30 for zero3; 3-5 interleaved
  // rounds each, profiles calibrated in every round). zero3's largest error is 27.4% (2 Gbit/s): the
  // goal's "none above 20%" is not met for it.
  // pmp: results/cpu-2core-projection-validation-pmp.csv, 2026-11-26T00:57:17Z and 03:11:24Z pooled:
  // --stage-ranks, one stage per namespace, 1f1b and zero-bubble together (16 configurations, 3 rounds each).
  static const std::map<std::string, double> kMedianAbsErrorPct = {
      {"ddp", 2.9}, {"zero1", 4.8}, {"zero2", 6.2}, {"zero3", 9.0}, {"pmp", 4.3}};
  const auto it = kMedianAbsErrorPct.find(strategy);
  return it == kMedianAbsErrorPct.end() ? -1 : it->second;
}

int ValidatedWorld() { return 2; }

}  // namespace ddpbench
