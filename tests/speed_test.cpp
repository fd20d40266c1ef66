// The speed features (memory format, TF32, fused optimizers, graphs) must not change what a step computes: the
// multi-tensor and fused optimizers equal torch::optim's per-parameter ones,
// channels-last weights and images give the same parameters as contiguous
// ones (float64), and the FLOP count behind MFU matches torchvision's
// published figures; --repeat's median and spread are the textbook ones;
// --cpu-malloc=reuse keeps freed tensor pages mapped; --overlap-optimizer's
// bucket-at-a-time steps equal one whole step.
#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>

#include "base/config.h"
#include "harness/memory.h"
#include "harness/mfu.h"
#include "harness/multi_tensor_optim.h"
#include "harness/partial_step.h"
#include "app/run_result.h"
#include "harness/training.h"
#include "models/resnet.h"

namespace ddpbench {
namespace {

// Parameters of mixed shapes (4-D, 2-D, 1-D) in float64, with fixed values.
std::vector<torch::Tensor> MakeParams() {
  torch::manual_seed(7);
  return {torch::randn({4, 3, 3, 3}, torch::kDouble), torch::randn({10, 6}, torch::kDouble),
          torch::randn({5}, torch::kDouble)};
}

std::vector<torch::Tensor> Clone(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.clone().set_requires_grad(true));
  return out;
}

// Five steps of `a` and `b` on the same gradients; returns the largest
// parameter difference.
double MaxDiffAfterSteps(torch::optim::Optimizer& a, std::vector<torch::Tensor>& pa, torch::optim::Optimizer& b,
                         std::vector<torch::Tensor>& pb) {
  torch::manual_seed(11);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < pa.size(); ++i) {
      auto g = torch::randn_like(pa[i]);
      pa[i].mutable_grad() = g.clone();
      pb[i].mutable_grad() = g.clone();
    }
    a.step();
    b.step();
  }
  double diff = 0;
  for (size_t i = 0; i < pa.size(); ++i) diff = std::max(diff, (pa[i] - pb[i]).abs().max().item<double>());
  return diff;
}

class MultiTensorOptimizer : public ::testing::TestWithParam<OptimizerKernels> {};

TEST_P(MultiTensorOptimizer, SgdMomentumWeightDecayEqualsPerParameter) {
  auto base = MakeParams();
  auto pa = Clone(base), pb = Clone(base);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-2);
  torch::optim::SGD reference(pa, options);
  MultiTensorSGD multi(pb, options, GetParam());
  EXPECT_LE(MaxDiffAfterSteps(reference, pa, multi, pb), 1e-12);
  EXPECT_DOUBLE_EQ(OptimizerStateMb(reference), OptimizerStateMb(multi));
}

TEST_P(MultiTensorOptimizer, PlainSgdEqualsPerParameter) {
  auto base = MakeParams();
  auto pa = Clone(base), pb = Clone(base);
  const auto options = torch::optim::SGDOptions(0.05);
  torch::optim::SGD reference(pa, options);
  MultiTensorSGD multi(pb, options, GetParam());
  EXPECT_LE(MaxDiffAfterSteps(reference, pa, multi, pb), 1e-12);
  EXPECT_EQ(OptimizerStateMb(multi), 0.0);
}

TEST_P(MultiTensorOptimizer, AdamWithWeightDecayEqualsPerParameter) {
  auto base = MakeParams();
  auto pa = Clone(base), pb = Clone(base);
  const auto options = torch::optim::AdamOptions(1e-2).weight_decay(1e-3);
  torch::optim::Adam reference(pa, options);
  MultiTensorAdam multi(pb, options, GetParam());
  EXPECT_LE(MaxDiffAfterSteps(reference, pa, multi, pb), 1e-12);
  EXPECT_DOUBLE_EQ(OptimizerStateMb(reference), OptimizerStateMb(multi));
}

