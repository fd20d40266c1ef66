// Log lines on stderr that carry the time and the rank: "[12:00:01.234]
// [rank 1] [warn] ...". One write per line, so ranks sharing a terminal never
// interleave inside a line. (spdlog was the first choice, but Debian's is built
// against fmt 9 while LibTorch's headers bring fmt 12.)
#pragma once

#include <fmt/format.h>

#include <string>

namespace ddpbench {

enum class LogLevel { kInfo, kWarn, kError };
void SetLogRank(int rank);
void SetLogQuiet(bool quiet);  // drop info lines (warnings and errors stay)
void LogLine(LogLevel level, const std::string& message);

template <typename... Args>
void LogInfo(fmt::format_string<Args...> format, Args&&... args) {
  LogLine(LogLevel::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogWarn(fmt::format_string<Args...> format, Args&&... args) {
  LogLine(LogLevel::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogError(fmt::format_string<Args...> format, Args&&... args) {
  LogLine(LogLevel::kError, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ddpbench
