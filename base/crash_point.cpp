// See crash_point.h.
#include "base/crash_point.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <atomic>
#include <stdexcept>
#include <string>

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

void FailPoint(const char* name) {
  static const char* fail_at = std::getenv("DDPBENCH_TEST_FAIL_AT");
  if (fail_at && std::string(fail_at) == name)
    throw std::runtime_error(std::string("test failure point ") + name + " (DDPBENCH_TEST_FAIL_AT)");
}

}  // namespace ddpbench
