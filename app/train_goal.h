// Training to an answer: what happens between two steps of a run
// that trains for epochs, a time budget or a target accuracy, or that keeps
// snapshots. After each step it validates (at each epoch's end, or every
// --eval-every steps), records the epoch, checks the target and the budget,
// writes a snapshot when one is due, and stops every rank together on a
// budget, a target or SIGTERM/SIGUSR1 (Slurm's --signal). The loop itself
// (step_loop.cpp) only calls AfterStep.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "datasets/dataset.h"
#include "harness/snapshot.h"
#include "app/step_loop.h"

namespace ddpbench {

struct RunConfig;
struct DistContext;
class Strategy;
class LossLog;

// Installs the SIGTERM/SIGUSR1 handler that asks the run to stop after the
// current step (only runs with --snapshot-dir: elsewhere a signal ends the
// process as usual).
void ArmStopSignals();
int StopSignalReceived();  // the signal number, 0 if none

class TrainingGoal {
 public:
  // state: where the run stands (a resumed run's, or a fresh one);
  // store: nullptr without --snapshot-dir. val_spec makes the validation
  // source; steps_per_epoch is the training source's.
  TrainingGoal(const RunConfig& config, DistContext& dist, Strategy& strategy, DataSpec val_spec,
               int64_t steps_per_epoch, int64_t last_step, LoopState state, SnapshotStore* store);

  // The loop's after_step: true stops the run.
  bool AfterStep(int64_t steps_done, LossLog& losses);
  // At the end of a run that was not preempted: the final snapshot (when
  // there is a store and the last step's is not written yet).
  void Finish();

  const LoopState& state() const { return state_; }
  // steps|epochs|budget|target|signal
  const std::string& stop_reason() const { return stop_reason_; }
  bool preempted() const { return stop_reason_ == "signal"; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  double best_val_loss() const;      // -1: no validation
  double mean_epoch_s() const;       // -1: no complete epoch
  std::string last_snapshot() const { return last_snapshot_; }
  int64_t snapshots_written() const { return snapshots_written_; }

 private:
  double Elapsed() const;
  EvalResult Validate();
  void EndEpoch(int64_t steps_done, LossLog& losses);
  // Sum and count of the train losses of the epoch that step `steps_done`
  // belongs to, up to it (an earlier session's part included).
  std::pair<double, int64_t> EpochLossSoFar(int64_t steps_done, LossLog& losses);
  void CheckTarget(double accuracy, int64_t steps_done);
  bool ShouldStop();
  // Writes the state at this step; `epoch_losses`: the current epoch's
  // losses so far (carried into the snapshot).
  void Snapshot(std::pair<double, int64_t> epoch_losses);
  void WriteEpochCsv() const;

  const RunConfig& config_;
  DistContext& dist_;
  Strategy& strategy_;
  const DataSpec val_spec_;
  const int64_t steps_per_epoch_;
  LoopState state_;
  SnapshotStore* store_;
  const std::chrono::steady_clock::time_point session_start_;
  const double elapsed_before_;
  const int64_t first_step_;  // steps done when this session began
  const int64_t last_step_;   // the plan's last step (a budget or target may stop sooner)
  const int64_t snapshot_every_;  // steps; 0: at each epoch's end
  std::pair<double, int64_t> final_epoch_losses_{0, 0};  // at the loop's last step, for Finish
  std::string stop_reason_;
  std::string last_snapshot_;
  int64_t last_snapshot_step_ = -1;
  int64_t snapshots_written_ = 0;
  int64_t delay_ms_ = 0;  // DDPBENCH_TEST_STEP_DELAY_MS: slows steps for the resume tests
};

}  // namespace ddpbench
