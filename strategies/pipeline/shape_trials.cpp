#include "strategies/pipeline/shape_trials.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"
#include "harness/phase.h"
#include "planning/stage_split.h"
#include "strategies/pipeline/pipeline.h"

namespace ddpbench {
namespace {

constexpr int kWarmRounds = 1;  // first touch, allocator growth
// Timed rounds (the median of each shape's): as many as fit in about
// kTrialMs of predicted steps, within these bounds.
constexpr int kFewestRounds = 3, kMostRounds = 9;
constexpr double kTrialMs = 2000;
constexpr double kMeasuredMargin = 0.03;  // a more complex shape must measure this much faster

// One batch of the run's size and image shape, every label a class.
Batch TrialBatch(const RunContext& ctx) {
  const RunConfig& c = *ctx.config;
  const int64_t size = RunImageSize(c);
  Batch b;
  b.images = torch::full({c.batch_size, ctx.model.in_channels, size, size}, 0.5, torch::dtype(ctx.model.dtype));
  b.labels = torch::arange(c.batch_size, torch::kLong).remainder(ctx.model.num_classes);
  return b;
}

std::string ShapeName(const PipelineShape& s) {
  return fmt::format("--chunks={} --schedule={}{} split {}{}", s.micro_batches, PipelineScheduleName(s.schedule),
                     IsInterleaved(s.schedule) ? fmt::format(" --virtual-stages={}", s.virtual_stages) : "",
                     SplitCounts(s.plan.counts), s.half_blocks ? " (half blocks)" : "");
}

// The random state of every generator the trials' model builds re-seed.
class RandomStateKept {
 public:
  explicit RandomStateKept(const std::vector<torch::Device>& devices) {
    Keep(at::globalContext().defaultGenerator(torch::kCPU));
    for (const torch::Device& d : devices)
      if (d.is_cuda()) Keep(at::globalContext().defaultGenerator(d));
  }
  ~RandomStateKept() {
    for (auto& [gen, state] : kept_) gen.set_state(state);
  }

 private:
  void Keep(at::Generator gen) { kept_.emplace_back(gen, gen.get_state()); }
  std::vector<std::pair<at::Generator, at::Tensor>> kept_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median step ms of each shape, all built at once and run
// one step each per round (so a slow minute falls on all of them alike).
std::vector<double> TimeTrials(const RunContext& ctx, const std::vector<PipelineShape>& shapes) {
  RunConfig config = *ctx.config;
  config.warmup = std::numeric_limits<int64_t>::max();  // no step timed, none re-split
  PhaseTimer timer(ctx.devices.front());
  RunContext trial_ctx = ctx;
  trial_ctx.config = &config;
  trial_ctx.timer = &timer;
  std::vector<std::unique_ptr<Strategy>> pipes;
  for (const PipelineShape& shape : shapes) {
    pipes.push_back(MakePipelineStrategy(/*pipelined=*/true, &shape));
    pipes.back()->Setup(trial_ctx);
  }
  const Batch batch = TrialBatch(ctx);
  double round_ms = 0;
  for (const PipelineShape& shape : shapes) round_ms += shape.predicted_ms;
  const int timed = std::clamp(static_cast<int>(kTrialMs / std::max(round_ms, 1e-3)), kFewestRounds, kMostRounds);
  std::vector<std::vector<double>> ms(pipes.size());
  for (int round = 0; round < kWarmRounds + timed; ++round)
    for (size_t k = 0; k < pipes.size(); ++k) {
      const size_t p = round % 2 == 0 ? k : pipes.size() - 1 - k;  // the order alternates
      const auto t0 = std::chrono::steady_clock::now();
      pipes[p]->Step(batch);
      for (const torch::Device& d : ctx.devices)  // every stream of the device, the workers' own included
        if (d.is_cuda()) torch::cuda::synchronize(d.index());
      const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (round >= kWarmRounds) ms[p].push_back(step_ms);
    }
  std::vector<double> medians;
  for (const auto& m : ms) medians.push_back(Median(m));
  return medians;
}

}  // namespace

PipelineShape PickByTrials(const RunContext& ctx, const ResNet& model, const ShapeChoice& choice) {
  if (choice.to_try.empty()) return FinishShape(*ctx.config, model, choice, choice.chosen);
  std::vector<PipelineShape> shapes;  // simplest first, whole blocks before half
  for (size_t i : choice.to_try) {
    PipelineShape finished = FinishShape(*ctx.config, model, choice, i, /*quiet=*/true);
    if (finished.half_blocks != choice.costed[i].half_blocks) shapes.push_back(choice.costed[i]);
    shapes.push_back(std::move(finished));
  }
  std::vector<double> measured;
  {
    RandomStateKept kept(ctx.devices);
    measured = TimeTrials(ctx, shapes);
  }
  const size_t pick = ChooseShape(measured, kMeasuredMargin);
  for (size_t k = 0; k < measured.size(); ++k)
    LogInfo("pmp trial: {}: predicted {:.1f} ms, measured {:.1f} ms{}", ShapeName(shapes[k]), shapes[k].predicted_ms,
            measured[k], k == pick ? " (kept)" : "");
  return std::move(shapes[pick]);
}

}  // namespace ddpbench
