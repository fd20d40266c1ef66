// Units placed on devices, and moved when pmp re-splits after the warm-up.
#include "strategies/pipeline/placement.h"

#include <torch/torch.h>

#include <cstdlib>

#include "base/config.h"
#include "base/log.h"
#include "harness/memory.h"
#include "harness/state_map.h"
#include "harness/training.h"
#include "strategies/pipeline/figures.h"
#include "strategies/pipeline/rebalance.h"

namespace ddpbench::pipeline {
namespace {

// How much faster the re-balanced split must be predicted to be (rebalance.h).
constexpr double kRebalanceMargin = 0.03;

// --stage-ranks: the units other ranks run stay here only as host copies
// (of the seed's weights; GatherUnitParameters refreshes them), charged to no
// device.
void MoveOthersToHost(Engine& e, const std::vector<int>& chunk_of) {
  CpuDeviceScope host(-1);
  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < chunk_of.size(); ++u) {
    const int d = e.table.DeviceOf(chunk_of[u]);
    if (e.Local(d) || e.unit_device[u] == d) continue;
    auto& module = *e.model->units()->ptr(u);
    for (auto& p : module.parameters()) p.set_data(p.data().to(torch::kCPU).clone());
    for (auto& b : module.buffers()) b.set_data(b.data().to(torch::kCPU).clone());
    e.unit_device[u] = d;
  }
}

// Device d's units moved onto it (those whose device changed), and its
// chunks' parameters gathered for its optimizer.
void PlaceOnDevice(Engine& e, int d, const std::vector<int>& chunk_of) {
  Device& dev = *e.devices[d];
  torch::NoGradGuard no_grad;
  dev.params.clear();
  for (size_t u = 0; u < chunk_of.size(); ++u) {
    if (e.table.DeviceOf(chunk_of[u]) != d || e.unit_device[u] == d) continue;
    auto& module = *e.model->units()->ptr(u);
    if (dev.device.is_cpu()) {
      for (auto& p : module.parameters()) p.set_data(p.data().clone());
      for (auto& b : module.buffers()) b.set_data(b.data().clone());
    } else {
      module.to(dev.device);
    }
    e.unit_device[u] = d;
  }
  for (int c = 0; c < e.table.chunks(); ++c) {
    if (e.table.DeviceOf(c) != d) continue;
    Chunk& ch = *e.chunks[c];
    ch.params.clear();
    for (auto& u : ch.units)
      for (auto& p : u.ptr()->parameters()) ch.params.push_back(p);
    dev.params.insert(dev.params.end(), ch.params.begin(), ch.params.end());
  }
  dev.optimizer = MakeOptimizer(*e.config, dev.params, e.lr);
  WaitForCurrentStream(dev.device);
}

}  // namespace

void PlaceUnits(Engine& e, const std::vector<int>& counts) {
  auto unit = e.model->units()->begin();
  std::vector<int> chunk_of;
  for (int c = 0; c < e.table.chunks(); ++c) {
    e.chunks[c]->units.clear();
    for (int i = 0; i < counts[c]; ++i, ++unit) {
      e.chunks[c]->units.push_back(*unit);
      chunk_of.push_back(c);
    }
  }
  e.RunLocal([&](int d) { PlaceOnDevice(e, d, chunk_of); });
  if (e.ranks) MoveOthersToHost(e, chunk_of);
}

void Rebalance(Engine& e, int64_t step) {
  // Warm-up steps 1..step, M micro-batches each.
  const ChunkTimes in_run = PerMicroBatch(e, /*warmup=*/true, static_cast<double>(step) * e.table.micro_batches);
  RebalancePlan r = RebalanceSplit(e.table, e.plan, in_run, kRebalanceMargin);
  if (const char* forced = std::getenv("DDPBENCH_TEST_REBALANCE_SPLIT")) {  // tests: a move on demand
    r.counts = ParseSplit(forced, e.table.chunks(), e.model->unit_names());
    r.changed = true;
  }
  std::vector<double> measured;
  for (size_t c = 0; c < in_run.forward.size(); ++c)
    measured.push_back(in_run.forward[c] + in_run.backward_input[c] + in_run.backward_weight[c]);
  LogInfo("pmp rebalance: warm-up chunk ms {} against set-up {}; split {} predicted {:.1f} ms, {} {:.1f} ms: {}",
          Joined(measured, "{:.2f}"), Joined(e.plan.stage_ms, "{:.2f}"), SplitCounts(e.plan.counts), r.current_ms,
          SplitCounts(r.counts), r.best_ms, r.changed ? "moving units" : "kept");
  if (!r.changed) return;
  TensorMap state;
  for (auto& dev : e.devices)
    SaveOptimizer(state, "optim.", *dev->optimizer, ParameterNames(*dev->optimizer, *e.model));
  PlaceUnits(e, r.counts);
  StateReader reader(state);
  for (size_t d = 0; d < e.devices.size(); ++d)
    e.workers->Run(static_cast<int>(d), [&] {
      Device& dev = *e.devices[d];
      reader.LoadOptimizer("optim.", *dev.optimizer, ParameterNames(*dev.optimizer, *e.model));
      WaitForCurrentStream(dev.device);
    });
  reader.Finish();
  e.plan.counts = r.counts;
  e.plan.stage_ms = StageTimes(r.counts, e.plan.unit_ms);
}

}  // namespace ddpbench::pipeline
