// Which units a run recomputes (--recompute): the flag's list read against
// the model, and what the row says about it (the units, and the FLOPs the
// hardware runs, the recomputed forwards included, beside the model's).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "planning/traits.h"

namespace ddpbench {

struct DistContext;
struct ResNetOptions;
struct RunConfig;

// The unit and block names --recompute marks on `model` (ResNetOptions::
// recompute): a list is read against the model's units, and against its
// half blocks when it names one (pmp may cut blocks in halves). ConfigError
// naming the bad item otherwise. "none": empty.
std::vector<std::string> RecomputeNames(const RunConfig& config, const ResNetOptions& model);

// --recompute=auto: the units to recompute so that one device's activations
// fit what the budget (--memory-budget-mb, else the device's capacity: a
// GPU's memory, --cpu-device-memory-mb) leaves after the model state of the
// strategy (the ZeRO formula over `shard_world` ranks), the batch and the
// gradient buckets, at the least added forward time (PlanRecompute). Each
// unit's activation and output bytes are measured on `device` with a few
// images and scaled to the device's batch, its forward time at that batch
// (one unit's activations at a time);
// rank 0 chooses for every rank. Logs the plan. ConfigError when there is
// no budget, or on a pipeline (its stages' plans are not built).
std::vector<std::string> ChooseRecompute(const RunConfig& config, const ResNetOptions& model, torch::Device device,
                                         const StrategyTraits& info, int shard_world, DistContext& dist);

// The row's recompute column: "none", "all", or the names joined by ';'.
std::string DescribeRunRecompute(const ResNetOptions& model);

// Training FLOPs of one image as the hardware runs them: the model's three
// forward passes, and one more of every recomputed unit.
double HardwareFlopsPerImage(const ResNetOptions& model, int64_t height, int64_t width);

}  // namespace ddpbench
