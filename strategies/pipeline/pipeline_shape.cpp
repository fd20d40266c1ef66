#include "strategies/pipeline/pipeline_shape.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"

namespace ddpbench {
namespace {

constexpr double kMargin = 0.05;

// The given flags checked before anything is measured: the stage count and
// --split against the model (ConfigError otherwise).
void CheckGivenShape(const RunConfig& config, const std::vector<std::string>& names, int devices) {
  // 2S micro-batches: a count every schedule takes (dualpipev needs 2S, the interleaved ones multiples of S).
  const auto candidates = ScheduleOptions(config, devices, 2 * devices, static_cast<int>(names.size()));
  const int V = candidates.size() == 1 ? candidates.front().virtual_stages : 1;
  const auto units = static_cast<int>(names.size());
  if (candidates.size() == 1 && IsVShaped(candidates.front().schedule) && 2 * devices > units)
    throw ConfigError(fmt::format("--schedule={}: places 2 chunks per device in a V: --gpus={} x 2 = {} model chunks, "
                                  "but the model has only {} units; accepted: --gpus<={}", config.schedule, devices,
                                  2 * devices, units, units / 2));
  CheckStageCount(config.strategy, devices, names, V);
  if (!config.split.empty() && candidates.size() <= 1)
    ParseSplit(config.split, devices * V, names,
               V > 1 ? fmt::format("--gpus={} x --virtual-stages={}", devices, V) : "");
}

// A candidate's plan on the measured units, and with UnitsOpen on whole
// blocks: the plan with the shorter predicted step, whole blocks unless half
// blocks are clearly (kMargin) faster. DDPBENCH_TEST_AUTO_UNITS (blocks|
// half-blocks) forces the choice for tests.
struct CostedPlan {
  StagePlan plan;
  double ms = 0;
  bool half_blocks = false;
  std::string other;  // for the log: the units not taken, their split and step
};
CostedPlan PlanCandidate(const RunConfig& config, const ResNet& model, const PipelineTable& table,
                         const UnitTimes& measured, const UnitTimes* blocks) {
  const int devices = table.devices, V = table.virtual_stages;
  CostedPlan fine{PlanStages(config, model, devices, V, measured), 0, model->options().half_blocks, {}};
  if (SplitMeasured(config)) fine.plan = PlanOfSplit(FastestSplit(table, measured), measured);
  fine.ms = PredictStepMs(table, fine.plan);
  if (blocks == nullptr || table.chunks() > static_cast<int>(blocks->total_ms.size())) return fine;
  CostedPlan coarse{PlanOfSplit(FastestSplit(table, *blocks), *blocks), 0, false, {}};
  coarse.ms = PredictStepMs(table, coarse.plan);
  const char* forced = std::getenv("DDPBENCH_TEST_AUTO_UNITS");
  const bool take_fine = forced != nullptr ? std::string(forced) == "half-blocks" : fine.ms < coarse.ms * (1 - kMargin);
  CostedPlan& taken = take_fine ? fine : coarse;
  const CostedPlan& other = take_fine ? coarse : fine;
  taken.other = fmt::format("; {} {}: {:.1f} ms", other.half_blocks ? "half blocks" : "whole blocks",
                            SplitCounts(other.plan.counts), other.ms);
  return std::move(taken);
}

}  // namespace

ShapeChoice CostPipelineShapes(const RunConfig& config, const ResNet& model, int devices, int measure_threads) {
  // --units=auto accepts the shapes whole blocks can make (the same checks,
  // messages and candidates as --units=blocks); half blocks only refine them.
  const bool choose_units = UnitsOpen(config) && model->options().half_blocks;
  const std::vector<std::string> names = choose_units ? WholeBlockNames(model->unit_names()) : model->unit_names();
  CheckGivenShape(config, names, devices);
  const int units = static_cast<int>(names.size());
  const bool open = config.chunks <= 0 || config.given.count("--schedule") == 0;
  const int64_t image_size = RunImageSize(config);  // a dataset's native size: opens the dataset
  const int64_t fewest = FewestTrainingImages(config, image_size);
  std::vector<int> counts = config.chunks > 0 ? std::vector<int>{static_cast<int>(config.chunks)}
                                              : MicroBatchCandidates(config.batch_size, devices, fewest);
  if (counts.empty() && config.batch_size < devices)  // too small for any schedule: said below
    counts = MicroBatchCandidates(config.batch_size, devices);
  if (counts.empty())
    throw ConfigError(fmt::format("--batch-size={}: even the whole batch as one micro-batch leaves batch norm fewer "
                                  "than its {} images at {} px; accepted: --batch-size>={}, or --norm=group",
                                  config.batch_size, fewest, image_size, fewest));
  // Every micro-batch size that some schedule accepts, measured together in
  // interleaved rounds (the shapes are compared on times taken side by
  // side), and on CPU logical devices on every device's share of the
  // machine at once, as the pipeline will run them.
  std::vector<std::pair<int, std::vector<ShapeOption>>> by_count;  // micro-batches, their schedules
  std::vector<int64_t> micro_batch_sizes;
  ShapeChoice choice;
  for (int M : counts) {
    auto candidates = ScheduleOptions(config, devices, M, units);
    if (candidates.empty()) continue;
    by_count.emplace_back(M, std::move(candidates));
    micro_batch_sizes.push_back(config.batch_size / M);
  }
  choice.measured = by_count.empty() ? std::vector<UnitTimes>{} : MeasureUnits(config, model, micro_batch_sizes,
                                                                            measure_threads > 0 ? measure_threads : devices);
  // Every candidate costed, simplest first; ChooseShape keeps a more complex
  // one only where it is predicted clearly (kMargin) faster.
  std::vector<double> predicted;
  // The simple shapes a trial checks the choice against: mp's, plain 1F1B,
  // and ZB-V (two chunks a device, two boundaries: few hand-offs).
  std::vector<size_t> one_micro_batch, plain_1f1b, zbv;
  for (size_t i = 0; i < by_count.size(); ++i) {
    const auto& [M, candidates] = by_count[i];
    const UnitTimes& measured = choice.measured[i];
    const UnitTimes blocks = choose_units ? MergeHalfBlocks(measured, model->unit_names()) : UnitTimes{};
    for (const ShapeOption& c : candidates) {
      const PipelineTable table = BuildPipelineTable(c.schedule, devices, c.virtual_stages, M);
      CostedPlan costed = PlanCandidate(config, model, table, measured, choose_units ? &blocks : nullptr);
      if (open || choose_units)
        LogInfo("pmp shape: --chunks={} --schedule={}{} split {}{}: predicted step {:.1f} ms{}", M,
                PipelineScheduleName(c.schedule),
                IsInterleaved(c.schedule) ? fmt::format(" --virtual-stages={}", c.virtual_stages) : "",
                SplitCounts(costed.plan.counts), costed.half_blocks ? " (half blocks)" : "", costed.ms, costed.other);
      if (c.schedule == PipelineSchedule::k1F1B) (M == 1 ? one_micro_batch : plain_1f1b).push_back(predicted.size());
      if (c.schedule == PipelineSchedule::kZeroBubbleV) zbv.push_back(predicted.size());
      predicted.push_back(costed.ms);
      choice.costed.push_back({c.schedule, c.virtual_stages, M, std::move(costed.plan), costed.ms, costed.half_blocks});
      choice.count_of.push_back(i);
    }
  }
  if (choice.costed.empty())
    throw ConfigError(fmt::format("--schedule={}: needs at least {} micro-batches on --gpus={}, but --batch-size={} "
                                  "is too small; accepted: --batch-size>={}", config.schedule,
                                  MinMicroBatches(ParsePipelineSchedule(config.schedule), devices), devices,
                                  config.batch_size, MinMicroBatches(ParsePipelineSchedule(config.schedule), devices)));
  choice.chosen = ChooseShape(predicted, kMargin);
  if (config.shape_trials > 0)
    choice.to_try = ShapesToTry(predicted, kMargin, static_cast<int>(config.shape_trials), {one_micro_batch, plain_1f1b, zbv});
  return choice;
}

PipelineShape FinishShape(const RunConfig& config, const ResNet& model, const ShapeChoice& choice, size_t index,
                          bool quiet) {
  PipelineShape best = choice.costed.at(index);
  if (UnitsOpen(config) && model->options().half_blocks && !best.half_blocks &&
      RebalanceApplies(config, best.virtual_stages)) {
    // With ResNet-18 at 64 px no whole-block split evens 2 devices.
    best.plan = PlanOfSplit(SplitInUnits(best.plan.counts, model->unit_names()), choice.measured[choice.count_of[index]]);
    best.half_blocks = true;
    if (!quiet)
      LogInfo("pmp units: half blocks kept for --rebalance={} (cut between blocks until it re-splits)",
              config.rebalance);
  }
  return best;
}

PipelineShape ChoosePipelineShape(const RunConfig& config, const ResNet& model, int devices, int measure_threads) {
  const ShapeChoice choice = CostPipelineShapes(config, model, devices, measure_threads);
  return FinishShape(config, model, choice, choice.chosen);
}

}  // namespace ddpbench
