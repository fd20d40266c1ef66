// The shared-memory wait (shm_futex.h): Linux futexes and a pid probe.
#include "harness/shm_futex.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>

namespace ddpbench::shm {

namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

void Bump(std::atomic<uint32_t>& word) {
  word.fetch_add(1);
  Futex(&word, FUTEX_WAKE, INT_MAX, nullptr);
}

void SleepOn(std::atomic<uint32_t>& word, uint32_t seen) {
  const timespec slice{0, std::chrono::duration_cast<std::chrono::nanoseconds>(kWaitSlice).count()};
  Futex(&word, FUTEX_WAIT, seen, &slice);
}

namespace {

// The state letter and start time of `pid` from /proc/PID/stat: after the
// command's closing parenthesis, the state is the first field, the start
// time the twentieth. False when the file cannot be read.
bool ReadStat(int pid, char* state, uint64_t* start_ticks) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  std::FILE* file = std::fopen(path, "r");
  if (!file) return false;
  char text[1024];
  const size_t n = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  text[n] = '\0';
  const char* at = std::strrchr(text, ')');
  if (!at) return false;
  std::istringstream rest(at + 1);
  std::string field;
  rest >> *state;
  for (int i = 0; i < 18 && rest >> field; ++i) {
  }
  return static_cast<bool>(rest >> *start_ticks);
}

}  // namespace

uint64_t ProcessStartTicks(int pid) {
  char state = 0;
  uint64_t start = 0;
  return pid > 0 && ReadStat(pid, &state, &start) ? start : 0;
}

bool ProcessExited(int pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(pid, &state, &start)) return false;  // another pid namespace: kill's answer is all we know
  return state == 'Z' || state == 'X' || (start_ticks != 0 && start != start_ticks);
}

}  // namespace ddpbench::shm
