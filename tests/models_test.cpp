// Tests for models/resnet: torchvision-equivalence (exact parameter counts),
// the unit layout that parallel strategies cut, deep copies (clone and
// parallel::replicate), seeded initialisation and the three norm kinds.  Only
// parameter counting builds the big models; every forward runs on a narrow,
// small-input network so the whole file stays within a few seconds of CPU.
#include "models/resnet.h"
#include "models/conv_bn.h"
#include "models/fused_norm.h"

#include <gtest/gtest.h>
#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddpbench {
namespace {

// The tensors here are tiny and the test machines small and shared: intra-op
// threads only add spin-wait contention (seconds instead of milliseconds under
// load), so each test runs single-threaded and restores the setting after.
class SingleThreaded : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_threads_ = torch::get_num_threads();
    torch::set_num_threads(1);
  }
  void TearDown() override { torch::set_num_threads(saved_threads_); }

 private:
  int saved_threads_ = 1;
};
class ResNetModel : public SingleThreaded {};
class ResNetNorm : public SingleThreaded {};
class ResNetOptionsValidation : public SingleThreaded {};

ResNetOptions Small(int depth = 18, NormKind norm = NormKind::kBatch) {
  ResNetOptions options;
  options.depth = depth;
  options.num_classes = 10;
  options.width = 8;
  options.small_input = true;
  options.norm = norm;
  return options;
}

// The message of the std::invalid_argument that `f` throws ("" and a failure
// if it throws nothing or something else).
std::string InvalidArgumentMessage(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than std::invalid_argument: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

std::map<std::string, torch::Tensor> State(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> state;
  for (const auto& p : module.named_parameters()) state[p.key()] = p.value();
  for (const auto& b : module.named_buffers()) state["buffer:" + b.key()] = b.value();
  return state;
}

TEST_F(ResNetModel, ParameterCountsMatchTorchvision) {
  const std::vector<std::pair<int, int64_t>> expected = {
      {18, 11'689'512}, {34, 21'797'672}, {50, 25'557'032},
      {101, 44'549'160}, {152, 60'192'808}};
  for (const auto& [depth, count] : expected) {
    ResNetOptions options;
    options.depth = depth;
    ResNet model(options);
    EXPECT_EQ(CountParameters(*model), count) << "resnet" << depth;
    const std::vector<int64_t> units = model->UnitParameterCounts();
    ASSERT_EQ(units.size(), model->unit_names().size()) << "resnet" << depth;
    int64_t sum = 0;
    for (int64_t n : units) sum += n;
    EXPECT_EQ(sum, count) << "resnet" << depth;
    // Stem: 7x7 conv (3 -> 64) + norm weight and bias.
    EXPECT_EQ(units.front(), 3 * 64 * 7 * 7 + 2 * 64) << "resnet" << depth;
    // Head: fc (512 * expansion -> 1000).
    const int64_t features = depth >= 50 ? 2048 : 512;
    EXPECT_EQ(units.back(), features * 1000 + 1000) << "resnet" << depth;
  }
}

// The preflight's lower bound (memory_fit.h): every weight but the norms',
// counted from the depth table without building the model, and one conv output
// per convolution, checked against the built model run on one image.
TEST_F(ResNetModel, FootprintCountsEveryConvolutionAndTheHead) {
  for (int depth : {18, 50}) {
    ResNetOptions options;
    options.depth = depth;
    options.width = 8;
    options.num_classes = 10;
    options.small_input = depth == 18;
    ResNet model(options);
    int64_t norms = 0;
    for (const auto& p : model->named_parameters())
      if (p.value().dim() == 1 && p.key().find("fc") == std::string::npos) norms += p.value().numel();
    const int64_t side = options.small_input ? 28 : 64;
    const ResNetFootprint fp = ResNetFootprintOf(options, side, side);
    EXPECT_EQ(static_cast<int64_t>(fp.weights), CountParameters(*model) - norms) << "resnet" << depth;
    if (depth == 18) {
      // By hand, 28 px, width w: stem w*28^2; layer1 4 convs of w*28^2;
      // layer2 5 (with the shortcut) of 2w*14^2; layer3 5 of 4w*7^2;
      // layer4 5 of 8w*4^2: w * (784 + 3136 + 1960 + 980 + 640) = 7500 w.
      EXPECT_DOUBLE_EQ(fp.activations_per_image, 7500.0 * options.width);
    }
    ResNetOptions twice = options;
    twice.width = 16;
    // Conv outputs scale with the width; weights with its square.
    EXPECT_DOUBLE_EQ(ResNetFootprintOf(twice, side, side).activations_per_image, 2 * fp.activations_per_image);
  }
}

TEST_F(ResNetModel, OutputShapeImageNet224) {
  ResNetOptions options;  // resnet18, 1000 classes, full 224 px stem
  ResNet model(options);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor out = model->forward(torch::randn({1, 3, 224, 224}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 1000}));
}

