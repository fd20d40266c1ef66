// Exact resume on the strategies' side: a run interrupted after
// step k (SaveState, copied to the CPU), continued by a freshly set up
// strategy (LoadState) on the same batches, ends with every parameter, buffer
// and optimizer state bit-identical to an uninterrupted run. For every
// strategy that runs in one process (single, dp, mp, pmp with each schedule,
// zero1/2/3 at world 1, ddp at world 1 on a Gloo group of one), with SGD
// momentum and Adam; ddp and zero1/2/3 with 2 and 3 ranks in forked
// processes; and LoadState refusing a map that does not fit.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "base/config.h"
#include "harness/dist.h"
#include "harness/phase.h"
#include "harness/store_socket.h"
#include "strategies/registry.h"

namespace ddpbench {
namespace {

constexpr int kSteps = 4;

// Batch number k of rank `rank`'s deterministic data source (as the loaders are).
Batch BatchNumber(int64_t k, int rank) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1000 + 100 * rank + k);
  return {torch::randn({4, 3, 16, 16}, gen), torch::randint(0, 10, {4}, gen)};
}

int FreePort() {
  StoreSocket probe = ListenForStore("127.0.0.1", 0, false);
  ::close(probe.fd);
  return probe.port;
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
  // Rank `rank` of `world` (world > 1: the rendezvous at 127.0.0.1:`port`,
  // rank 0 serving it); ddp gets a Gloo group of one at world 1.
  explicit Runs(const Case& c, int rank = 0, int world = 1, int port = 0) {
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
    config.chunks = c.schedule == "dualpipev" ? 4 : 2;  // dualpipev: at least one per stage of its V
    config.schedule = c.schedule;
    config.balance = "params";  // time may cut the model differently in each Setup
    config.bucket_cap_mb = 0.001;  // several buckets in zero1/zero2
    ctx.config = &config;
    ctx.dist = &dist;
    ctx.devices.assign(c.devices, torch::kCPU);
    ctx.model.width = 4;
    ctx.model.small_input = config.small_input = true;  // as --small-input sets both
    ctx.model.num_classes = 10;
    ctx.lr = config.lr;
    ctx.timer = &timer;
    if (world > 1 || c.strategy == "ddp") Connect(rank, world, port);
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
      strategy.Step(BatchNumber(k, dist.rank));
      timer.EndStep(false);
    }
  }

  RunConfig config;
  DistContext dist;
  PhaseTimer timer{torch::kCPU};
  RunContext ctx;

 private:
  void Connect(int rank, int world, int port) {
    dist.rank = dist.local_rank = rank;
    dist.world = dist.local_world = world;
    dist.launcher = "spawn";
    dist.master_addr = "127.0.0.1";
    dist.master_port = port > 0 ? port : FreePort();
    dist.Connect(60, /*cuda=*/false, /*nccl=*/false);
  }
};

// Runs kSteps steps uninterrupted, and resume_at steps, a SaveState copied
// to the CPU, a fresh strategy that loads it and runs the rest; returns ""
// when both end with the same state and parameters bit for bit, else the
// first difference. Collective-safe: every rank makes the same calls.
std::string CompareResume(Runs& runs, int resume_at) {
  auto whole = runs.Fresh();
  runs.Train(*whole, 0, kSteps);
  const TensorMap expected = CopyToCpu(whole->SaveState());
  std::vector<torch::Tensor> expected_params;
  for (const auto& p : whole->Parameters()) expected_params.push_back(p.detach().to(torch::kCPU).clone());

  auto first = runs.Fresh();
  runs.Train(*first, 0, resume_at);
  first->Predict(BatchNumber(0, 0).images);  // an evaluation before the snapshot, as at an epoch's end
  const TensorMap saved = CopyToCpu(first->SaveState());
  first.reset();
  auto resumed = runs.Fresh();
  resumed->LoadState(saved);
  runs.Train(*resumed, resume_at, kSteps);
  const TensorMap got = CopyToCpu(resumed->SaveState());

  if (runs.config.optimizer == "adam" && resume_at > 0 &&
      std::none_of(saved.begin(), saved.end(), [](const auto& kv) {
        return kv.first.rfind("optim.", 0) == 0 && kv.first.size() > 5 && kv.first.substr(kv.first.size() - 5) == ".step";
      }))
    return "no Adam step count saved";
  if (got.size() != expected.size()) return "a resumed state of another size";
  for (const auto& [key, value] : expected) {
    if (!got.count(key)) return key + " is missing after resume";
    if (!got.at(key).equal(value)) return key + " differs";
  }
  const auto params = resumed->Parameters();
  if (params.size() != expected_params.size()) return "another parameter count";
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].to(torch::kCPU).equal(expected_params[i])) return "parameter " + std::to_string(i) + " differs";
  return "";
}

