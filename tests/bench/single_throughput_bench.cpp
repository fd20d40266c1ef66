// Google Benchmark: single-device training-step throughput over batch sizes,
// through the same Strategy code the harness times. One benchmark iteration is
// one full training step (forward, backward, SGD step); items/s is images/s.
// The context block carries the command line, LibTorch version and CPU model
// so a committed JSON says what produced it.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <string>

#include "base/config.h"
#include "harness/context.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "strategies/registry.h"

namespace ddpbench {
namespace {

void BM_SingleStep(benchmark::State& state, int depth, int64_t width, int64_t image_size) {
  at::set_num_threads(1);  // one logical CPU device, as ddpbench's default
  RunConfig config;
  config.strategy = "single";
  ResNetOptions model;
  model.depth = depth;
  model.num_classes = 10;
  model.small_input = image_size <= 64;
  model.width = width;
  DistContext dist;
  PhaseTimer timer(torch::kCPU);
  RunContext ctx;
  ctx.config = &config;
  ctx.dist = &dist;
  ctx.devices = {torch::kCPU};
  ctx.model = model;
  ctx.lr = 0.01;
  ctx.timer = &timer;
  auto strategy = FindStrategy("single").make();
  strategy->Setup(ctx);
  const int64_t batch = state.range(0);
  torch::manual_seed(0);
  Batch data{torch::randn({batch, 3, image_size, image_size}), torch::randint(0, 10, {batch})};
  for (int i = 0; i < 2; ++i) strategy->Step(data);  // warm-up outside the timing
  for (auto _ : state) {
    auto result = strategy->Step(data);
    benchmark::DoNotOptimize(result.loss.item<float>());
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["batch"] = static_cast<double>(batch);
}

BENCHMARK_CAPTURE(BM_SingleStep, resnet18_w64_32px, 18, 64, 32)
    ->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(128)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace
}  // namespace ddpbench

int main(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + ddpbench::ShellQuote(argv[i]);
  benchmark::AddCustomContext("command", command);
  benchmark::AddCustomContext("torch_version", TORCH_VERSION);
  benchmark::AddCustomContext("git_sha", ddpbench::kGitSha);
  benchmark::AddCustomContext("cpu_model", ddpbench::DescribeEnvironment(false).cpu_model);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
