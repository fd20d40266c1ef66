// Exact resume (issue 13) on the strategies' side: a run interrupted after
// step k (SaveState, copied to the CPU), continued by a freshly set up
// strategy (LoadState) on the same batches, ends with every parameter, buffer
// and optimizer state bit-identical to an uninterrupted run. For every
// strategy that runs in one process (single, dp, mp, pmp with each schedule,
// zero1/2/3 at world 1, ddp at world 1 on a Gloo group of one), with SGD
// momentum and Adam; and LoadState refusing a map that does not fit.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "harness/config.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/store_socket.h"
#include "strategies/registry.h"

namespace ddpbench {
namespace {

constexpr int kSteps = 4;

// Batch number k of a deterministic data source (as the loaders are).
Batch BatchNumber(int64_t k) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1000 + k);
  return {torch::randn({4, 3, 16, 16}, gen), torch::randint(0, 10, {4}, gen)};
}

TensorMap CopyToCpu(const TensorMap& state) {
  TensorMap copy;
  for (const auto& [key, value] : state) copy[key] = value.detach().to(torch::kCPU).clone();
  return copy;
}

struct Case {
  std::string strategy;
  std::string optimizer = "sgd";
  int devices = 1;
  std::string schedule = "1f1b";
  std::string amp = "off";
  std::string impl = "auto";
  int resume_at = 2;  // the step after which the run is interrupted
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.strategy << "/" << c.optimizer << "/" << c.schedule << "/" << c.amp << "/" << c.impl << "@" << c.resume_at;
}

class Runs {
 public:
  explicit Runs(const Case& c) {
    torch::set_num_threads(1);
    config.strategy = c.strategy;
    config.optimizer = c.optimizer;
    config.lr = c.optimizer == "adam" ? 0.01 : 0.05;
    config.weight_decay = 0.01;
    config.warmup = 0;
    config.amp = c.amp;
    config.optimizer_impl = c.impl;
    config.batch_size = 4;
    config.image_size = 16;
    config.chunks = 2;
    config.schedule = c.schedule;
    config.balance = "params";  // time may cut the model differently in each Setup
    config.bucket_cap_mb = 0.001;  // several buckets in zero1/zero2
    ctx.config = &config;
    ctx.dist = &dist;
    ctx.devices.assign(c.devices, torch::kCPU);
    ctx.model.width = 4;
    ctx.model.small_input = true;
    ctx.model.num_classes = 10;
    ctx.lr = config.lr;
    ctx.timer = &timer;
    if (c.strategy == "ddp") ConnectWorldOne();
  }
  ~Runs() { dist.Shutdown(); }

  std::unique_ptr<Strategy> Fresh() {
    auto strategy = FindStrategy(config.strategy).make();
    strategy->Setup(ctx);
    return strategy;
  }
  void Train(Strategy& strategy, int from, int to) {
    for (int k = from; k < to; ++k) {
      timer.StartStep();
      strategy.Step(BatchNumber(k));
      timer.EndStep(false);
    }
  }

  RunConfig config;
  DistContext dist;
  PhaseTimer timer{torch::kCPU};
  RunContext ctx;

 private:
  // ddp needs a process group: a Gloo group of one rank on loopback.
  void ConnectWorldOne() {
    StoreSocket probe = ListenForStore("127.0.0.1", 0, false);
    ::close(probe.fd);
    dist.launcher = "spawn";
    dist.master_addr = "127.0.0.1";
    dist.master_port = probe.port;
    dist.Connect(60, /*cuda=*/false, /*nccl=*/false);
  }
};

class ResumeState : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeState, InterruptedRunEndsBitIdentical) {
  const Case& c = GetParam();
  Runs runs(c);
  auto whole = runs.Fresh();
  runs.Train(*whole, 0, kSteps);
  const TensorMap expected = CopyToCpu(whole->SaveState());
  const auto expected_params = whole->Parameters();

  auto first = runs.Fresh();
  runs.Train(*first, 0, c.resume_at);
  const TensorMap saved = CopyToCpu(first->SaveState());
  first.reset();
  if (c.resume_at > 0 && c.optimizer == "adam") {
    EXPECT_TRUE(std::any_of(saved.begin(), saved.end(), [](const auto& kv) {
      return kv.first.rfind("optim.", 0) == 0 && kv.first.size() > 5 && kv.first.substr(kv.first.size() - 5) == ".step";
    })) << "Adam's step counts are saved";
  }

