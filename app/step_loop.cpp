// See step_loop.h. The only host synchronisations in the timed section are the
// ones a strategy makes itself, one per check point when losses are read, and
// one per step when one process drives several GPUs (CUDA events cannot time
// a step that spans devices).
#include "app/step_loop.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "datasets/dataset.h"
#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "harness/flight_recorder.h"
#include "harness/inject.h"
#include "harness/kineto_profile.h"
#include "harness/memory.h"
#include "harness/training.h"
#include "harness/trace.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Per-step times: CUDA events on a single device (read after the loop), the
// host clock otherwise (after a synchronisation when several GPUs are used).
class StepClock {
 public:
  explicit StepClock(const std::vector<torch::Device>& devices)
      : devices_(devices),
        events_(devices.size() == 1 && devices.front().is_cuda()),
        sync_each_(devices.size() > 1 && devices.front().is_cuda()) {}

  void Begin() {
    start_ = Clock::now();
    if (!events_) return;
    current_ = std::make_shared<CudaEventPair>(devices_.front().index());
    current_->RecordStart();
  }
  void End(bool counted) {
    if (sync_each_) SynchronizeDevices(devices_);
    if (events_) {
      current_->RecordEnd();
      if (counted) pending_.push_back(std::move(current_));
    } else if (counted) {
      host_ms_.push_back(MsSince(start_));
    }
  }
  std::vector<double> StepMs() {
    for (auto& e : pending_) host_ms_.push_back(e->ElapsedMs());
    pending_.clear();
    return host_ms_;
  }

 private:
  const std::vector<torch::Device>& devices_;
  const bool events_, sync_each_;
  Clock::time_point start_;
  std::shared_ptr<CudaEventPair> current_;
  std::vector<std::shared_ptr<CudaEventPair>> pending_;
  std::vector<double> host_ms_;
};

// --progress: on a terminal one line rewritten in place (step, img/s, ETA);
// elsewhere (a log file) one line every tenth of the phase's steps.
struct Progress {
  bool on;
  bool live;
  void Update(int64_t step, int64_t total, bool warmup, double img_s, double loss, double eta_s) const {
    if (!on) return;
    const std::string line = fmt::format("{} {:>5}/{:<5} {:>9.1f} img/s  loss {:.4f}  ETA {:>4.0f} s",
                                         warmup ? "warm-up" : "step   ", step, total, img_s, loss, eta_s);
    if (live) {
      fmt::print(stderr, "\r{}   ", line);
      if (step == total) fmt::print(stderr, "\n");
    } else if (step == total || step % std::max<int64_t>(1, total / 10) == 0) {
      fmt::print(stderr, "{}\n", line);
    }
  }
};

}  // namespace

void LossLog::Add(const torch::Tensor& loss, int64_t step, bool counted) {
  pending_.push_back(loss);
  steps_.push_back({step, counted});
}

double LossLog::Read() {
  if (pending_.empty()) return last_;
  auto values = torch::stack(pending_).to(torch::kCPU, torch::kDouble).contiguous();
  const double* v = values.data_ptr<double>();
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!std::isfinite(v[i]))
      throw std::runtime_error(fmt::format("step {}: the loss is {} (diverged); lower --lr", steps_[i].first, v[i]));
    if (steps_[i].second) timed_.push_back(v[i]);
    read_.emplace_back(steps_[i].first, v[i]);
    last_ = v[i];
  }
  pending_.clear();
  steps_.clear();
  return last_;
}

std::pair<double, int64_t> LossLog::SumSince(int64_t first) {
  Read();
  auto it = read_.end();
  while (it != read_.begin() && std::prev(it)->first >= first) --it;
  double sum = 0;
  int64_t n = 0;
  for (; it != read_.end(); ++it, ++n) sum += it->second;
  return {sum, n};
}

void SynchronizeDevices(const std::vector<torch::Device>& devices) {
  for (const auto& d : devices)
    if (d.is_cuda()) CudaSynchronize(d.index());
}

