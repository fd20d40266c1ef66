// The shared-memory wait (shm_futex.h): Linux futexes and a pid probe.
#include "harness/shm_futex.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

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

bool ProcessExited(int pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace ddpbench::shm