  auto resumed = runs.Fresh();
  resumed->LoadState(saved);
  runs.Train(*resumed, c.resume_at, kSteps);
  const TensorMap got = CopyToCpu(resumed->SaveState());

  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(got.count(key)) << key;
    EXPECT_TRUE(got.at(key).equal(value)) << key << " differs";
  }
  const auto params = resumed->Parameters();
  ASSERT_EQ(params.size(), expected_params.size());
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(params[i].to(torch::kCPU).equal(expected_params[i].to(torch::kCPU))) << "parameter " << i;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (std::string optimizer : {"sgd", "adam"}) {
    cases.push_back({"single", optimizer});
    cases.push_back({"dp", optimizer, 2});
    cases.push_back({"mp", optimizer, 2});
    for (std::string schedule : {"gpipe", "1f1b", "interleaved", "zero-bubble"})
      cases.push_back({"pmp", optimizer, 2, schedule});
    for (std::string zero : {"zero1", "zero2", "zero3"}) cases.push_back({zero, optimizer});
    cases.push_back({"ddp", optimizer});
  }
  Case before_any_step{"single", "adam"};
  before_any_step.resume_at = 0;
  cases.push_back(before_any_step);
  for (std::string impl : {"foreach", "fused"}) {
    cases.push_back({"single", "adam", 1, "1f1b", "off", impl});
    cases.push_back({"single", "sgd", 1, "1f1b", "off", impl});
  }
  cases.push_back({"single", "adam", 1, "1f1b", "fp16"});
  cases.push_back({"pmp", "sgd", 2, "1f1b", "fp16"});
  cases.push_back({"zero2", "adam", 1, "1f1b", "fp16"});
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = c.strategy + "_" + c.optimizer + (c.strategy == "pmp" ? "_" + c.schedule : "") +
                     (c.amp != "off" ? "_" + c.amp : "") + (c.impl != "auto" ? "_" + c.impl : "") + "_at" +
                     std::to_string(c.resume_at);
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Strategies, ResumeState, ::testing::ValuesIn(AllCases()), CaseName);

// What LoadState refuses, each naming the key.
void ExpectRefused(Strategy& strategy, const TensorMap& state, const std::string& key) {
  try {
    strategy.LoadState(state);
    ADD_FAILURE() << "LoadState accepted a map with a bad '" << key << "'";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
  }
}

TEST(ResumeStateErrors, MissingExtraOrDifferentKeysAreNamed) {
  Runs runs(Case{"single", "adam"});
  auto trained = runs.Fresh();
  runs.Train(*trained, 0, 1);
  const TensorMap good = CopyToCpu(trained->SaveState());
  ASSERT_TRUE(good.count("model.units.head.fc.weight"));
  ASSERT_TRUE(good.count("optim.units.head.fc.weight.exp_avg"));

  auto fresh = runs.Fresh();
  TensorMap missing = good;
  missing.erase("model.units.head.fc.weight");
  ExpectRefused(*fresh, missing, "model.units.head.fc.weight");
  TensorMap shape = good;
  shape["model.units.head.fc.bias"] = torch::zeros({3});
  ExpectRefused(*fresh, shape, "model.units.head.fc.bias");
  TensorMap dtype = good;
  dtype["optim.units.head.fc.weight.exp_avg"] = good.at("optim.units.head.fc.weight.exp_avg").to(torch::kDouble);
  ExpectRefused(*fresh, dtype, "optim.units.head.fc.weight.exp_avg");
  TensorMap partial = good;  // optimizer state for some parameters only
  partial.erase("optim.units.head.fc.weight.exp_avg_sq");
  ExpectRefused(*fresh, partial, "optim.units.head.fc.weight.exp_avg_sq");
  TensorMap extra = good;
  extra["optim.nonexistent.momentum_buffer"] = torch::zeros({1});
  ExpectRefused(*fresh, extra, "optim.nonexistent.momentum_buffer");
  fresh->LoadState(good);  // the good map still loads
}

TEST(ResumeStateErrors, ForeignStrategyAndOtherPipelineSplitAreRefused) {
  Runs sharded(Case{"zero1", "sgd"});
  auto zero = sharded.Fresh();
  Runs plain(Case{"single", "sgd"});
  auto single = plain.Fresh();
  // A single-device map in zero1: its full parameters are not shards.
  try {
    zero->LoadState(CopyToCpu(single->SaveState()));
    ADD_FAILURE() << "zero1 loaded single's state";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("training state: key '"), std::string::npos) << e.what();
  }

  Runs pipeline(Case{"pmp", "sgd", 2});
  pipeline.config.split = "3,7";
  const TensorMap saved = CopyToCpu(pipeline.Fresh()->SaveState());
  EXPECT_TRUE(saved.at("meta.split").equal(torch::tensor({3, 7}, torch::kLong)));
  pipeline.config.split = "5,5";
  auto other = pipeline.Fresh();
  ExpectRefused(*other, saved, "meta.split");
}

}  // namespace
}  // namespace ddpbench