class ResumeState : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeState, InterruptedRunEndsBitIdentical) {
  Runs runs(GetParam());
  EXPECT_EQ(CompareResume(runs, GetParam().resume_at), "");
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (std::string optimizer : {"sgd", "adam"}) {
    cases.push_back({"single", optimizer});
    cases.push_back({"dp", optimizer, 2});
    cases.push_back({"mp", optimizer, 2});
    for (std::string schedule : {"gpipe", "1f1b", "interleaved", "zero-bubble", "interleaved-zero-bubble",
                                 "looped-bfs", "zbv", "dualpipev"})
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

// Several ranks, each its own process (forked before this test process uses
// torch's thread pool: ctest runs each case alone), on a Gloo group: every
// rank saves and loads its own state (zero: its own slices), and every rank
// must end bit-identical to its uninterrupted run. World 3 too, where the
// sum of a bucket's all-reduce depends on where a gradient sits in it (ddp's
// rebuilt bucket layout).
struct RankCase {
  std::string strategy;
  std::string optimizer;
  int world;
};
void PrintTo(const RankCase& c, std::ostream* os) { *os << c.strategy << "/" << c.optimizer << "/" << c.world; }

class ResumeStateRanks : public ::testing::TestWithParam<RankCase> {};

TEST_P(ResumeStateRanks, EveryRankEndsBitIdentical) {
  const RankCase& c = GetParam();
  const int port = FreePort();
  std::vector<pid_t> children;
  for (int rank = 0; rank < c.world; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 3;
      try {
        Runs runs(Case{c.strategy, c.optimizer}, rank, c.world, port);
        const std::string diff = CompareResume(runs, 2);
        if (!diff.empty()) std::cerr << "rank " << rank << ": " << diff << "\n";
        code = diff.empty() ? 0 : 1;
      } catch (const std::exception& e) {
        std::cerr << "rank " << rank << ": " << e.what() << "\n";
        code = 2;
      }
      std::_Exit(code);
    }
    children.push_back(pid);
  }
  for (int rank = 0; rank < c.world; ++rank) {
    int status = 0;
    ASSERT_EQ(waitpid(children[rank], &status, 0), children[rank]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << rank << " status " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ResumeStateRanks,
    ::testing::Values(RankCase{"ddp", "sgd", 2}, RankCase{"ddp", "adam", 3}, RankCase{"zero1", "sgd", 2},
                      RankCase{"zero1", "adam", 3}, RankCase{"zero2", "adam", 2}, RankCase{"zero2", "sgd", 3},
                      RankCase{"zero3", "sgd", 2}, RankCase{"zero3", "adam", 3}),
    [](const ::testing::TestParamInfo<RankCase>& info) {
      return info.param.strategy + "_" + info.param.optimizer + "_world" + std::to_string(info.param.world);
    });

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
  EXPECT_TRUE(saved.at("meta.units").equal(torch::tensor({0}, torch::kLong)));  // --split: whole blocks
  pipeline.config.split = "5,5";
  auto other = pipeline.Fresh();
  ExpectRefused(*other, saved, "meta.split");
}

}  // namespace
}  // namespace ddpbench
