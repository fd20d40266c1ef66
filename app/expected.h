// Expected against measured (the projection checked on its own run): a multi-device run predicts its own
// throughput with the projection model (projection/step_model.h) from its
// own parts, and its row says how close it came. The parts are measured by
// the run itself after its timed steps (each unit's forward and backward on
// every rank at once, at the run's batch and micro-batch; a few all-reduces
// over the run's own process group, or device-to-device copies for the
// one-process strategies, fitted to a link), or read from a --calibrate
// profile given as --expected=FILE. The row gets expected_img_s, vs_expected
// (measured over expected) and expected_term (the largest term of the
// predicted step: compute, exposed_comm or bubble); a row well below 1 ran
// slower than its link and strategy allow, and the gate says so.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace ddpbench {

struct RunConfig;
struct DistContext;
struct ResNetOptions;

// Whether the run gets the expected columns: --expected is not off, the
// strategy trains a model, and it runs on more than one device or is a
// data-parallel one (ddp, zero1/2/3) on one, which issues no collectives:
// there the row checks the step against its measured parts alone.
bool ExpectsThroughput(const RunConfig& config, int world);

// --expected=FILE before anything runs: ConfigError when the file is not a
// profile of this run's model, width, image size and precision.
void CheckExpectedProfile(const RunConfig& config);

// Collective (every rank calls it). The columns expected_img_s,
// expected_term and expected_from for the row (empty when ExpectsThroughput
// is false); `extras` are the strategy's row columns (pmp: its chosen
// schedule, chunks and virtual stages).
std::map<std::string, std::string> ExpectThisRun(const RunConfig& config, const ResNetOptions& options,
                                                 const std::vector<torch::Device>& devices, DistContext& dist,
                                                 const std::map<std::string, std::string>& extras);

}  // namespace ddpbench
