// The timed training loop and the test-set evaluation, apart from the run's
// preparation and its reporting, so that what is measured (and how) is in one
// short place. On a single CUDA device the loop never waits for the GPU inside
// the timed steps: step times come from CUDA events and losses stay on the
// device until a check point, as in a plain PyTorch loop.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <vector>

#include "harness/phase.h"

namespace ddpbench {

class Strategy;
class BatchSource;
struct DistContext;

struct LoopPlan {
  int64_t warmup = 0;
  int64_t timed = 1;
  int64_t process_batch = 1;  // images per step in this process (progress only)
  bool progress = false;      // a live line on stderr
  // Losses are read (and checked for divergence) every this many steps; 1 on
  // CPU, where reading costs nothing.
  int64_t check_every = 1;
};

struct LoopTimes {
  std::vector<double> step_ms;     // per timed step
  std::vector<double> losses;      // per timed step
  std::array<double, kNumPhases> phase_ms{};  // the timer's totals: every counted step so far
  double wall_ms = 0;              // first timed step's start to the last one's end
};

// Runs plan.warmup + plan.timed steps; throws when the loss is not finite.
LoopTimes RunSteps(Strategy& strategy, BatchSource& train, PhaseTimer& timer, DistContext& dist,
                   const std::vector<torch::Device>& devices, const LoopPlan& plan);

// Synchronises every device of `devices` (no-op on CPU).
void SynchronizeDevices(const std::vector<torch::Device>& devices);

// Fraction of this process's test batches (at most max_batches, 0: all)
// classified correctly, summed over ranks; -1 when there is no test set.
double EvaluateAccuracy(Strategy& strategy, BatchSource* test, DistContext& dist, int64_t max_batches);

}  // namespace ddpbench
