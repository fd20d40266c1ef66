// --inject's faults (inject.h): parsed once, armed per rank, fired by the
// step loop (hang, crash) and by the phase timer (delay).
#include "harness/inject.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"

namespace ddpbench {

namespace {

const char* const kKinds = "delay, slow-data, hang, crash";
const char* const kUsage =
    "delay:rank=R,phase=data|forward|backward|optimizer,ms=M[,every=K], slow-data:rank=R,ms=M[,every=K], "
    "hang:rank=R,step=S, crash:rank=R,step=S";

// This process's armed injections and the step it is on (written by the step
// loop's thread, read by the phase timers of any thread).
std::vector<Injection> g_armed;
std::atomic<int64_t> g_step{0};
// The step each armed delay last slept in: once per step, however many times
// its phase is entered (a pipeline's stage enters backward once per micro-batch).
std::mutex g_fired_mutex;
std::vector<int64_t> g_fired;

std::map<std::string, std::string> Fields(const std::string& spec, const std::string& body) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    const size_t comma = body.find(',', start);
    const std::string part = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = part.find('=');
    if (eq == std::string::npos || eq == 0 || out.count(part.substr(0, eq)))
      throw ConfigError(fmt::format("--inject={}: '{}' is not key=value (each key once); accepted: {}", spec, part,
                                    kUsage));
    out[part.substr(0, eq)] = part.substr(eq + 1);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The value of `key`, or one ConfigError naming it as missing.
const std::string& ValueOf(const std::string& spec, const std::map<std::string, std::string>& f,
                           const std::string& key) {
  const auto it = f.find(key);
  if (it == f.end()) throw ConfigError(fmt::format("--inject={}: {} is missing; accepted: {}", spec, key, kUsage));
  return it->second;
}

// `text` read whole by `parse` (std::stoll, std::stod), or nothing when it is
// not a number or has more after one.
template <typename T, typename Parse>
std::optional<T> WholeText(const std::string& text, Parse parse) {
  size_t pos = 0;
  try {
    const T v = parse(text, &pos);
    if (pos != 0 && pos == text.size()) return v;
  } catch (...) {
  }
  return std::nullopt;
}

int64_t Whole(const std::string& spec, const std::map<std::string, std::string>& f, const std::string& key,
              int64_t least) {
  const std::string& text = ValueOf(spec, f, key);
  const auto v = WholeText<int64_t>(text, [](const std::string& t, size_t* pos) { return std::stoll(t, pos); });
  if (!v || *v < least)
    throw ConfigError(fmt::format("--inject={}: {}={} is not a whole number >= {}", spec, key, text, least));
  return *v;
}

// A delay's length: milliseconds, a decimal > 0 and at most an hour (0.4 is
// a 5% slowdown of an 8 ms step).
double Millis(const std::string& spec, const std::map<std::string, std::string>& f) {
  const std::string& text = ValueOf(spec, f, "ms");
  const auto v = WholeText<double>(text, [](const std::string& t, size_t* pos) { return std::stod(t, pos); });
  if (!v || !(*v > 0) || *v > 3.6e6)
    throw ConfigError(
        fmt::format("--inject={}: ms={} is not a number of milliseconds > 0 (at most 3600000)", spec, text));
  return *v;
}

Phase PhaseOf(const std::string& spec, const std::map<std::string, std::string>& f) {
  const std::string& text = ValueOf(spec, f, "phase");
  for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer})
    if (text == PhaseName(p)) return p;
  throw ConfigError(fmt::format("--inject={}: phase={} is not a phase every strategy times; accepted: data, "
                                "forward, backward, optimizer",
                                spec, text));
}

void OnlyKeys(const std::string& spec, const std::map<std::string, std::string>& f,
              const std::vector<std::string>& keys) {
  for (const auto& [key, value] : f)
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      throw ConfigError(fmt::format("--inject={}: '{}' is not a key of this kind; accepted: {}", spec, key, kUsage));
}

}  // namespace

Injection ParseInjection(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (kind != "delay" && kind != "slow-data" && kind != "hang" && kind != "crash")
    throw ConfigError(fmt::format("--inject={}: '{}' is not a kind; accepted: {} ({})", spec, kind, kKinds, kUsage));
  if (colon == std::string::npos)
    throw ConfigError(fmt::format("--inject={}: the kind needs its fields; accepted: {}", spec, kUsage));
  const std::map<std::string, std::string> f = Fields(spec, spec.substr(colon + 1));
  Injection in;
  in.spec = spec;
  in.rank = static_cast<int>(Whole(spec, f, "rank", 0));
  if (kind == "hang" || kind == "crash") {
    OnlyKeys(spec, f, {"rank", "step"});
    in.kind = kind == "hang" ? Injection::Kind::kHang : Injection::Kind::kCrash;
    in.step = Whole(spec, f, "step", 1);
    return in;
  }
  OnlyKeys(spec, f, kind == "delay" ? std::vector<std::string>{"rank", "phase", "ms", "every"}
                                    : std::vector<std::string>{"rank", "ms", "every"});
  in.phase = kind == "delay" ? PhaseOf(spec, f) : Phase::kData;
  in.ms = Millis(spec, f);
  in.every = f.count("every") ? Whole(spec, f, "every", 1) : 1;
  return in;
}

std::vector<Injection> ParseInjections(const std::vector<std::string>& specs) {
  std::vector<Injection> out;
  for (const std::string& s : specs) out.push_back(ParseInjection(s));
  return out;
}

void CheckInjectionRanks(const std::vector<Injection>& injections, int world) {
  for (const Injection& in : injections)
    if (in.rank >= world)
      throw ConfigError(fmt::format("--inject={}: rank={} is outside the world of {} rank{} (0..{})", in.spec,
                                    in.rank, world, world == 1 ? "" : "s", world - 1));
}

void ArmInjections(const std::vector<Injection>& injections, int rank) {
  g_armed.clear();
  for (const Injection& in : injections)
    if (in.rank == rank) g_armed.push_back(in);
  g_fired.assign(g_armed.size(), -1);
}

void InjectAtStep(int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  for (const Injection& in : g_armed) {
    if (in.step != step || in.kind == Injection::Kind::kDelay) continue;
    LogWarn("--inject={}: {} now", in.spec, in.kind == Injection::Kind::kCrash ? "crashing" : "hanging");
    if (in.kind == Injection::Kind::kCrash) raise(SIGKILL);
    if (in.kind == Injection::Kind::kHang)
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // until the launcher ends it
  }
}

namespace {

// Sleeps to within 2 ms of the end, then spins to it: a virtual machine's
// timer wake-up can be late by a few hundred microseconds, which would make a
// 0.5 ms delay 20% too long; the spin makes it as long as asked.
void Wait(double ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
  if (ms > 2) std::this_thread::sleep_until(end - std::chrono::milliseconds(2));
  while (Clock::now() < end) {
  }
}

}  // namespace

void InjectInPhase(Phase phase) {
  if (g_armed.empty()) return;
  const int64_t step = g_step.load(std::memory_order_relaxed);
  double ms = 0;
  {
    std::lock_guard<std::mutex> lock(g_fired_mutex);
    for (size_t i = 0; i < g_armed.size(); ++i) {
      const Injection& in = g_armed[i];
      if (in.kind != Injection::Kind::kDelay || in.phase != phase || step % in.every != 0 || g_fired[i] == step)
        continue;
      g_fired[i] = step;
      ms += in.ms;
    }
  }
  if (ms > 0) Wait(ms);
}

}  // namespace ddpbench
