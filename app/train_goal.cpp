// See train_goal.h. Every decision that could differ between ranks (the
// budget is read from each rank's clock, signals reach ranks at different
// moments) goes through one all-reduce per step, so all ranks stop after the
// same step; validation accuracy is already the same on every rank.
#include "app/train_goal.h"

#include <optional>

#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "base/config.h"
#include "harness/dist.h"
#include "base/log.h"
#include "base/results.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

volatile sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) { g_stop_signal = sig; }

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Cell(double v, int digits) { return v < 0 || std::isnan(v) ? "" : fmt::format("{:.{}f}", v, digits); }

}  // namespace

void ArmStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

int StopSignalReceived() { return g_stop_signal; }

TrainingGoal::TrainingGoal(const RunConfig& config, DistContext& dist, Strategy& strategy, DataSpec val_spec,
                           int64_t steps_per_epoch, int64_t last_step, LoopState state, SnapshotStore* store)
    : config_(config),
      dist_(dist),
      strategy_(strategy),
      val_spec_(std::move(val_spec)),
      steps_per_epoch_(steps_per_epoch),
      state_(std::move(state)),
      store_(store),
      session_start_(std::chrono::steady_clock::now()),
      elapsed_before_(state_.elapsed_s),
      first_step_(state_.step),
      last_step_(last_step),
      snapshot_every_(config.SnapshotEverySteps()) {
  if (const char* delay = std::getenv("DDPBENCH_TEST_STEP_DELAY_MS")) delay_ms_ = std::atoll(delay);
  last_snapshot_step_ = store_ ? state_.step : -1;  // a resumed run's snapshot is on disk already
}

double TrainingGoal::Elapsed() const {
  return elapsed_before_ + Seconds(std::chrono::steady_clock::now() - session_start_);
}

EvalResult TrainingGoal::Validate() {
  std::unique_ptr<BatchSource> val = MakeValSource(val_spec_, dist_.data_rank(), dist_.data_world());
  return Evaluate(strategy_, val.get(), dist_, 0);
}

bool TrainingGoal::AfterStep(int64_t steps_done, LossLog& losses) {
  if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
  state_.step = steps_done;
  if (store_ && dist_.is_root()) store_->MarkProgress(steps_done);
  const bool epoch_end = steps_done % steps_per_epoch_ == 0;
  if (epoch_end && config_.TrainsToAnswer()) {
    EndEpoch(steps_done, losses);
  } else if (config_.eval_every > 0 && steps_done % config_.eval_every == 0 && val_spec_.val_fraction > 0) {
    CheckTarget(Validate().accuracy, steps_done);
  }
  const bool stop = ShouldStop();
  const bool due = snapshot_every_ > 0 ? steps_done % snapshot_every_ == 0 : epoch_end;
  const auto epoch_losses = !epoch_end && store_ && (due || stop || steps_done == last_step_)
                                ? EpochLossSoFar(steps_done, losses) : std::pair<double, int64_t>{0, 0};
  if (stop || steps_done == last_step_) final_epoch_losses_ = epoch_losses;
  if (store_ && (due || stop_reason_ == "signal")) Snapshot(epoch_losses);
  return stop;
}

void TrainingGoal::EndEpoch(int64_t steps_done, LossLog& losses) {
  EpochRecord e;
  e.epoch = steps_done / steps_per_epoch_;
  e.steps = steps_done;
  const auto [sum, n] = EpochLossSoFar(steps_done, losses);
  e.train_loss = n > 0 ? sum / static_cast<double>(n) : -1;
  if (val_spec_.val_fraction > 0) {
    const EvalResult v = Validate();
    e.val_loss = v.loss;
    e.val_accuracy = v.accuracy;
    CheckTarget(v.accuracy, steps_done);
  }
  e.elapsed_s = Elapsed();
  e.epoch_s = e.elapsed_s - (state_.history.empty() ? 0.0 : state_.history.back().elapsed_s);
  state_.history.push_back(e);
  if (dist_.is_root()) {
    LogInfo("epoch {} (step {}): train loss {:.4f}{}, {:.1f} s", e.epoch, steps_done, e.train_loss,
            e.val_accuracy >= 0 ? fmt::format(", val loss {:.4f}, val accuracy {:.4f}", e.val_loss, e.val_accuracy)
                                : "",
            e.epoch_s);
    WriteEpochCsv();
  }
}