INSTANTIATE_TEST_SUITE_P(Kernels, MultiTensorOptimizer,
                         ::testing::Values(OptimizerKernels::kForeach, OptimizerKernels::kFused),
                         [](const auto& info) { return info.param == OptimizerKernels::kFused ? "fused" : "foreach"; });

TEST(MultiTensorOptimizer, FusedSkipsTheStepWhenFoundInfIsSet) {
  auto params = Clone(MakeParams());
  const auto before = Clone(params);
  MultiTensorAdam adam(params, torch::optim::AdamOptions(1e-2), OptimizerKernels::kFused);
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  ASSERT_TRUE(adam.StepUnlessInf(torch::ones({1}, torch::kFloat)));
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
  ASSERT_TRUE(adam.StepUnlessInf(torch::zeros({1}, torch::kFloat)));
  EXPECT_FALSE(torch::equal(params[0], before[0]));
}

TEST(MultiTensorOptimizer, MakeOptimizerFollowsTheFlag) {
  RunConfig config;
  auto params = Clone(MakeParams());
  config.optimizer_impl = "foreach";
  EXPECT_NE(dynamic_cast<MultiTensorSGD*>(MakeOptimizer(config, params, 0.1).get()), nullptr);
  config.optimizer = "adam";
  config.optimizer_impl = "fused";
  EXPECT_NE(dynamic_cast<MultiTensorAdam*>(MakeOptimizer(config, params, 0.1).get()), nullptr);
  config.optimizer_impl = "auto";  // CPU: torch::optim's loop
  EXPECT_NE(dynamic_cast<torch::optim::Adam*>(MakeOptimizer(config, params, 0.1).get()), nullptr);
  EXPECT_EQ(ResolveOptimizerImpl(config, torch::kCPU), "per-param");
  EXPECT_EQ(ResolveOptimizerImpl(config, torch::Device(torch::kCUDA, 0)), "fused");
}

// --overlap-optimizer: the optimizer stepped one bucket at a time, in
// backward's order (the last parameters first), with the reduced gradients
// lent from a flat buffer, gives the same parameters in float64 as step() on
// the whole model, for every optimizer and kernel kind; the parameters' own
// .grad are left as they were.
TEST(PartialStepper, BucketAtATimeEqualsOneWholeStep) {
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (const std::string impl : {"per-param", "foreach", "fused"}) {
      RunConfig config;
      config.optimizer = optimizer;
      config.optimizer_impl = impl;
      config.momentum = 0.9;
      config.weight_decay = 1e-2;
      auto base = MakeParams();
      auto whole = Clone(base), parts = Clone(base);
      auto reference = MakeOptimizer(config, whole, 0.05);
      auto overlapped = MakeOptimizer(config, parts, 0.05);
      PartialStepper stepper(*overlapped);
      torch::manual_seed(11);
      for (int step = 0; step < 4; ++step) {
        std::vector<torch::Tensor> grads, own;
        for (const auto& p : whole) grads.push_back(torch::randn_like(p));
        torch::Tensor buffer = torch::cat({grads[2].flatten(), grads[1].flatten(), grads[0].flatten()});
        auto views = buffer.split({grads[2].numel(), grads[1].numel(), grads[0].numel()});
        for (size_t i = 0; i < whole.size(); ++i) {
          whole[i].mutable_grad() = grads[i];
          parts[i].mutable_grad() = torch::full_like(grads[i], 1e6);  // a rank's own, unreduced gradient
          own.push_back(parts[i].grad());
        }
        reference->step();
        stepper.Step({parts[2]}, {views[0].view_as(parts[2])});
        stepper.Step({parts[1], parts[0]}, {views[1].view_as(parts[1]), views[2].view_as(parts[0])});
        for (size_t i = 0; i < parts.size(); ++i) EXPECT_TRUE(parts[i].grad().is_same(own[i]));
      }
      for (size_t i = 0; i < whole.size(); ++i)
        EXPECT_TRUE(torch::equal(whole[i], parts[i])) << optimizer << " " << impl << " parameter " << i << ": "
                                                      << (whole[i] - parts[i]).abs().max().item<double>();
      EXPECT_EQ(overlapped->param_groups().front().params().size(), parts.size());
    }
  }
}

