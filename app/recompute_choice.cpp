// Which units a run recomputes (recompute_choice.h).
#include "app/recompute_choice.h"

#include <torch/torch.h>

#include <algorithm>

#include <fmt/format.h>

#include "app/memory_fit.h"
#include "base/config.h"
#include "base/log.h"
#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "harness/memory.h"
#include "harness/training.h"
#include "models/resnet.h"
#include "planning/recompute_plan.h"
#include "strategies/device_workers.h"
#include "strategies/pipeline/stages.h"

namespace ddpbench {

namespace {

std::vector<std::string> Marked(const std::vector<bool>& flags, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (size_t u = 0; u < names.size(); ++u)
    if (flags[u]) out.push_back(names[u]);
  return out;
}

constexpr double kMiB = 1024.0 * 1024.0;

// The budget one device's memory must fit, in bytes.
double BudgetBytes(const RunConfig& config, torch::Device device, std::string* from) {
  if (config.memory_budget_mb > 0) {
    *from = "--memory-budget-mb";
    return static_cast<double>(config.memory_budget_mb) * kMiB;
  }
  if (device.is_cuda()) {
    *from = "the GPU's memory";
    return CudaTotalBytes(device.index());
  }
  if (config.cpu_device_memory_mb > 0) {
    *from = "--cpu-device-memory-mb";
    return static_cast<double>(config.cpu_device_memory_mb) * kMiB;
  }
  throw ConfigError("--recompute=auto on CPU devices: no budget to fit; accepted: --memory-budget-mb=M or "
                    "--cpu-device-memory-mb=M (MiB), or a list for --recompute");
}

// Per unit, at `batch` images: bytes kept from forward to backward and the
// output's (measured on `probe` images and scaled), and the forward's ms
// (with its graph, as the recomputation runs it).
std::vector<UnitActivation> MeasureActivations(const RunConfig& config, ResNetOptions model, torch::Device device,
                                               int64_t batch) {
  model.recompute.clear();
  const int64_t probe = std::min<int64_t>(batch, 4);
  ResNet net = BuildModel(model, config.seed, device);
  net->train();
  const int64_t size = RunImageSize(config);
  std::vector<UnitActivation> units;
  {
    torch::Tensor x = torch::randn({probe, model.in_channels, size, size}).to(device, model.dtype);
    std::vector<torch::Tensor> keep;  // every output stays alive, as in a real forward
    for (auto& unit : *net->units()) {
      WaitForCurrentStream(device);
      const int64_t before = AllocatedBytesNow(device, 0);
      x = unit.forward(x);
      WaitForCurrentStream(device);
      const double kept = static_cast<double>(std::max<int64_t>(0, AllocatedBytesNow(device, 0) - before));
      const double out = static_cast<double>(x.numel() * x.element_size());
      units.push_back({kept / static_cast<double>(probe) * static_cast<double>(batch),
                       out / static_cast<double>(probe) * static_cast<double>(batch), 0});
      keep.push_back(x);
    }
  }
  // One unit's activations at a time: no more than the plan's own transient.
  const UnitTimes times = MeasureUnits(config, net, {batch}).front();
  for (size_t u = 0; u < units.size(); ++u) units[u].forward_ms = times.forward_ms[u];
  return units;
}

// Rank 0's plan on every rank.
std::vector<bool> FromRankZero(DistContext& dist, const std::vector<bool>& plan) {
  if (dist.world == 1) return plan;
  torch::Tensor t = torch::zeros({static_cast<int64_t>(plan.size())}, torch::TensorOptions().dtype(torch::kInt).device(dist.device));
  if (dist.is_root())
    for (size_t u = 0; u < plan.size(); ++u) t[static_cast<int64_t>(u)] = plan[u] ? 1 : 0;
  dist.BroadcastFrom(0, {t}, "recompute plan");
  const torch::Tensor cpu = t.to(torch::kCPU);
  std::vector<bool> out;
  for (int64_t u = 0; u < cpu.numel(); ++u) out.push_back(cpu[u].item<int>() != 0);
  return out;
}

}  // namespace

std::vector<std::string> ChooseRecompute(const RunConfig& config, const ResNetOptions& model, torch::Device device,
                                         const StrategyTraits& info, int shard_world, DistContext& dist) {
  if (info.family == Family::kPipeline)
    throw ConfigError(fmt::format("--recompute=auto with --strategy={}: choosing the units of each pipeline stage "
                                  "under a budget is not built; accepted: a list (--recompute=all, blocks, "
                                  "layer3, ...), or a data-parallel or sharded strategy", config.strategy));
  std::string from;
  const double budget = BudgetBytes(config, device, &from);
  const int64_t batch = config.batch_size / std::max<int64_t>(1, config.grad_accum);  // what one forward holds
  const int64_t size = RunImageSize(config);
  const DeviceDemand demand = EstimateDeviceDemand(model, size, size, batch, config.optimizer, config.momentum,
                                                   info.zero_stage, shard_world, 1);
  const std::vector<std::string> names = ResNetUnitNames(model);
  // What else the device holds beside the activations: model state, the
  // batch, and 5% of the budget kept free.
  const double batch_bytes = static_cast<double>(batch * model.in_channels * size * size) * 4;
  const double other = demand.state_bytes + batch_bytes + 0.05 * budget;
  std::vector<bool> plan;
  if (dist.is_root() || dist.world == 1) {
    const std::vector<UnitActivation> units = MeasureActivations(config, model, device, batch);
    const RecomputePlan chosen = PlanRecompute(units, budget - other);
    const double without = RecomputePeakBytes(units, {});
    plan = chosen.recompute;
    LogInfo("recompute plan (--recompute=auto, {} {:.1f} MiB: model state and batch {:.1f}, activations {:.1f} "
            "without recompute): {}; activations {:.1f} MiB, forward run again {:.2f} ms a step{}",
            from, budget / kMiB, other / kMiB, without / kMiB, DescribeRecompute(plan, names),
            chosen.peak_bytes / kMiB, chosen.added_ms,
            chosen.fits ? "" : " (does not fit even so: every unit recomputed)");
  } else {
    plan.assign(names.size(), false);
  }
  return Marked(FromRankZero(dist, plan), names);
}

std::vector<std::string> RecomputeNames(const RunConfig& config, const ResNetOptions& model) {
  if (config.recompute == "none" || config.recompute == "auto") return {};  // auto: ChooseRecompute
  const std::vector<std::string> names = ResNetUnitNames(model);
  try {
    return Marked(ParseRecompute(config.recompute, names), names);
  } catch (const ConfigError&) {
    if (model.half_blocks) throw;
    ResNetOptions halved = model;
    halved.half_blocks = true;  // a half's name
    const std::vector<std::string> halves = ResNetUnitNames(halved);
    try {
      return Marked(ParseRecompute(config.recompute, halves), halves);
    } catch (const ConfigError&) {
    }
    throw;
  }
}

std::string DescribeRunRecompute(const ResNetOptions& model) {
  return DescribeRecompute(RecomputedUnits(model), ResNetUnitNames(model));
}

double HardwareFlopsPerImage(const ResNetOptions& model, int64_t height, int64_t width) {
  const std::vector<double> macs = ResNetUnitForwardMacs(model, height, width);
  const std::vector<bool> marked = RecomputedUnits(model);
  double total = 0, again = 0;
  for (size_t u = 0; u < macs.size(); ++u) {
    total += macs[u];
    if (u < marked.size() && marked[u]) again += macs[u];
  }
  return 2.0 * (3.0 * total + again);
}

}  // namespace ddpbench
