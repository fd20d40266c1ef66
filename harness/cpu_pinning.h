// Which cores a CPU rank runs on. Ranks of a multi-process CPU run share the
// machine's cores: each gets threads_per_device of the cores the process was
// given (by taskset, Slurm's cpuset, ...), as a GPU rank gets its GPU. The
// calibration widens its threads again for a moment (calibrate.cpp), back to
// that same given set, never beyond it.
#pragma once

#include <sched.h>

namespace ddpbench {

// Pins this process (and the threads it starts afterwards) to rank
// `local_rank`'s `threads` cores among those it was given; does nothing when
// there are too few. Remembers the given set (CoresBeforePinning).
void PinRankToCores(int local_rank, int threads);

// The cores this process was given before PinRankToCores narrowed it; its
// current set where it never did.
cpu_set_t CoresBeforePinning();

}  // namespace ddpbench
