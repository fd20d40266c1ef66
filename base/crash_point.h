// Named points in the writing of snapshots and results files where a test
// can kill the process (SIGKILL, as a node failure would), to prove that a
// later run resumes from a complete snapshot, never a mixture. Test-only:
// DDPBENCH_TEST_CRASH_AT=N kills this process at the N-th point it reaches
// (counting from 1; on rank DDPBENCH_TEST_CRASH_RANK only, default every
// rank). Unset (always, outside tests) it costs one cached getenv.
#pragma once

namespace ddpbench {

void CrashPoint(const char* name);

// Test-only as well: DDPBENCH_TEST_FAIL_AT=NAME makes the step named NAME
// throw std::runtime_error here (a step after the run that fails, to prove the
// measured row is still written). Unset it costs one cached getenv.
void FailPoint(const char* name);

// Test-only too: DDPBENCH_TEST_STOP_AT=NAME stops this process (SIGSTOP, as a
// debugger or a frozen node would) the first time it reaches the point NAME,
// on rank DDPBENCH_TEST_CRASH_RANK only (default every rank), after a short
// pause that lets its flight progress say where it is.
void StopPoint(const char* name);

}  // namespace ddpbench
