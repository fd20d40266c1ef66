// The command line: argv into a validated RunConfig (CLI11), with one clear
// message for every bad value. Above every other folder: validation asks the
// strategies' traits and the pipeline schedules.
#pragma once

#include <string>
#include <vector>

#include "app/numeric_flags.h"
#include "base/config.h"

namespace ddpbench {

// Parses argv into a RunConfig and validates it. Throws ConfigError (bad
// value) or returns false when --help was printed (exit 0).
bool ParseCommandLine(int argc, char** argv, RunConfig* config);

// Every numeric flag with its declared range (app/numeric_flags.h), and
// every flag CLI11 converts to a number: the tests check the two agree, so a
// numeric flag cannot be added without a range.
std::vector<NumericFlag> NumericFlags();
std::vector<std::string> FlagsOfNumericType();

// Range and combination checks shared by the CLI and the tests.
void ValidateConfig(const RunConfig& config);

// Why --decode=gpu cannot run on the (resolved) `device`: the CPU has no
// JPEG engine; on CUDA, this build has no nvJPEG. A ConfigError's message.
std::string GpuDecodeRefusal(const std::string& device);

// Why mp/pmp --overlap-optimizer cannot run on a GPU (--device=cuda, or auto
// that found one): the flag checks' and the runner's one message.
std::string PipelineOverlapOnGpuRefusal(const RunConfig& config);

// The strategies that read a strategy-specific flag (each strategy's traits
// row lists the flags it reads); empty for a flag every strategy takes.
std::vector<std::string> FlagStrategies(const std::string& flag);

// "90", "90s", "30m", "2h", "1h30m", "1.5h" in seconds; throws ConfigError
// naming `flag` and the value otherwise.
double ParseDuration(const std::string& flag, const std::string& value);

}  // namespace ddpbench
