#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace ddpbench {
namespace {
std::atomic<int> g_rank{0};
std::atomic<bool> g_quiet{false};
}  // namespace

void SetLogRank(int rank) { g_rank = rank; }
void SetLogQuiet(bool quiet) { g_quiet = quiet; }

void LogLine(LogLevel level, const std::string& message) {
  if (level == LogLevel::kInfo && g_quiet) return;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  static const char* kLevel[] = {"info", "warn", "error"};
  std::string line = fmt::format("[{:02}:{:02}:{:02}.{:03}] [rank {}] [{}] {}\n", tm.tm_hour, tm.tm_min,
                                 tm.tm_sec, ms, g_rank.load(), kLevel[static_cast<int>(level)], message);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ddpbench
