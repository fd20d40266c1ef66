// ddpbench's entry point: parse and validate, then run this process's part.
// Every failure ends here as one line on stderr and a non-zero exit code:
// 2 bad input (flags, data), 3 parity failure, 4 results file, 1 anything else.
#include <c10/util/Exception.h>

#include <cstdio>

#include <fmt/format.h>

#include "datasets/dataset.h"
#include "harness/config.h"
#include "harness/dist.h"
#include "harness/log.h"
#include "harness/results.h"
#include "harness/runner.h"
#include "strategies/registry.h"

namespace {

int Fail(int code, const std::string& message) {
  fmt::print(stderr, "ddpbench: error: {}\n", message);
  return code;
}

void PrintStrategies() {
  static const char* kKinds[] = {"1 device", "1 process, N devices (data parallel)",
                                 "N processes (one per device)", "1 process, model cut over N devices"};
  fmt::print("{:<8} {:<40} {}\n", "strategy", "devices", "description");
  for (const auto& e : ddpbench::StrategyTable())
    fmt::print("{:<8} {:<40} {}\n", e.info.name, kKinds[static_cast<int>(e.info.parallelism)],
               e.info.description);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddpbench;
  RunConfig config;
  try {
    if (!ParseCommandLine(argc, argv, &config)) return 0;
  } catch (const ConfigError& e) {
    return Fail(2, e.what());
  }
  if (config.list) {
    PrintStrategies();
    return 0;
  }
  DistContext dist;
  SetLogRank(dist.rank);
  try {
    return RunBenchmark(config, dist);
  } catch (const ConfigError& e) {
    return Fail(2, e.what());
  } catch (const DataError& e) {
    return Fail(2, e.what());
  } catch (const std::invalid_argument& e) {
    return Fail(2, e.what());
  } catch (const ResultsError& e) {
    return Fail(4, e.what());
  } catch (const c10::Error& e) {
    return Fail(1, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Fail(1, e.what());
  }
}
