// ddpbench --project=PROFILE: the what-if table. For every strategy and
// every size (--nodes x --gpus-per-node) the step predicted from a calibration
// profile (step_model.h): img/s, scaling efficiency against one device, the
// step split into compute, exposed communication and bubble, memory per
// device, the largest batch that fits --device-memory-gb, how far off the
// model was in validation for that family, and whether the size is far
// outside what was measured. Printed, and written as CSV for
// scripts/project.py (figure, HTML) and the report's "projected" section.
#pragma once

#include <string>
#include <vector>

#include "base/results.h"
#include "projection/links.h"
#include "projection/profile.h"

namespace ddpbench {

struct RunConfig;

// "a,b,c" -> {"a", "b", "c"} (empty parts kept, for the caller to refuse).
std::vector<std::string> SplitNames(const std::string& text, char separator = ',');

// --nodes x --gpus-per-node with the links of --intra and --inter (the
// profile's measured link by default, else nvlink4 and ib-ndr400).
Topology MakeTopology(const Profile& p, const RunConfig& c, int nodes);

// ConfigError when the profile at `path` is of another --model, --width,
// --image-size or --amp than the flags given (flags left out take the profile's).
void CheckProfileMatchesFlags(const Profile& p, const RunConfig& c, const std::string& path);

// The CSV's columns, in order.
const std::vector<std::string>& ProjectionColumns();

// One row per (strategy, size); ConfigError on bad input (see step_model.h,
// links.h). Sizes a strategy cannot run are left out when --strategies was
// not given, and an error when it names the strategy.
std::vector<Row> ProjectRows(const Profile& profile, const RunConfig& config);

// --project: reads the profile, checks it against --model, --width,
// --image-size and --amp when given, prints the table, writes --project-csv.
int RunProjection(const RunConfig& config);

// The relative error (%) measured in validation for a strategy's family
// (projection/validated.cpp), or a negative number where none was measured.
double ValidatedErrorPct(const std::string& strategy);
// The largest world the validation measured (sizes more than 16 times it are
// extrapolated).
int ValidatedWorld();

}  // namespace ddpbench