// Two SGD steps of a float64 ResNet from the same seed, channels-last or not.
std::vector<torch::Tensor> TrainTwoSteps(bool channels_last) {
  ResNetOptions options;
  options.width = 4;
  options.small_input = true;
  options.num_classes = 5;
  options.dtype = torch::kDouble;
  options.channels_last = channels_last;
  ResNet model = BuildModel(options, /*seed=*/3, torch::kCPU);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::manual_seed(5);
  for (int step = 0; step < 2; ++step) {
    auto images = torch::randn({4, 3, 16, 16}, torch::kDouble);
    if (channels_last) images = images.contiguous(at::MemoryFormat::ChannelsLast);
    auto labels = torch::randint(0, 5, {4}, torch::kLong);
    sgd.zero_grad();
    ClassificationLoss(model->forward(images), labels).backward();
    sgd.step();
  }
  return model->parameters();
}

TEST(MemoryFormat, ChannelsLastGivesTheSameParametersInFloat64) {
  const auto a = TrainTwoSteps(false), b = TrainTwoSteps(true);
  ASSERT_EQ(a.size(), b.size());
  bool any_channels_last = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE((a[i] - b[i]).abs().max().item<double>(), 1e-12) << "parameter " << i;
    if (b[i].dim() == 4) any_channels_last |= b[i].is_contiguous(at::MemoryFormat::ChannelsLast) && !b[i].is_contiguous();
  }
  EXPECT_TRUE(any_channels_last) << "BuildModel did not make 4-D weights channels-last";
}

// A 1x1 kernel passes is_contiguous(ChannelsLast) with its NCHW strides, but
// convolution's weight gradient comes back with NHWC strides; the weight must
// carry those, or autograd and DDP's bucket copy re-stride it every step.
TEST(MemoryFormat, EveryKernelGetsTheStridesItsGradientWillHave) {
  ResNetOptions options;
  options.width = 8;
  options.small_input = true;
  options.num_classes = 5;
  options.channels_last = true;
  ResNet model = BuildModel(options, /*seed=*/3, torch::kCPU);
  auto images = torch::randn({2, 3, 16, 16}).contiguous(at::MemoryFormat::ChannelsLast);
  ClassificationLoss(model->forward(images), torch::randint(0, 5, {2}, torch::kLong)).backward();
  int one_by_one = 0;
  for (const auto& p : model->parameters()) {
    if (p.dim() != 4) continue;
    one_by_one += p.size(2) == 1 && p.size(3) == 1;
    EXPECT_EQ(p.strides(), at::empty_like(p, at::MemoryFormat::ChannelsLast).strides()) << p.sizes();
    EXPECT_EQ(p.strides(), p.grad().strides()) << p.sizes();
  }
  EXPECT_GT(one_by_one, 0) << "the model has no 1x1 kernel to check";
}

TEST(ModelFlops, MatchTorchvisionPublishedGflops) {
  ResNetOptions r50;
  r50.depth = 50;
  EXPECT_NEAR(ResNetForwardMacs(r50, 224, 224) / 1e9, 4.09, 0.01);  // torchvision: 4.09 GFLOPS (MACs)
  ResNetOptions r18;
  EXPECT_NEAR(ResNetForwardMacs(r18, 224, 224) / 1e9, 1.81, 0.01);  // torchvision: 1.81
  ResNetOptions small = r18;
  small.small_input = true;
  small.width = 16;
  small.num_classes = 10;
  // Quarter width: every convolution costs 1/16 (the 3-channel stem 1/4).
  EXPECT_LT(ResNetForwardMacs(small, 32, 32), ResNetForwardMacs(r18, 32, 32));
}