TEST_F(ResNetModel, OutputShapeSmallInput32) {
  ResNet model(Small(18));
  torch::NoGradGuard no_grad;
  const torch::Tensor out = model->forward(torch::randn({2, 3, 32, 32}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

TEST_F(ResNetModel, OutputShapeSmallInput28OneChannelBottleneck) {
  ResNetOptions options = Small(50);
  options.in_channels = 1;
  options.width = 4;
  ResNet model(options);
  torch::NoGradGuard no_grad;
  const torch::Tensor out = model->forward(torch::randn({2, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
}

TEST_F(ResNetModel, UnitNamesAndOrder) {
  ResNet model(Small(18));
  const std::vector<std::string> expected = {"stem",     "layer1.0", "layer1.1", "layer2.0",
                                             "layer2.1", "layer3.0", "layer3.1", "layer4.0",
                                             "layer4.1", "head"};
  EXPECT_EQ(model->unit_names(), expected);
  std::vector<std::string> registered;
  for (const auto& child : model->units()->named_children()) registered.push_back(child.key());
  std::vector<std::string> undotted = expected;
  for (auto& name : undotted) std::replace(name.begin(), name.end(), '.', '_');
  EXPECT_EQ(registered, undotted);

  ResNet deep(Small(50));
  ASSERT_EQ(deep->unit_names().size(), 1u + 3 + 4 + 6 + 3 + 1);
  EXPECT_EQ(deep->unit_names()[16], "layer4.2");
  EXPECT_EQ(deep->unit_names()[17], "head");
  EXPECT_EQ(deep->units()->size(), deep->unit_names().size());
}

TEST_F(ResNetModel, RunningUnitsInOrderEqualsForward) {
  ResNet model(Small(18));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor input = torch::randn({2, 3, 32, 32});
  const torch::Tensor expected = model->forward(input);
  torch::Tensor x = input;
  std::vector<std::vector<int64_t>> shapes;
  for (auto& unit : *model->units()) {
    x = unit.forward(x);
    shapes.push_back(x.sizes().vec());
  }
  EXPECT_TRUE(torch::equal(x, expected));
  // Small input: stem keeps 32 px; stages halve from layer2 on.
  EXPECT_EQ(shapes.front(), (std::vector<int64_t>{2, 8, 32, 32}));
  EXPECT_EQ(shapes[2], (std::vector<int64_t>{2, 8, 32, 32}));    // layer1.1
  EXPECT_EQ(shapes[3], (std::vector<int64_t>{2, 16, 16, 16}));   // layer2.0
  EXPECT_EQ(shapes[8], (std::vector<int64_t>{2, 64, 4, 4}));     // layer4.1
  EXPECT_EQ(shapes.back(), (std::vector<int64_t>{2, 10}));
}

TEST_F(ResNetModel, NoConvHasBias) {
  ResNet model(Small(50));
  int convs = 0;
  for (const auto& module : model->modules()) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      ++convs;
      EXPECT_FALSE(conv->bias.defined());
    }
  }
  EXPECT_EQ(convs, 1 + 16 * 3 + 4);  // stem, 3 per bottleneck, 4 downsamples
}

TEST_F(ResNetModel, CloneCopiesIntoDistinctStorage) {
  ResNet model(Small(18));
  model->eval();
  auto copy = std::dynamic_pointer_cast<ResNetImpl>(model->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->unit_names(), model->unit_names());
  EXPECT_FALSE(copy->is_training());
  for (const auto& module : copy->modules()) EXPECT_FALSE(module->is_training());

  const auto original = State(*model);
  const auto cloned = State(*copy);
  ASSERT_EQ(original.size(), cloned.size());
  for (const auto& [name, tensor] : original) {
    auto it = cloned.find(name);
    ASSERT_NE(it, cloned.end()) << name;  // names survive the copy
    EXPECT_TRUE(torch::equal(tensor, it->second)) << name;
    EXPECT_NE(tensor.data_ptr(), it->second.data_ptr()) << name;
  }

  torch::NoGradGuard no_grad;
  const torch::Tensor input = torch::randn({2, 3, 32, 32});
  EXPECT_TRUE(torch::equal(model->forward(input), copy->forward(input)));
  // Writing to the copy leaves the original alone.
  copy->parameters().front().add_(1);
  EXPECT_FALSE(torch::equal(model->parameters().front(), copy->parameters().front()));
}

TEST_F(ResNetModel, CloneOfASingleUnitIsDeep) {
  ResNet model(Small(18));
  auto block = model->units()->ptr(3);  // layer2.0, has a downsample
  auto copy = block->clone();
  const auto a = block->named_parameters();
  const auto b = copy->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_NE(b.find("downsample.0.weight"), nullptr);
  for (const auto& item : a) {
    const torch::Tensor& other = b[item.key()];
    EXPECT_TRUE(torch::equal(item.value(), other)) << item.key();
    EXPECT_NE(item.value().data_ptr(), other.data_ptr()) << item.key();
  }
}

TEST_F(ResNetModel, CloneLeavesGlobalRngUntouched) {
  ResNet model(Small(18));
  torch::manual_seed(3);
  const torch::Tensor expected = torch::rand({16});
  torch::manual_seed(3);
  (void)model->clone();
  EXPECT_TRUE(torch::equal(torch::rand({16}), expected));
}

TEST_F(ResNetModel, ReplicateOnTwoCpuDevices) {
  ResNet model(Small(18));
  model->eval();
  const auto replicas = torch::nn::parallel::replicate(model, {torch::kCPU, torch::kCPU});
  ASSERT_EQ(replicas.size(), 2u);
  const torch::Tensor input = torch::randn({2, 3, 32, 32});

  const torch::Tensor direct = model->forward(input);
  direct.sum().backward();
  const torch::Tensor weight = model->parameters().front();
  const torch::Tensor direct_grad = weight.grad().clone();
  weight.mutable_grad().zero_();

  torch::Tensor loss = torch::zeros({});
  for (auto replica : replicas) {
    EXPECT_NE(replica->parameters().front().data_ptr(), weight.data_ptr());
    const torch::Tensor out = replica->forward(input);
    EXPECT_TRUE(torch::equal(out, direct));
    loss = loss + out.sum();
  }
  // replicate wires the replicas' parameters back to the original's.
  loss.backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_TRUE(torch::allclose(weight.grad(), 2 * direct_grad, 1e-5, 1e-6));
}

TEST_F(ResNetModel, SameSeedSameParametersDifferentSeedDifferent) {
  torch::manual_seed(7);
  ResNet a(Small(18));
  torch::manual_seed(7);
  ResNet b(Small(18));
  torch::manual_seed(8);
  ResNet c(Small(18));
  const auto sa = State(*a), sb = State(*b), sc = State(*c);
  for (const auto& [name, tensor] : sa) {
    EXPECT_TRUE(torch::equal(tensor, sb.at(name))) << name;
  }
  EXPECT_FALSE(torch::equal(sa.at("units.stem.conv1.weight"), sc.at("units.stem.conv1.weight")));
  EXPECT_FALSE(torch::equal(sa.at("units.head.fc.weight"), sc.at("units.head.fc.weight")));
}

TEST_F(ResNetModel, InitialisationFollowsTorchvision) {
  ResNetOptions options;
  options.num_classes = 10;
  ResNet model(options);
  const auto state = State(*model);
  // kaiming_normal_(fan_out, relu): std = sqrt(2 / (out_channels * k * k)).
  const torch::Tensor w = state.at("units.layer3_0.conv1.weight");  // 256x128x3x3
  const double expected_std = std::sqrt(2.0 / (256 * 3 * 3));
  EXPECT_NEAR(w.std().item<double>(), expected_std, 0.02 * expected_std);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.02 * expected_std);
  EXPECT_TRUE(torch::equal(state.at("units.layer3_0.bn1.weight"), torch::ones({256})));
  EXPECT_TRUE(torch::equal(state.at("units.layer3_0.bn1.bias"), torch::zeros({256})));
  // Linear keeps PyTorch's default: uniform(-1/sqrt(in), 1/sqrt(in)).
  const double bound = 1.0 / std::sqrt(512.0);
  EXPECT_LE(state.at("units.head.fc.weight").abs().max().item<double>(), bound);
}

// Golden values: a Python mirror of torchvision's resnet18 (same module
// construction order, same init loop) after torch.manual_seed(0), PyTorch 2.11.
// Equal values mean the model draws from the global RNG exactly as torchvision
// does.  Regenerate if a PyTorch upgrade changes its CPU RNG algorithms.
TEST_F(ResNetModel, Seed0Resnet18MatchesTorchvisionDrawOrder) {
  torch::manual_seed(0);
  ResNet model(ResNetOptions{});
  const auto state = State(*model);
  const std::vector<std::pair<std::string, double>> sums = {
      {"units.stem.conv1.weight", -5.018750191},
      {"units.layer1_0.conv1.weight", -1.89275074},
      {"units.layer2_0.downsample.0.weight", 12.32741356},
      {"units.layer4_1.conv1.weight", -12.35355186},
      {"units.head.fc.weight", 22.25875854},
      {"units.head.fc.bias", -0.2986614108}};
  for (const auto& [name, sum] : sums) {
    EXPECT_NEAR(state.at(name).sum().item<double>(), sum, 1e-4) << name;
  }
  EXPECT_NEAR(state.at("units.head.fc.weight").flatten()[0].item<double>(), -0.02031549625, 1e-9);
}

// --- norm kinds -------------------------------------------------------------

template <typename Impl>
int CountModules(torch::nn::Module& module) {
  int n = 0;
  for (const auto& m : module.modules()) n += m->as<Impl>() != nullptr;
  return n;
}

TEST_F(ResNetNorm, ParseAndNameRoundTrip) {
  for (NormKind kind : {NormKind::kBatch, NormKind::kGroup, NormKind::kFrozenBatch}) {
    EXPECT_EQ(ParseNormKind(NormKindName(kind)), kind);
  }
  EXPECT_EQ(ParseNormKind("frozen-bn"), NormKind::kFrozenBatch);
  const std::string message = InvalidArgumentMessage([] { ParseNormKind("layer"); });
  EXPECT_NE(message.find("'layer'"), std::string::npos) << message;
  EXPECT_NE(message.find("batch, group, frozen-bn"), std::string::npos) << message;
}

TEST_F(ResNetNorm, GroupNormUsesGcdGroupsAndNoBatchNorm) {
  ResNetOptions options = Small(18, NormKind::kGroup);
  options.width = 48;  // stages of 48, 96, 192, 384 channels: 16, 32, 32, 32 groups
  ResNet model(options);
  EXPECT_EQ(CountModules<torch::nn::BatchNorm2dImpl>(*model), 0);
  std::vector<int64_t> groups;
  for (const auto& m : model->modules()) {
    if (auto* gn = m->as<torch::nn::GroupNormImpl>()) {
      EXPECT_EQ(gn->options.num_channels() % gn->options.num_groups(), 0);
      EXPECT_TRUE(gn->options.affine());
      groups.push_back(gn->options.num_groups());
    }
  }
  ASSERT_FALSE(groups.empty());
  EXPECT_EQ(groups.front(), 16);  // stem: gcd(32, 48)
  EXPECT_EQ(groups.back(), 32);   // layer4: gcd(32, 384)
}

TEST_F(ResNetNorm, GroupNormSampleDoesNotDependOnBatch) {
  ResNet model(Small(18, NormKind::kGroup));
  model->train();
  torch::NoGradGuard no_grad;
  const torch::Tensor batch = torch::randn({4, 3, 32, 32});
  const torch::Tensor together = model->forward(batch);
  const torch::Tensor alone = model->forward(batch.slice(0, 0, 1));
  EXPECT_TRUE(torch::allclose(together.slice(0, 0, 1), alone, /*rtol=*/0, /*atol=*/1e-6));

  // Control: batch norm in training mode does mix samples, so the check above
  // can tell the difference.
  ResNet batch_norm(Small(18, NormKind::kBatch));
  batch_norm->train();
  EXPECT_FALSE(torch::allclose(batch_norm->forward(batch).slice(0, 0, 1),
                               batch_norm->forward(batch.slice(0, 0, 2)).slice(0, 0, 1), 0, 1e-6));
}

TEST_F(ResNetNorm, FrozenBatchNormStatisticsNeverUpdate) {
  ResNet model(Small(18, NormKind::kFrozenBatch));
  EXPECT_EQ(CountModules<torch::nn::BatchNorm2dImpl>(*model), 0);
  std::map<std::string, torch::Tensor> before;
  for (const auto& b : model->named_buffers()) before[b.key()] = b.value().clone();
  ASSERT_FALSE(before.empty());

  model->train();
  const torch::Tensor input = torch::randn({4, 3, 32, 32}) * 3 + 2;
  const torch::Tensor train_out = model->forward(input);
  for (const auto& b : model->named_buffers()) {
    EXPECT_TRUE(torch::equal(b.value(), before.at(b.key()))) << b.key();
  }
  // Always normalises with the running statistics: train == eval.
  model->eval();
  EXPECT_TRUE(torch::equal(train_out, model->forward(input)));
  // The affine parameters still learn.
  train_out.sum().backward();
  const auto params = model->named_parameters();
  ASSERT_TRUE(params["units.stem.bn1.weight"].grad().defined());

  // Control: plain batch norm does update its statistics in training mode.
  ResNet batch_norm(Small(18, NormKind::kBatch));
  batch_norm->train();
  const torch::Tensor mean_before = batch_norm->named_buffers()["units.stem.bn1.running_mean"].clone();
  torch::NoGradGuard no_grad;
  batch_norm->forward(input);
  EXPECT_FALSE(torch::equal(batch_norm->named_buffers()["units.stem.bn1.running_mean"], mean_before));
}

TEST_F(ResNetNorm, BackwardReachesEveryParameterForEachKind) {
  for (NormKind kind : {NormKind::kBatch, NormKind::kGroup, NormKind::kFrozenBatch}) {
    ResNet model(Small(18, kind));
    model->train();
    model->forward(torch::randn({2, 3, 32, 32})).sum().backward();
    for (const auto& p : model->named_parameters()) {
      EXPECT_TRUE(p.value().grad().defined()) << NormKindName(kind) << " " << p.key();
    }
  }
}

// --- fused BatchNorm(+add)+ReLU --------------------------------------------

// Three SGD steps of `options`' model in float64 from seed 0 on fixed data;
// the state after them, and each step's loss and gradients.
struct Trained {
  std::map<std::string, torch::Tensor> state;
  std::vector<torch::Tensor> losses, grads;
  torch::Tensor eval_logits;
};
Trained TrainThreeSteps(const ResNetOptions& options) {
  torch::manual_seed(0);
  ResNet model(options);
  model->to(torch::kDouble);
  torch::manual_seed(1);
  const auto x = torch::randn({4, 3, 16, 16}, torch::kDouble);
  const auto y = torch::randint(0, 10, {4}, torch::kLong);
  Trained t;
  model->train();
  for (int step = 0; step < 3; ++step) {
    model->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    t.losses.push_back(loss.detach());
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      t.grads.push_back(p.grad().clone());
      p.sub_(p.grad(), 0.1);
    }
  }
  model->eval();
  torch::NoGradGuard no_grad;
  t.eval_logits = model->forward(x);
  t.state = State(*model);
  return t;
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Two trainings computed the same thing to float64 round-off: losses, every
// gradient, the running statistics and num_batches_tracked, and the
// eval-mode output. `scale` widens the bounds (1e-12 on losses, 1e-10 on the
// rest) for maths that rounds in another order.
void ExpectSameTraining(const Trained& a, const Trained& b, const std::string& what, double scale = 1) {
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_LT(MaxAbsDiff(a.losses[i], b.losses[i]), 1e-12 * scale) << what;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_LT(MaxAbsDiff(a.grads[i], b.grads[i]), 1e-10 * scale) << what << " grad " << i;
  ASSERT_EQ(a.state.size(), b.state.size());
  for (const auto& [name, value] : a.state) {
    ASSERT_TRUE(b.state.count(name)) << name;
    EXPECT_LT(MaxAbsDiff(value, b.state.at(name)), 1e-10 * scale) << what << " " << name;
  }
  // Relative: three steps of running statistics from batches of 4 leave
  // eval logits of up to ~900 in ResNet-50.
  const double logits = std::max(1.0, a.eval_logits.abs().max().item<double>());
  EXPECT_LT(MaxAbsDiff(a.eval_logits, b.eval_logits) / logits, 1e-10 * scale) << what;
}

// Trains each small ResNet (18 and 50, whole blocks and halves) three steps
// unfused and with `fuse`; `fused_run` wraps the fused training (to count
// what served it) and `check` compares.
void ForEachFusedPair(NormFuse fuse, const std::function<Trained(const ResNetOptions&)>& fused_run,
                      const std::function<void(const std::string&, int, const Trained&, const Trained&)>& check) {
  for (int depth : {18, 50}) {
    for (bool half : {false, true}) {
      ResNetOptions plain = Small(depth);
      plain.half_blocks = half;
      ResNetOptions fused = plain;
      fused.fuse = fuse;
      const std::string what = "resnet" + std::to_string(depth) + (half ? " half blocks" : "");
      const Trained a = TrainThreeSteps(plain);
      check(what, depth, a, fused_run(fused));
    }
  }
}

// The fused node's ATen path (the CPU's, and any case cuDNN refuses) computes
// what the unfused blocks compute (the residual's gradient included: it flows
// on into the earlier blocks).
TEST_F(ResNetNorm, FusedBnAddReluMatchesUnfusedInDouble) {
  FusedNormUse use;
  const auto run = [&](const ResNetOptions& o) {
    ResetFusedNormUsage();
    Trained t = TrainThreeSteps(o);
    use = FusedNormUsage();
    return t;
  };
  ForEachFusedPair(NormFuse::kBnAddRelu, run, [&](const std::string& what, int, const Trained& a, const Trained& b) {
    EXPECT_GT(use.aten_calls, 0) << what;
    EXPECT_EQ(use.cudnn_calls, 0) << what;
    const bool named = use.why_aten.find("not on a CUDA device") != std::string::npos ||
                       use.why_aten.find("without cuDNN") != std::string::npos;
    EXPECT_TRUE(named) << what << ": " << use.why_aten;
    ExpectSameTraining(a, b, what);
  });
}

// The conv + BatchNorm-statistics stages (sums from each convolution's
// output, the finalize step, a scale-shift(-add)-ReLU) train as the unfused
// model does: which statistics feed which unit, the shortcut's BatchNorm,
// and the running-statistics bookkeeping. Every conv-BN pattern goes through
// them: ResNet-18 has 1 + 16 + 3 (shortcut) of them, ResNet-50 1 + 48 + 4.
// The variance comes from sums (E[y^2] - E[y]^2), not ATen's two passes, and
// batch 4 at ResNet-50's 2x2 last stage amplifies that round-off through
// three steps to ~4e-10 on the loss (a two-pass variance measured the same
// ~1e-10): bounds 1e3 wider than the kernel-for-kernel fusion's, still far
// below what a wrong statistic or a missed running-stat update moves (O(1)).
TEST_F(ResNetNorm, ConvBnStagesMatchUnfusedInDouble) {
  int64_t calls = 0;
  const auto run = [&](const ResNetOptions& o) {
    ResetConvBnCalls();
    Trained t = TrainThreeSteps(o);
    calls = ConvBnCalls();
    return t;
  };
  ForEachFusedPair(NormFuse::kConvBn, run, [&](const std::string& what, int depth, const Trained& a, const Trained& b) {
    const int64_t patterns = depth == 18 ? 20 : 53;
    EXPECT_EQ(calls, 3 * patterns + patterns) << what << ": 3 training forwards and one eval forward";
    ExpectSameTraining(a, b, what, /*scale=*/1e3);
  });
}

TEST(ConvBn, FinalizeMovesRunningStatisticsAsBatchNorm) {
  torch::manual_seed(3);
  torch::nn::BatchNorm2d reference(torch::nn::BatchNorm2dOptions(5).momentum(0.3));
  auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(reference->clone());
  reference->to(torch::kDouble);
  bn->to(torch::kDouble);
  const auto y = torch::randn({3, 5, 4, 2}, torch::kDouble) * 4 + 7;
  const auto expected = reference->forward(y);
  const auto got = ApplyScaleShift(y, BnFinalize(*bn, GenStats(y)), torch::Tensor(), /*relu=*/false);
  EXPECT_LT(MaxAbsDiff(expected, got), 1e-12);
  EXPECT_LT(MaxAbsDiff(reference->running_mean, bn->running_mean), 1e-12);
  EXPECT_LT(MaxAbsDiff(reference->running_var, bn->running_var), 1e-12);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  // A single value per channel has no variance: refused, not a NaN.
  EXPECT_THROW(BnFinalize(*bn, GenStats(torch::randn({1, 5, 1, 1}, torch::kDouble))), c10::Error);
}

TEST_F(ResNetOptionsValidation, FusionIsOfBatchNormOnly) {
  ResNetOptions options = Small(18, NormKind::kGroup);
  options.fuse = NormFuse::kBnAddRelu;
  const std::string message = InvalidArgumentMessage([&] { ValidateResNetOptions(options); });
  EXPECT_NE(message.find("norm group"), std::string::npos) << message;
  options.norm = NormKind::kBatch;
  EXPECT_NO_THROW(ValidateResNetOptions(options));
}

// --- options ----------------------------------------------------------------

TEST_F(ResNetOptionsValidation, BadValuesThrowNamingTheValue) {
  struct Case {
    std::function<void(ResNetOptions&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {[](ResNetOptions& o) { o.depth = 20; }, {"depth 20", "18, 34, 50, 101, 152"}},
      {[](ResNetOptions& o) { o.num_classes = 0; }, {"num_classes 0", "at least 1"}},
      {[](ResNetOptions& o) { o.in_channels = -2; }, {"in_channels -2", "at least 1"}},
      {[](ResNetOptions& o) { o.width = 0; }, {"width 0", "at least 1"}},
      {[](ResNetOptions& o) { o.norm = static_cast<NormKind>(42); }, {"42", "frozen-bn"}},
  };
  for (const auto& c : cases) {
    ResNetOptions options;
    c.edit(options);
    const std::string message = InvalidArgumentMessage([&] { ValidateResNetOptions(options); });
    for (const auto& needle : c.needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "'" << needle << "' not in: " << message;
    }
    // The constructor validates too.
    EXPECT_THROW(ResNet{options}, std::invalid_argument);
  }
  EXPECT_NO_THROW(ValidateResNetOptions(ResNetOptions{}));
}

TEST_F(ResNetOptionsValidation, AnyPositiveWidthWorksWithGroupNorm) {
  for (int64_t width : {1, 3, 5}) {
    ResNetOptions options = Small(18, NormKind::kGroup);
    options.width = width;
    EXPECT_NO_THROW(ValidateResNetOptions(options));
    ResNet model(options);
    torch::NoGradGuard no_grad;
    EXPECT_EQ(model->forward(torch::randn({1, 3, 8, 8})).sizes(), (std::vector<int64_t>{1, 10}));
  }
}

}  // namespace
}  // namespace ddpbench

namespace ddpbench {
namespace {

// half_blocks cuts every residual block into two units and must leave the
// network as it was: the same weights from the same seed, the same outputs and
// gradients (float64), parameter by parameter under the whole block's name.
void ExpectHalfBlocksAreTheSameNetwork(int depth) {
  ResNetOptions options;
  options.depth = depth;
  options.width = 4;
  options.small_input = true;
  options.num_classes = 7;
  options.dtype = torch::kDouble;
  torch::manual_seed(11);
  ResNet whole(options);
  options.half_blocks = true;
  torch::manual_seed(11);
  ResNet halves(options);
  whole->to(torch::kDouble);
  halves->to(torch::kDouble);
  const int64_t blocks = static_cast<int64_t>(whole->unit_names().size()) - 2;
  ASSERT_EQ(halves->unit_names().size(), static_cast<size_t>(2 * blocks + 2));
  EXPECT_EQ(halves->unit_names()[1], "layer1.0a");
  EXPECT_EQ(halves->unit_names()[2], "layer1.0b");

  auto images = torch::randn({3, 3, 16, 16}, torch::kDouble);
  auto a = whole->forward(images), b = halves->forward(images);
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-12);
  a.sum().backward();
  b.sum().backward();

  // "units.layer2_1a.conv1.weight" -> "units.layer2_1.conv1.weight"
  auto whole_name = [](std::string name) {
    const auto dot = name.find('.', name.find('.') + 1);
    if (name.rfind("units.layer", 0) == 0 && (name[dot - 1] == 'a' || name[dot - 1] == 'b')) name.erase(dot - 1, 1);
    return name;
  };
  auto expected = whole->named_parameters();
  auto got = halves->named_parameters();
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& p : got) {
    const auto* w = expected.find(whole_name(p.key()));
    ASSERT_NE(w, nullptr) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), *w)) << p.key() << ": initialised differently";
    EXPECT_LE((p.value().grad() - w->grad()).abs().max().item<double>(), 1e-12) << p.key();
  }
  auto whole_buffers = whole->named_buffers();
  for (const auto& buf : halves->named_buffers()) {
    const auto* w = whole_buffers.find(whole_name(buf.key()));
    ASSERT_NE(w, nullptr) << buf.key();
    EXPECT_LE((buf.value().to(torch::kDouble) - w->to(torch::kDouble)).abs().max().item<double>(), 1e-12)
        << buf.key();
  }
}

TEST(ResNet, HalfBlocksAreTheSameNetworkBasic) { ExpectHalfBlocksAreTheSameNetwork(18); }
TEST(ResNet, HalfBlocksAreTheSameNetworkBottleneck) { ExpectHalfBlocksAreTheSameNetwork(50); }

}  // namespace
}  // namespace ddpbench
