#include "strategies/pipeline.h"

#include <torch/torch.h>

#include <chrono>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/config.h"
#include "harness/cuda_support.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "strategies/device_workers.h"
#include "strategies/stages.h"

namespace ddpbench {
namespace {

using Clock = std::chrono::steady_clock;

// Busy time of one stage: the sum of its operations' durations, waits for
// other stages excluded. CUDA: events on the stage's stream, read once the
// stream is idle; CPU: the wall clock.
class BusyClock {
 public:
  explicit BusyClock(torch::Device device) : device_(device) {}
  void Start() {
    if (device_.is_cuda()) {
      events_.push_back(std::make_unique<CudaEventPair>(device_.index()));
      events_.back()->RecordStart();
    } else {
      start_ = Clock::now();
    }
  }
  void Stop() {
    if (device_.is_cuda()) events_.back()->RecordEnd();
    else cpu_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }
  // Busy milliseconds since the last call (CUDA: waits for the events).
  double Take() {
    double ms = cpu_ms_;
    for (auto& e : events_) ms += e->ElapsedMs();
    cpu_ms_ = 0;
    events_.clear();
    return ms;
  }

 private:
  torch::Device device_;
  Clock::time_point start_;
  double cpu_ms_ = 0;
  std::vector<std::unique_ptr<CudaEventPair>> events_;
};

// One operation of a stage: busy time and the phase figure together.
class StageWork {
 public:
  StageWork(BusyClock& clock, PhaseTimer& timer, Phase phase, torch::Device device)
      : clock_(clock), scope_(timer.Measure(phase, device)) {
    clock_.Start();
  }
  ~StageWork() { clock_.Stop(); }
  StageWork(const StageWork&) = delete;
  StageWork& operator=(const StageWork&) = delete;

 private:
  BusyClock& clock_;
  PhaseTimer::Scope scope_;
};

std::string Divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n && d.size() < 12; ++i)
    if (n % i == 0) d.push_back(i);
  return fmt::format("{}{}", fmt::join(d, ", "), d.back() == n ? "" : ", ...");
}

class PipelineStrategy final : public Strategy {
 public:
  explicit PipelineStrategy(bool pipelined) : pipelined_(pipelined) {}
  ~PipelineStrategy() override = default;

  void Setup(const RunContext& ctx) override {
    config_ = ctx.config;
    timer_ = ctx.timer;
    const int S = static_cast<int>(ctx.devices.size());
    if (pipelined_) {
      if (config_->chunks < 1)
        throw ConfigError(fmt::format("--chunks={}: must be at least 1", config_->chunks));
      if (config_->batch_size % config_->chunks != 0)
        throw ConfigError(fmt::format(
            "--chunks={}: --batch-size={} does not divide into {} equal micro-batches; accepted: a divisor of {} ({})",
            config_->chunks, config_->batch_size, config_->chunks, config_->batch_size, Divisors(config_->batch_size)));
      micro_batches_ = static_cast<int>(config_->chunks);
      schedule_ = ParsePipelineSchedule(config_->schedule);
    }
    model_ = BuildModel(ctx.model, config_->seed, ctx.devices.front());
    split_ = ChooseSplit(*config_, model_, S, config_->batch_size / micro_batches_);

    auto unit = model_->units()->begin();
    for (int s = 0; s < S; ++s) {
      auto stage = std::make_unique<Stage>(ctx.devices[s]);
      for (int i = 0; i < split_[s]; ++i) stage->units.push_back(*unit++);
      stage->ops = StageSchedule(schedule_, s, S, micro_batches_);
      stages_.push_back(std::move(stage));
    }
    workers_ = std::make_unique<DeviceWorkers>(ctx.devices, /*own_streams=*/true);
    // Each stage's weights, optimizer and loss scaler live on its device
    // (made in its thread, so a CPU logical device is charged for them).
    workers_->RunAll([&](int s) {
      Stage& st = *stages_[s];
      torch::NoGradGuard no_grad;
      for (auto& u : st.units) {
        if (st.device.is_cpu()) {
          for (auto& p : u.ptr()->parameters()) p.set_data(p.data().clone());
          for (auto& b : u.ptr()->buffers()) b.set_data(b.data().clone());
        } else {
          u.ptr()->to(st.device);
        }
        for (auto& p : u.ptr()->parameters()) st.params.push_back(p);
      }
      st.optimizer = MakeOptimizer(*config_, st.params, ctx.lr);
      st.scaler = std::make_unique<LossScaler>(config_->amp, st.device);
      WaitForCurrentStream(st.device);
    });
    busy_ms_.assign(S, 0.0);
  }