TEST(ModelFlops, PeakTableByDeviceAndPrecision) {
  EXPECT_DOUBLE_EQ(PeakFlops("NVIDIA H100 80GB HBM3", "bf16", "on"), 989.4e12);
  EXPECT_DOUBLE_EQ(PeakFlops("NVIDIA H100 80GB HBM3", "off", "on"), 494.7e12);
  EXPECT_DOUBLE_EQ(PeakFlops("NVIDIA H100 80GB HBM3", "off", "off"), 66.9e12);
  EXPECT_DOUBLE_EQ(PeakFlops("NVIDIA H100 PCIe", "fp16", "on"), 756e12);
  EXPECT_DOUBLE_EQ(PeakFlops("Tesla V100-SXM2-16GB", "bf16", "on"), 0);  // no bf16 tensor cores
  EXPECT_DOUBLE_EQ(PeakFlops("Some Future GPU", "bf16", "on"), 0);
}

TEST(Repeat, TrimmedMeanLeavesOutTheExtremes) {
  // Bimodal calls (0.4 and 3.5 ms): the mean counts both as they add up; the outlier goes.
  EXPECT_DOUBLE_EQ(TrimmedMean({0.4, 3.5, 0.4, 3.5, 0.4, 3.5, 0.4, 3.5, 0.4, 90}, 0.1), (4 * 0.4 + 4 * 3.5) / 8);
  EXPECT_DOUBLE_EQ(TrimmedMean({1, 2, 6}, 0.0), 3);
  EXPECT_DOUBLE_EQ(TrimmedMean({1, 2, 6}, 0.2), 3);  // 0.6 of a value: nothing cut
  EXPECT_DOUBLE_EQ(TrimmedMean({}, 0.1), 0);
}

TEST(Repeat, MedianAndMedianAbsoluteDeviation) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
  // |x - 3| = 2, 1, 0, 1, 97: median 1.
  EXPECT_DOUBLE_EQ(MedianAbsoluteDeviation({1, 2, 3, 4, 100}), 1);
}

TEST(Repeat, ThroughputIsTheMedianOverSectionsOfTheSlowestRank) {
  RunResult r;
  r.global_batch = 10;
  r.timed_steps = 100;  // 1000 images per section
  RankFigures a, b;
  a.wall_ms = {1000, 2000, 500};
  b.wall_ms = {1250, 1000, 400};  // rank b is slower in the first section only
  r.ranks = {a, b};
  const auto t = r.RepeatThroughputs();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0], 800);
  EXPECT_DOUBLE_EQ(t[1], 500);
  EXPECT_DOUBLE_EQ(t[2], 2000);
  EXPECT_DOUBLE_EQ(r.Throughput(), 800);
}

// Each test runs in its own process under ctest, so the setting stays here.
// glibc's defaults would mmap a fresh 24 MiB block (and unmap it on free, so
// the next one faults every page in again); "reuse" serves it from the heap
// and keeps the freed space there.
TEST(CpuMalloc, ReuseServesLargeBlocksFromAnUntrimmedHeap) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc, whose heap this test reads";
#endif
  ConfigureCpuMalloc("reuse");
  const size_t mapped_before = mallinfo2().hblks;
  static void* volatile block = nullptr;  // volatile: the pair is not optimised away
  block = std::malloc(24 << 20);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 24 << 20);
  EXPECT_EQ(mallinfo2().hblks, mapped_before) << "the 24 MiB block was mmap'd";
  std::free(block);
  EXPECT_GE(mallinfo2().keepcost, size_t{24} << 20) << "the heap was trimmed after the free";
  std::string message;
  try {
    ConfigureCpuMalloc("tcmalloc");
  } catch (const ConfigError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "--cpu-malloc=tcmalloc: not accepted; accepted values: reuse|system");
}

}  // namespace
}  // namespace ddpbench
