// ddpbench's entry point: parse and validate, then run this process's part.
// Every failure ends here as one line on stderr and a non-zero exit code:
// 2 bad input (flags, data), 3 parity failure, 4 results file, 5 preempted
// by SIGTERM/SIGUSR1 after a snapshot (run it again to resume), 6 a device ran
// out of memory, 7 a collective timed out or failed, or a rank died (the
// flight records name the rank), 1 anything else.
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "datasets/dataset.h"
#include "app/cli.h"
#include "harness/dist.h"
#include "harness/flight_recorder.h"
#include "harness/flight_watch.h"
#include "harness/inject.h"
#include "app/launcher.h"
#include "base/log.h"
#include "harness/memory.h"
#include "base/results.h"
#include "planning/traits.h"
#include "app/runner.h"
#include "projection/project.h"
#include "projection/search.h"
#include "strategies/registry.h"

namespace {

constexpr int kExitOutOfMemory = 6;

// CUDA's out-of-memory text up to its first full stop ("CUDA out of memory.
// Tried to allocate 2.00 GiB. GPU 0 has ...": device, asked and held are in
// its first two sentences).
std::string FirstSentence(const std::string& text) {
  size_t end = text.find(". ");
  if (end != std::string::npos) end = text.find(". ", end + 2);
  std::string line = text.substr(0, end == std::string::npos ? text.size() : end);
  for (char& ch : line) if (ch == '\n') ch = ' ';
  return line;
}

int Fail(int code, const std::string& message) {
  fmt::print(stderr, "ddpbench: error: {}\n", message);
  return code;
}

// A collective failed on this rank: its error line, its flight record, and
// (from the first rank to get there) the line naming the rank that never
// entered the collective; exit kExitRankLost.
[[noreturn]] void FailInCollective(ddpbench::DistContext& dist, const std::string& where,
                                   const std::string& message) {
  Fail(ddpbench::kExitRankLost, where + message);
  const std::string cause = ddpbench::ReportCollectiveFailure(dist, message);
  if (!cause.empty()) fmt::print(stderr, "ddpbench: error: {}\n", cause);
  // Out at once: the flight threads may still be blocked on a store that is
  // gone, and nothing of this run is left to write.
  std::fflush(nullptr);
  std::_Exit(ddpbench::kExitRankLost);
}

// The exception in flight as one error line and the documented exit code;
// `where` (rank, collective) prefixes failures that are not bad input. With
// `collective` (a collective failed on this rank), a failure of the transport
// (a timeout, a closed connection: not input, results or memory) goes to
// FailInCollective.
int FailWithCurrentException(const std::string& where, ddpbench::DistContext* collective = nullptr) {
  using namespace ddpbench;
  try {
    throw;
  } catch (const ConfigError& e) {
    return Fail(2, e.what());
  } catch (const DataError& e) {
    return Fail(2, e.what());
  } catch (const std::invalid_argument& e) {
    return Fail(2, e.what());
  } catch (const ResultsError& e) {
    return Fail(4, e.what());
  } catch (const DeviceOutOfMemory& e) {
    return Fail(kExitOutOfMemory, where + e.what() + OutOfMemoryAdvice());
  } catch (const c10::OutOfMemoryError& e) {  // CUDA's caching allocator
    return Fail(kExitOutOfMemory, where + FirstSentence(e.what_without_backtrace()) + OutOfMemoryAdvice());
  } catch (const c10::Error& e) {
    if (collective) FailInCollective(*collective, where, e.what_without_backtrace());
    return Fail(1, where + e.what_without_backtrace());
  } catch (const std::exception& e) {
    if (collective) FailInCollective(*collective, where, e.what());
    return Fail(1, where + e.what());
  }
}

void PrintStrategies() {
  static const char* kKinds[] = {"1 device", "1 process, N devices (data parallel)",
                                 "N processes (one per device)", "1 process, model cut over N devices"};
  fmt::print("{:<8} {:<40} {}\n", "strategy", "devices", "description");
  for (const auto& e : ddpbench::StrategyTable())
    fmt::print("{:<8} {:<40} {}\n", e.info.name, kKinds[static_cast<int>(e.info.parallelism())],
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
  if (!config.project.empty() || !config.search.empty()) {
    try {
      return config.project.empty() ? RunSearch(config) : RunProjection(config);
    } catch (...) {
      return FailWithCurrentException("");
    }
  }
  DistContext dist;
  std::vector<Injection> injections;
  try {
    // Ranks: join a launcher's, or start --gpus of them (multi-process
    // strategies) after checking the flags and data once, here.
    const StrategyEntry& entry = FindStrategy(config.strategy);
    const bool multi = RunsRankPerDevice(entry.info, config);
    LaunchEnv env = DetectLaunchEnv(ProcessEnv());
    injections = ParseInjections(config.inject);
    CheckInjectionRanks(injections, !multi ? 1 : env.world > 1 ? env.world : config.gpus);
    if (multi && env.launcher != "spawn" && env.world == 1 && (env.launcher == "none" || config.gpus > 1)) {
      PreflightCheck(config, config.gpus);
      return SpawnRanks(config, config.gpus, argc, argv);
    }
    if (!multi && env.world > 1)
      throw ConfigError(fmt::format("--strategy={} runs in one process, but {} started {} ranks; use {} or {} "
                                    "--stage-ranks under a launcher, or start one process", config.strategy,
                                    env.launcher, env.world, JoinNames(StrategiesWhere([](const StrategyTraits& t) {
                                      return t.parallelism() == Parallelism::kDataMultiProcess;
                                    })), JoinNames(StrategiesReading("--stage-ranks"))));
    if (multi) {
      if (config.gpus_given && config.gpus != env.world)
        throw ConfigError(fmt::format("--gpus={}: {} started {} ranks; leave --gpus out under a launcher or "
                                      "make it equal", config.gpus, env.launcher, env.world));
      config.gpus = env.world;
      dist.rank = env.rank;
      dist.local_rank = env.local_rank;
      dist.world = env.world;
      dist.local_world = env.local_world;
      dist.launcher = env.launcher;
      dist.master_addr = env.master_addr;
      dist.master_port = env.master_port;
      dist.store_served = env.store_served;
      dist.store_prefix = env.store_prefix;
    }
  } catch (...) {
    return FailWithCurrentException("");
  }
  SetLogRank(dist.rank);
  flight::Configure(dist.rank, dist.world > 1 ? static_cast<size_t>(config.flight_recorder) : 0,
                    flight::RecordPathFor(config.out, dist.rank));
  ArmInjections(injections, dist.rank);
  if (!config.inject.empty() && dist.rank == 0) LogWarn("--inject: {} (faults on purpose)", fmt::join(config.inject, "; "));
  // Failures of a rank name it, and the collective it was in.
  auto where = [&] {
    std::string w = dist.world > 1 ? fmt::format("rank {}: ", dist.rank) : "";
    if (const char* c = FailedCollective()) w += fmt::format("{}: ", c);
    return w;
  };
  try {
    return RunBenchmark(config, dist);
  } catch (...) {
    // A stage thread's collective fails on its own thread: the recorder saw it.
    const bool collective = (FailedCollective() || flight::HasFailed()) && dist.world > 1;
    return FailWithCurrentException(where(), collective ? &dist : nullptr);
  }
}
