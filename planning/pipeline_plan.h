// The pure side of pmp's pipeline shape (strategies/pipeline/pipeline_shape.h
// measures and chooses): whether a run measures its split, a model's half
// blocks counted as whole blocks, a split's step on ideal devices, the
// fastest split of measured units, and the micro-batch counts to try.
// Torch-free, so that the step model (projection/) costs a pipeline with the
// same arithmetic as pmp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planning/schedules.h"
#include "planning/stage_split.h"

namespace ddpbench {

struct RunConfig;

// The split is the measured one: no --split, --balance=time.
bool SplitMeasured(const RunConfig& config);

// True when pmp chooses the units itself: --units=auto with SplitMeasured.
// Setup then builds the model in half blocks for ChoosePipelineShape, and
// again in blocks if its plan counts whole blocks.
bool UnitsOpen(const RunConfig& config);

// Whether pmp re-splits after the warm-up (rebalance.h): --rebalance=warmup,
// or auto (the default) with one chunk per device (`virtual_stages` 1); and
// either way SplitMeasured and at least 2 warm-up steps. With interleaving a device's chunks interfere (on the 2-core
// VM a device's second chunk ran 0.9-2.1x its set-up sum), so a chunk's
// in-run time is no measure of its units, and re-splitting did not pay there
// (results/cpu-2core/pipelines/cpu-2core-rebalance-ab.csv).
bool RebalanceApplies(const RunConfig& config, int virtual_stages);

// Each unit's block, numbered from 0 in order: a half-block model's
// "layer3.1a" and "layer3.1b" are one block; every other unit (the stem, the
// head, a whole block) is its own.
std::vector<int> BlockOfUnit(const std::vector<std::string>& unit_names);

// The names of the blocks of BlockOfUnit ("layer3.1" for "layer3.1a" and
// "layer3.1b"): a whole-block model's unit names.
std::vector<std::string> WholeBlockNames(const std::vector<std::string>& unit_names);

// A split counted in whole blocks (BlockOfUnit's blocks) as the same cuts
// counted in the units of `unit_names` (each half-block block is 2 units).
std::vector<int> SplitInUnits(const std::vector<int>& block_counts, const std::vector<std::string>& unit_names);

// Times of half-block units summed per block (BlockOfUnit): the times of the
// same model's units built in whole blocks.
UnitTimes MergeHalfBlocks(const UnitTimes& halves, const std::vector<std::string>& unit_names);

// The step of `table` on ideal devices with chunk times from `plan` (forward
// measured; backward = the rest; a split backward's B and W as halves, the
// first chunk's all W).
double PredictStepMs(const PipelineTable& table, const StagePlan& plan);

// The split of the measured units into the table's chunks whose simulated
// step (PredictStepMs) is shortest: every contiguous split is tried, except
// those where one device's busy time alone (M x its chunks' times) already
// exceeds the best step found. Starts from BalanceSplit (the slowest chunk
// as fast as possible) and keeps it unless another is strictly faster: with
// V chunks a device, or a first chunk whose forward the others wait for, the
// slowest chunk is not what sets the step.
std::vector<int> FastestSplit(const PipelineTable& table, const UnitTimes& measured);

// The micro-batch counts tried when --chunks is not given: 1 (the whole
// batch through the stages one after another, as mp runs it), then the
// divisors of the batch from the device count up, in increasing order, each
// leaving micro-batches of at least `fewest_images` (FewestTrainingImages).
std::vector<int> MicroBatchCandidates(int64_t batch_size, int devices, int64_t fewest_images = 1);

// A pipeline shape pmp can run: a schedule with `virtual_stages` chunks per
// device at `micro_batches`.
struct ShapeOption {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int virtual_stages = 1;
  int micro_batches = 1;
};

// The schedules to cost at `micro_batches` on a model of `units` units: the
// given one (--chunks or --schedule given: the configured schedule), or,
// simplest first, 1f1b, zero-bubble, zbv and dualpipev (two chunks a device
// in a V), then interleaved, interleaved-zero-bubble and looped-bfs with
// every V the units allow (at least one unit per chunk); each only where the
// micro-batch count suits it (groups of the device count, its minimum). A
// given --split fixes the chunk count.
std::vector<ShapeOption> ScheduleOptions(const RunConfig& config, int devices, int micro_batches, int units);

// Which of the candidates, costed in the order given (simplest first: fewer
// micro-batches, then fewer chunks), pmp runs: the first, replaced by a
// later one only when that is predicted faster than the one kept by more
// than `margin` (a fraction), as the predictions come from short, noisy
// set-up timings and leave out what each extra micro-batch and chunk
// boundary adds (a hand-off, a call). An infinite prediction (a deadlock)
// is never kept over a finite one. Throws on an empty list.
size_t ChooseShape(const std::vector<double>& predicted_ms, double margin);

// Which costed candidates (simplest first, as ChooseShape takes them) pmp
// runs for a few steps before it commits, in that order: the one
// ChooseShape(predicted_ms, margin) picks, the `best` fastest predicted, and the fastest predicted
// of each group in `simple` (indices of shapes a choice must beat: mp's one
// micro-batch, plain 1F1B). Deadlocked (infinite) predictions are left out;
// with a single finite candidate there is nothing to try (empty).
std::vector<size_t> ShapesToTry(const std::vector<double>& predicted_ms, double margin, int best,
                                const std::vector<std::vector<size_t>>& simple);

}  // namespace ddpbench
