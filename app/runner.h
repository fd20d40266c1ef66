// The benchmark run of one process: resolve devices, build data and the
// strategy, check parity (--verify), warm up, time the steps, evaluate, and
// (rank 0) append the row. Returns the process exit code.
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "base/results.h"
#include "app/run_result.h"  // FindBaselineThroughput, Percentile (tests)

namespace ddpbench {

struct DistContext;

int RunBenchmark(const RunConfig& config, DistContext& dist);

// Every check RunBenchmark makes before building anything (flags against the
// hardware, data files, model shape), for a run of `world` local ranks; throws
// ConfigError / DataError. A spawning parent calls it once before the ranks.
void PreflightCheck(const RunConfig& config, int world);

}  // namespace ddpbench