std::pair<double, int64_t> TrainingGoal::EpochLossSoFar(int64_t steps_done, LossLog& losses) {
  const int64_t epoch_start = (steps_done - 1) / steps_per_epoch_ * steps_per_epoch_;  // its first step's number
  auto [sum, n] = losses.SumSince(std::max(epoch_start, first_step_));
  if (epoch_start < first_step_) {  // the epoch began in an earlier session
    sum += state_.epoch_loss_sum;
    n += state_.epoch_loss_steps;
  }
  return {sum, n};
}

void TrainingGoal::CheckTarget(double accuracy, int64_t steps_done) {
  if (config_.target_accuracy <= 0 || state_.steps_to_target >= 0 || !(accuracy >= config_.target_accuracy)) return;
  state_.time_to_target_s = Elapsed();
  state_.steps_to_target = steps_done;
  if (dist_.is_root())
    LogInfo("target accuracy {} reached at step {} ({:.4f}) after {:.1f} s", config_.target_accuracy, steps_done,
            accuracy, state_.time_to_target_s);
}

// One verdict for every rank: a signal anywhere, or the budget spent on any
// rank's clock, stops them all after this step.
bool TrainingGoal::ShouldStop() {
  const bool budget = config_.time_budget_s > 0 && Elapsed() >= config_.time_budget_s;
  double verdict = StopSignalReceived() ? 2 : budget ? 1 : 0;
  if (dist_.world > 1 && (config_.time_budget_s > 0 || store_)) verdict = dist_.AllReduceMax(verdict);
  if (verdict == 2) stop_reason_ = "signal";
  else if (verdict == 1) stop_reason_ = "budget";
  else if (state_.steps_to_target >= 0) stop_reason_ = "target";
  if (!stop_reason_.empty() && dist_.is_root())
    LogInfo("stopping after step {}: {}", state_.step,
            stop_reason_ == "signal" ? fmt::format("signal {} received", StopSignalReceived())
            : stop_reason_ == "budget" ? fmt::format("--time-budget={} spent ({:.1f} s)", config_.time_budget,
                                                     Elapsed())
                                       : std::string("target accuracy reached"));
  return !stop_reason_.empty();
}

void TrainingGoal::Snapshot(std::pair<double, int64_t> epoch_losses) {
  if (last_snapshot_step_ == state_.step) return;
  state_.elapsed_s = Elapsed();
  LoopState saved = state_;
  std::tie(saved.epoch_loss_sum, saved.epoch_loss_steps) = epoch_losses;
  auto tensors = strategy_.SaveState();
  // Rank 0 describes every rank's tensors, so that another layout can read them.
  const StateLayout layout = strategy_.DescribeState();
  std::optional<StateDescription> described;
  if (dist_.is_root() && layout.reshardable) described = DescribeState(layout, tensors, dist_.world);
  SaveRngStates(&tensors);
  last_snapshot_ = store_->Write(saved, tensors, dist_, described ? &*described : nullptr);
  last_snapshot_step_ = state_.step;
  ++snapshots_written_;
  if (dist_.is_root()) LogInfo("snapshot at step {}: {}", state_.step, last_snapshot_);
}

void TrainingGoal::Finish() {
  state_.elapsed_s = Elapsed();
  if (stop_reason_.empty()) stop_reason_ = config_.epochs > 0 ? "epochs" : "steps";
  if (store_) Snapshot(final_epoch_losses_);  // a longer run of the same configuration goes on from here
}

double TrainingGoal::best_val_loss() const {
  double best = -1;
  for (const auto& e : state_.history)
    if (e.val_loss >= 0 && (best < 0 || e.val_loss < best)) best = e.val_loss;
  return best;
}

double TrainingGoal::mean_epoch_s() const {
  if (state_.history.empty()) return -1;
  double sum = 0;
  for (const auto& e : state_.history) sum += e.epoch_s;
  return sum / static_cast<double>(state_.history.size());
}

// The whole history, rewritten atomically after each epoch: a restart that
// resumes from an earlier snapshot rewrites it without the lost epochs.
void TrainingGoal::WriteEpochCsv() const {
  if (state_.epoch_csv.empty()) return;
  std::string text = "epoch,steps,train_loss,val_loss,val_accuracy,epoch_time_s,elapsed_s\n";
  for (const auto& e : state_.history)
    text += fmt::format("{},{},{},{},{},{},{}\n", e.epoch, e.steps, Cell(e.train_loss, 5), Cell(e.val_loss, 5),
                        Cell(e.val_accuracy, 5), Cell(e.epoch_s, 3), Cell(e.elapsed_s, 3));
  ReplaceFile(state_.epoch_csv, text);
}

}  // namespace ddpbench