  StepResult Step(const Batch& batch) override {
    const int S = static_cast<int>(stages_.size());
    const int64_t n = batch.size();
    TORCH_CHECK(n >= micro_batches_, "pipeline: a batch of ", n, " cannot make ", micro_batches_, " micro-batches");
    StepState state;
    auto images = batch.images.tensor_split(micro_batches_);
    auto labels = batch.labels.tensor_split(micro_batches_);
    for (int m = 0; m < micro_batches_; ++m) {
      state.images.push_back(Send(images[m], /*host=*/true));
      state.labels.push_back(Send(labels[m], /*host=*/true));
      // Each micro-batch's mean loss weighted by its share of the batch: the
      // sum over micro-batches is the mean over the batch.
      state.weights.push_back(static_cast<double>(labels[m].size(0)) / n);
    }
    for (auto& st : stages_) {
      st->from_prev.Reset();
      st->from_next.Reset();
    }

    auto t0 = Clock::now();
    workers_->RunAll([&](int s) {
      try {
        RunStage(s, state);
      } catch (...) {
        for (auto& st : stages_) {  // wake every stage waiting on another
          st->from_prev.Close();
          st->from_next.Close();
        }
        throw;
      }
    });
    if (stages_.front()->scaler->enabled()) {
      // fp16: skip the step on every stage if any stage's gradients overflowed.
      torch::Tensor found = torch::zeros({1});
      for (auto& st : stages_) found += st->found_inf.to(torch::kCPU);
      workers_->RunAll([&](int s) {
        Stage& st = *stages_[s];
        {
          StageWork work(st.clock, *timer_, Phase::kOptimizer, st.device);
          st.scaler->StepAndUpdate(*st.optimizer, found.to(st.device));
        }
        WaitForCurrentStream(st.device);
        st.busy_ms += st.clock.Take();
      });
    }
    const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (steps_++ >= config_->warmup) {
      ++timed_steps_;
      wall_ms_ += wall;
      for (int s = 0; s < S; ++s) busy_ms_[s] += stages_[s]->busy_ms;
    }
    return {state.loss};
  }

  torch::Tensor Predict(const torch::Tensor& images) override {
    Handoff h = Send(images, /*host=*/true);
    for (size_t s = 0; s < stages_.size(); ++s) {
      workers_->Run(static_cast<int>(s), [&] {
        Stage& st = *stages_[s];
        torch::NoGradGuard no_grad;
        st.Train(false);
        torch::Tensor y;
        {
          AutocastGuard amp(config_->amp, st.device);
          y = st.Forward(Receive(h, st.device));
        }
        st.Train(true);
        h = Send(y);
      });
    }
    return Receive(h, stages_.back()->device);
  }

  std::vector<torch::Tensor> Parameters() override { return model_->parameters(); }

  std::map<std::string, std::string> Extras() override {
    const int S = static_cast<int>(stages_.size());
    std::map<std::string, std::string> extras;
    extras["split"] = SplitCounts(split_);
    extras["chunks"] = std::to_string(micro_batches_);
    if (pipelined_) extras["schedule"] = config_->schedule;
    extras["bubble_theory"] = fmt::format("{:.4f}", TheoreticalBubble(S, micro_batches_));
    if (timed_steps_ > 0 && wall_ms_ > 0) {
      const double busy = std::accumulate(busy_ms_.begin(), busy_ms_.end(), 0.0);
      extras["bubble_measured"] = fmt::format("{:.4f}", 1.0 - busy / (S * wall_ms_));
      std::vector<std::string> per_stage;
      for (double b : busy_ms_) per_stage.push_back(fmt::format("{:.1f}", b / timed_steps_));
      extras["stage_busy_ms"] = fmt::format("{}", fmt::join(per_stage, "/"));
    }
    return extras;
  }

