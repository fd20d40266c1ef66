// The timed training loop and the test-set evaluation, apart from the run's
// preparation and its reporting, so that what is measured (and how) is in one
// short place. On a single CUDA device the loop never waits for the GPU inside
// the timed steps: step times come from CUDA events and losses stay on the
// device until a check point, as in a plain PyTorch loop.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/dataset.h"
#include "harness/phase.h"

namespace ddpbench {

class Strategy;
class BatchSource;
struct DistContext;

class LossLog;

struct LoopPlan {
  int64_t first_step = 0;  // steps done before this loop (a resumed run's)
  int64_t warmup = 0;
  int64_t timed = 1;       // at most; after_step may stop the loop earlier
  int64_t process_batch = 1;  // images per step in this process (progress only)
  bool progress = false;      // progress lines on stderr
  bool progress_live = false;  // stderr is a terminal: one line rewritten in place
  // Losses are read (and checked for divergence) every this many steps; 1 on
  // CPU, where reading costs nothing.
  int64_t check_every = 1;
  // The peak-memory counters restart when the timed steps start, unless a
  // strategy allocated what its steps use during the warm-up and holds it
  // (a CUDA graph's private pool, made at capture, is never allocated again).
  bool reset_peak_at_timed = true;
  // --profile: the PyTorch profiler runs over the timed steps and writes
  // this file ("": no profile); `profile_cuda` adds the device's kernels.
  std::string profile;
  bool profile_cuda = false;
  // Called after every step with the steps done in all (first_step
  // included); true stops the loop. Its time (validation, snapshots) is not
  // part of the section's wall time.
  std::function<bool(int64_t steps_done, LossLog& losses)> after_step;
};

// Device-side losses, read in batches at check points (or when asked).
class LossLog {
 public:
  void Add(const torch::Tensor& loss, int64_t step, bool counted);
  // Reads the pending losses; throws on the first that is not finite.
  // Returns the last one read.
  double Read();
  // The sum and count of the losses of steps numbered >= first (reads
  // pending ones first), summed in step order.
  std::pair<double, int64_t> SumSince(int64_t first);
  // Losses of the timed (counted) steps, in order.
  const std::vector<double>& timed() const { return timed_; }

 private:
  std::vector<torch::Tensor> pending_;
  std::vector<std::pair<int64_t, bool>> steps_;
  std::vector<std::pair<int64_t, double>> read_;  // (step, loss), every step read
  std::vector<double> timed_;
  double last_ = 0;
};

struct LoopTimes {
  std::vector<double> step_ms;     // per timed step
  std::vector<double> losses;      // per timed step
  std::array<double, kNumPhases> phase_ms{};  // the timer's totals: every counted step so far
  double wall_ms = 0;              // first timed step's start to the last one's end, less after_step's time
  bool stopped = false;            // after_step ended the loop early
  LoaderStats loader;              // the training source's figures over the timed steps (bad_images: the whole run's)
  std::string profile;             // --profile's file, once written
};

// Runs plan.warmup + plan.timed steps (fewer when after_step stops it);
// throws when the loss is not finite.
LoopTimes RunSteps(Strategy& strategy, BatchSource& train, PhaseTimer& timer, DistContext& dist,
                   const std::vector<torch::Device>& devices, const LoopPlan& plan);

// Synchronises every device of `devices` (no-op on CPU).
void SynchronizeDevices(const std::vector<torch::Device>& devices);

struct EvalResult {
  double accuracy = -1;  // top-1 fraction over every rank's batches; -1: no data
  double loss = -1;      // mean cross-entropy per image; -1: no data
  int64_t images = 0;    // images evaluated, over every rank
};
// Every rank's evaluation batches of `source` (at most max_batches each, 0:
// all) in eval mode, summed over ranks. Collective, and ranks stay in step
// whatever batches each has: one with fewer (or none) predicts placeholders.
EvalResult Evaluate(Strategy& strategy, BatchSource* source, DistContext& dist, int64_t max_batches);

}  // namespace ddpbench
