// See crash_point.h.
#include "base/crash_point.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace ddpbench {
namespace {

long EnvNumber(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

}  // namespace

void CrashPoint(const char* name) {
  static const long at = EnvNumber("DDPBENCH_TEST_CRASH_AT", 0);
  if (at <= 0) return;
  static const long rank = EnvNumber("DDPBENCH_TEST_CRASH_RANK", -1);
  if (rank >= 0 && rank != EnvNumber("RANK", 0)) return;
  static std::atomic<long> reached{0};
  if (++reached != at) return;
  std::fprintf(stderr, "ddpbench: test crash point %ld (%s): SIGKILL\n", at, name);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

void StopPoint(const char* name) {
  static const char* stop_at = std::getenv("DDPBENCH_TEST_STOP_AT");
  if (!stop_at || std::string(stop_at) != name) return;
  static const long rank = EnvNumber("DDPBENCH_TEST_CRASH_RANK", -1);
  if (rank >= 0 && rank != EnvNumber("RANK", 0)) return;
  static std::atomic<bool> stopped{false};
  if (stopped.exchange(true)) return;
  std::fprintf(stderr, "ddpbench: test stop point (%s): SIGSTOP\n", name);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  std::raise(SIGSTOP);
}

void FailPoint(const char* name) {
  static const char* fail_at = std::getenv("DDPBENCH_TEST_FAIL_AT");
  if (fail_at && std::string(fail_at) == name)
    throw std::runtime_error(std::string("test failure point ") + name + " (DDPBENCH_TEST_FAIL_AT)");
}

}  // namespace ddpbench