  double OptimizerStateMb() override {
    double mb = 0;
    for (auto& st : stages_) mb += ddpbench::OptimizerStateMb(*st->optimizer);
    return mb;
  }

 private:
  struct Stage {
    explicit Stage(torch::Device d) : device(d), clock(d) {}
    torch::Device device;
    std::vector<torch::nn::AnyModule> units;
    std::vector<torch::Tensor> params;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    std::unique_ptr<LossScaler> scaler;
    std::vector<PipelineOp> ops;  // this stage's schedule
    Channel<Handoff> from_prev;   // activations from the stage before
    Channel<Handoff> from_next;   // input gradients from the stage after
    BusyClock clock;
    double busy_ms = 0;           // this step's
    torch::Tensor found_inf;      // fp16: this step's overflow flag

    torch::Tensor Forward(torch::Tensor x) {
      for (auto& u : units) x = u.forward(x);
      return x;
    }
    void Train(bool on) {
      for (auto& u : units) u.ptr()->train(on);
    }
  };

  struct StepState {
    std::vector<Handoff> images, labels;  // per micro-batch, from the data loader
    std::vector<double> weights;          // micro-batch size / batch size
    torch::Tensor loss;                   // on the last stage: the batch's mean loss
  };

  // Stage s's part of one step, in its worker thread: its schedule of
  // micro-batch forwards and backwards, then its optimizer step (fp16: the
  // unscale; the step follows once every stage's overflow flag is known).
  void RunStage(int s, StepState& state) {
    Stage& st = *stages_[s];
    const bool first = s == 0, last = s + 1 == static_cast<int>(stages_.size());
    st.optimizer->zero_grad();
    std::vector<torch::Tensor> inputs(micro_batches_), outputs(micro_batches_);
    for (const PipelineOp& op : st.ops) {
      const int m = op.micro_batch;
      if (op.forward) {
        Handoff in = first ? state.images[m] : st.from_prev.Pop();
        StageWork work(st.clock, *timer_, Phase::kForward, st.device);
        torch::Tensor x = Receive(in, st.device);
        if (!first) x.requires_grad_();
        AutocastGuard amp(config_->amp, st.device);
        torch::Tensor y = st.Forward(x);
        if (last) {
          y = ClassificationLoss(y, Receive(state.labels[m], st.device)) * state.weights[m];
          state.loss = state.loss.defined() ? state.loss + y.detach() : y.detach();
        } else {
          stages_[s + 1]->from_prev.Push(Send(y.detach()));
        }
        inputs[m] = x;
        outputs[m] = y;
      } else {
        Handoff grad = last ? Handoff{} : st.from_next.Pop();
        StageWork work(st.clock, *timer_, Phase::kBackward, st.device);
        if (last) st.scaler->Scale(outputs[m]).backward();
        else outputs[m].backward(Receive(grad, st.device));
        if (!first) stages_[s - 1]->from_next.Push(Send(inputs[m].grad()));
        inputs[m] = outputs[m] = torch::Tensor();  // this micro-batch's activations go
      }
    }
    {
      StageWork work(st.clock, *timer_, Phase::kOptimizer, st.device);
      if (st.scaler->enabled()) st.found_inf = st.scaler->Unscale(st.params);
      else st.optimizer->step();
    }
    WaitForCurrentStream(st.device);
    st.busy_ms = st.clock.Take();
  }

  bool pipelined_;
  int micro_batches_ = 1;
  PipelineSchedule schedule_ = PipelineSchedule::kGPipe;
  const RunConfig* config_ = nullptr;
  PhaseTimer* timer_ = nullptr;
  ResNet model_{nullptr};
  std::vector<int> split_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::unique_ptr<DeviceWorkers> workers_;
  // Timed steps only (the first --warmup steps are excluded).
  int64_t steps_ = 0, timed_steps_ = 0;
  double wall_ms_ = 0;
  std::vector<double> busy_ms_;
};

}  // namespace

std::unique_ptr<Strategy> MakePipelineStrategy(bool pipelined) {
  return std::make_unique<PipelineStrategy>(pipelined);
}

}  // namespace ddpbench