LoopTimes RunSteps(Strategy& strategy, BatchSource& train, PhaseTimer& timer, DistContext& dist,
                   const std::vector<torch::Device>& devices, const LoopPlan& plan) {
  LoopTimes out;
  StepClock clock(devices);
  LossLog losses;
  const Progress progress{plan.progress, plan.progress_live};
  const int64_t total = plan.warmup + plan.timed;
  Clock::time_point timed_start = Clock::now(), since_check = Clock::now();
  int64_t steps_since_check = 0;
  double paused_ms = 0;  // after_step's time inside the timed section
  LoaderStats loader_start = train.Stats();
  for (int64_t s = 0; s < total; ++s) {
    flight::BeginStep(plan.first_step + s + 1, s >= plan.warmup);
    InjectAtStep(plan.first_step + s + 1);  // --inject's hang or crash, when this rank has one here
    const bool warm = s < plan.warmup;
    if (s == plan.warmup) {  // the timed section starts on idle, aligned devices
      SynchronizeDevices(devices);
      dist.Barrier();
      if (plan.reset_peak_at_timed) ResetPeakMemory(devices);
      timed_start = since_check = Clock::now();
      loader_start = train.Stats();
      steps_since_check = 0;
      paused_ms = 0;
      if (!plan.profile.empty()) kineto::Start(plan.profile_cuda);
    }
    timer.StartStep();
    clock.Begin();
    {
      NvtxRange range("step");
      RECORD_USER_SCOPE("ddpbench_step");  // --profile's step boundaries (free when no profile runs)
      trace::Annotate("step", s);
      if (warm) trace::Annotate("warmup", 1);
      Batch batch;
      {
        auto scope = timer.Measure(Phase::kData);
        batch = train.Next();
      }
      losses.Add(strategy.Step(batch).loss, plan.first_step + s, !warm);
    }
    clock.End(!warm);
    timer.EndStep(!warm);
    ++steps_since_check;
    const bool last_of_phase = s + 1 == plan.warmup || s + 1 == total;
    if (last_of_phase || (s + 1) % plan.check_every == 0) {
      const double loss = losses.Read();
      const double step_ms = MsSince(since_check) / static_cast<double>(steps_since_check);
      progress.Update(warm ? s + 1 : s + 1 - plan.warmup, warm ? plan.warmup : plan.timed, warm,
                      plan.process_batch * 1000.0 / step_ms, loss, step_ms * static_cast<double>(total - s - 1) / 1000.0);
      since_check = Clock::now();
      steps_since_check = 0;
    }
    if (plan.after_step) {
      const Clock::time_point paused = Clock::now();
      out.stopped = plan.after_step(plan.first_step + s + 1, losses);
      paused_ms += MsSince(paused);
      if (out.stopped) break;
    }
  }
  flight::BeginStep(-1, false);
  losses.Read();
  SynchronizeDevices(devices);
  out.profile = kineto::Finish(plan.profile);
  out.losses = losses.timed();
  out.wall_ms = MsSince(timed_start) - paused_ms;
  out.step_ms = clock.StepMs();
  out.phase_ms = timer.Totals();
  const LoaderStats loader_end = train.Stats();
  out.loader = loader_end.Since(loader_start);
  out.loader.bad_images = loader_end.bad_images;  // the whole run's, warm-up included
  return out;
}

namespace {

// One evaluation round's agreement between ranks: whether any rank still has
// a batch, and the image shape [C, H, W] of one that has (so that a rank
// whose share of the test set ran out can stand in with a placeholder).
// World 1 makes no collective.
struct EvalRound {
  bool any = false;
  std::vector<int64_t> shape;
};

EvalRound AgreeOnRound(const Batch& batch, DistContext& dist) {
  std::vector<double> mine(4, 0.0);
  if (batch.size() > 0) {
    mine[0] = 1;
    for (int d = 1; d < 4; ++d) mine[d] = static_cast<double>(batch.images.size(d));
  }
  const std::vector<double> all = dist.world > 1 ? dist.AllGather(mine) : mine;
  EvalRound round;
  for (size_t r = 0; r + 3 < all.size(); r += 4) {
    if (all[r] == 0 || round.any) continue;
    round.any = true;
    round.shape = {static_cast<int64_t>(all[r + 1]), static_cast<int64_t>(all[r + 2]), static_cast<int64_t>(all[r + 3])};
  }
  return round;
}

}  // namespace

EvalResult Evaluate(Strategy& strategy, BatchSource* source, DistContext& dist, int64_t max_batches) {
  int64_t correct = 0, total = 0;
  double loss_sum = 0;
  torch::NoGradGuard no_grad;
  // Ranks run the same number of Predict calls: a strategy's Predict may be
  // collective (zero3 gathers parameters), so a rank whose share of the test
  // set is shorter (none, one batch, fewer batches) predicts a one-image
  // placeholder whose result is dropped until every rank has run out.
  for (int64_t b = 0;; ++b) {
    Batch batch;
    if (source && (max_batches == 0 || b < max_batches)) batch = source->Next();
    const EvalRound round = AgreeOnRound(batch, dist);
    if (!round.any) break;
    if (batch.size() == 0) {
      std::vector<int64_t> shape{1};
      shape.insert(shape.end(), round.shape.begin(), round.shape.end());
      (void)strategy.Predict(torch::zeros(shape));
      continue;
    }
    torch::Tensor logits = strategy.Predict(batch.images);
    if (!logits.defined()) continue;  // the answer is another rank's (pipeline stages on ranks)
    logits = logits.to(torch::kCPU);
    const auto labels = batch.labels.to(torch::kCPU);
    correct += logits.argmax(1).eq(labels).sum().item<int64_t>();
    loss_sum += ClassificationLoss(logits, labels).item<double>() * static_cast<double>(batch.size());
    total += batch.size();
  }
  const std::vector<double> sums = dist.AllGather({static_cast<double>(correct), static_cast<double>(total), loss_sum});
  double all_correct = 0, all_total = 0, all_loss = 0;
  for (size_t r = 0; r < sums.size(); r += 3) {
    all_correct += sums[r];
    all_total += sums[r + 1];
    all_loss += sums[r + 2];
  }
  if (all_total == 0) return {};
  return {all_correct / all_total, all_loss / all_total, static_cast<int64_t>(all_total)};
}

}  // namespace ddpbench
