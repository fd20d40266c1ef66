// Google Benchmark: what cutting a pipeline stage's backward into B and W
// (zero-bubble schedules, strategies/pipeline/split_backward.h) costs against one
// whole backward of the same stage. Zero-bubble pays off only when B + W is
// about one backward; every extra millisecond lands on the stage's busy time.
// One iteration is one micro-batch's forward plus its backward (whole, or B
// then W); ResNet-18 at 64 px as in the pipeline benchmarks' workload, one CPU thread.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <chrono>
#include <vector>

#include "harness/memory.h"
#include "models/resnet.h"
#include "strategies/pipeline/split_backward.h"

namespace ddpbench {
namespace {

// Units [first, 10) of ResNet-18 (10 units: stem, 8 blocks, head), the input
// they take and an output gradient of the right shape.
struct Stage {
  std::vector<torch::nn::AnyModule> units;
  std::vector<torch::Tensor> params;
  torch::Tensor input, labels;
};

Stage MakeStage(int first, int64_t batch) {
  torch::manual_seed(0);
  ResNetOptions o;
  o.num_classes = 10;
  ResNet model(o);
  Stage s;
  std::vector<torch::nn::AnyModule> all(model->units()->begin(), model->units()->end());
  torch::Tensor x = torch::randn({batch, 3, 64, 64});
  {
    torch::NoGradGuard no_grad;
    for (int u = 0; u < first; ++u) x = all[u].forward(x);
  }
  for (size_t u = first; u < all.size(); ++u) {
    s.units.push_back(all[u]);
    for (auto& p : all[u].ptr()->parameters()) s.params.push_back(p);
  }
  s.input = x;
  s.labels = torch::randint(0, 10, {batch});
  return s;
}

// state.range(0): first unit of the stage; range(1): micro-batch size;
// range(2): 0 for one backward, 1 for B then W, 2 for B then the previous
// micro-batch's W (ZB-H1's order on the last stage). Each shape's modes are
// registered one after the other, so a noisy minute hits them alike.
void BM_StageBackward(benchmark::State& state) {
  at::set_num_threads(1);
  ConfigureCpuMalloc("reuse");  // ddpbench's default: freed memory is kept, not faulted in again
  const int mode = static_cast<int>(state.range(2));
  const int first = static_cast<int>(state.range(0));
  Stage s = MakeStage(first, state.range(1));
  std::shared_ptr<WeightGradWork> waiting;  // mode 2: the previous micro-batch's W
  double ms[3] = {0, 0, 0};                  // forward, backward (or B), W
  auto timed = [&](int k, auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms[k] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto step = [&] {
    torch::Tensor in = s.input.detach().requires_grad_(first > 0);
    torch::Tensor y = in;
    timed(0, [&] {
      for (auto& u : s.units) y = u.forward(y);
      y = torch::nn::functional::cross_entropy(y, s.labels);
    });
    if (mode == 0) return timed(1, [&] { y.backward(); });
    BackwardInputResult b;
    timed(1, [&] { b = BackwardInput(y, torch::Tensor(), in, s.params); });
    if (mode == 2) std::swap(waiting, b.weight);
    if (b.weight) timed(2, [&] { BackwardWeight(*b.weight); });
  };
  for (int i = 0; i < 2; ++i) step();
  ms[0] = ms[1] = ms[2] = 0;
  for (auto _ : state) step();
  state.SetItemsProcessed(state.iterations() * state.range(1));
  const double n = static_cast<double>(state.iterations());
  state.counters["F_ms"] = ms[0] / n;
  state.counters["B_ms"] = ms[1] / n;  // the whole backward in mode 0
  state.counters["W_ms"] = ms[2] / n;
}

BENCHMARK(BM_StageBackward)
    ->ArgNames({"first_unit", "micro_batch", "split"})
    ->Args({7, 4, 0})->Args({7, 4, 1})->Args({7, 4, 2})
    ->Args({5, 16, 0})->Args({5, 16, 1})->Args({5, 16, 2})
    ->Args({1, 16, 0})->Args({1, 16, 1})->Args({1, 16, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace
}  // namespace ddpbench
