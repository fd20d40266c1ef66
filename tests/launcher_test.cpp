// Launcher detection: each launcher's variables give the right rank, world,
// local world and rendezvous address; malformed or inconsistent values give
// one ConfigError naming the variable; Slurm node lists give their first host;
// the store's listening socket is bound where the ranks need it and no wider.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>

#include "base/config.h"
#include "app/launcher.h"
#include "harness/store_socket.h"

namespace ddpbench {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string DetectError(std::map<std::string, std::string> vars) {
  try {
    DetectLaunchEnv(Env(std::move(vars)));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Launcher, NoneWhenNothingIsSet) {
  LaunchEnv e = DetectLaunchEnv(Env({{"PATH", "/bin"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}}));
  EXPECT_EQ(e.launcher, "none");  // a batch script's shell is not a rank of a step
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.rank, 0);
}

TEST(Launcher, Torchrun) {
  LaunchEnv e = DetectLaunchEnv(Env({{"TORCHELASTIC_RUN_ID", "none"}, {"RANK", "3"}, {"LOCAL_RANK", "1"},
                                     {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"},
                                     {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.world, 4);
  EXPECT_EQ(e.local_world, 2);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_TRUE(e.store_served);
  EXPECT_EQ(e.store_prefix, "ddpbench/attempt-0/");
}

// torchrun's agent store outlives a worker group: each restart keys its own.
TEST(Launcher, TorchrunAgentStoreKeysEachAttemptApart) {
  LaunchEnv e = DetectLaunchEnv(Env({{"TORCHELASTIC_RUN_ID", "x"}, {"RANK", "0"}, {"WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"},
                                     {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_EQ(e.store_prefix, "ddpbench/attempt-2/");
}

TEST(Launcher, TorchrunWithoutAgentStoreLetsRankZeroServe) {
  LaunchEnv e = DetectLaunchEnv(Env({{"TORCHELASTIC_RUN_ID", "x"}, {"RANK", "0"}, {"WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}}));
  EXPECT_FALSE(e.store_served);
  EXPECT_EQ(e.local_world, 2);
  EXPECT_EQ(e.store_prefix, "ddpbench/");  // a new store each attempt, served by rank 0
}

TEST(Launcher, Spawn) {
  LaunchEnv e = DetectLaunchEnv(Env({{"DDPBENCH_LAUNCHER", "spawn"}, {"RANK", "1"}, {"LOCAL_RANK", "1"},
                                     {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "40000"},
                                     // stale outer-launcher variables lose to spawn
                                     {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}));
  EXPECT_EQ(e.launcher, "spawn");
  EXPECT_EQ(e.rank, 1);
  EXPECT_TRUE(e.store_served);
}

TEST(Launcher, Slurm) {
  LaunchEnv e = DetectLaunchEnv(Env({{"SLURM_STEP_NUM_TASKS", "6"}, {"SLURM_PROCID", "4"},
                                     {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2),2"},
                                     {"SLURM_STEP_NODELIST", "gpu[07-09]"}, {"SLURM_JOB_ID", "123456"}}));
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 4);
  EXPECT_EQ(e.world, 6);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world, 2);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 15000 + 123456 % 10000);
  EXPECT_FALSE(e.store_served);
}

TEST(Launcher, SlurmMasterVariablesWin) {
  LaunchEnv e = DetectLaunchEnv(Env({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "0"},
                                     {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_STEP_NODELIST", "n1"},
                                     {"MASTER_ADDR", "head"}, {"MASTER_PORT", "4242"}}));
  EXPECT_EQ(e.master_addr, "head");
  EXPECT_EQ(e.master_port, 4242);
  EXPECT_EQ(e.local_world, 2);
}

TEST(Launcher, OpenMpi) {
  LaunchEnv e = DetectLaunchEnv(Env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(e.launcher, "mpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // one host: rank 0 is local
  EXPECT_EQ(e.master_port, 29500);
}

TEST(Launcher, OpenMpiInsideASlurmStepIsOpenMpi) {
  LaunchEnv e = DetectLaunchEnv(Env({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"},
                                     {"SLURM_STEP_NODELIST", "n1"}, {"OMPI_COMM_WORLD_RANK", "1"},
                                     {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(e.launcher, "mpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world, 2);
}

TEST(Launcher, OpenMpiAcrossHostsNeedsMasterAddr) {
  std::string message = DetectError({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_NE(message.find("MASTER_ADDR is not set"), std::string::npos) << message;
}

TEST(Launcher, PlainEnvironmentVariables) {
  LaunchEnv e = DetectLaunchEnv(
      Env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29501"}}));
  EXPECT_EQ(e.launcher, "env");
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
}

struct BadEnv {
  std::map<std::string, std::string> vars;
  std::string expect;
};
void PrintTo(const BadEnv& b, std::ostream* os) { *os << b.expect; }

class BadLaunchEnv : public ::testing::TestWithParam<BadEnv> {};

TEST_P(BadLaunchEnv, OneMessageNamingTheVariable) {
  std::string message = DetectError(GetParam().vars);
  ASSERT_FALSE(message.empty()) << "accepted";
  EXPECT_NE(message.find(GetParam().expect), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

const std::map<std::string, std::string> kTorchrun = {{"TORCHELASTIC_RUN_ID", "x"}, {"RANK", "0"},
                                                      {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                      {"MASTER_PORT", "29500"}};
std::map<std::string, std::string> With(std::map<std::string, std::string> base, const std::string& k,
                                        const std::string& v) {
  if (v == "<unset>") base.erase(k);
  else base[k] = v;
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    Launcher, BadLaunchEnv,
    ::testing::Values(BadEnv{With(kTorchrun, "RANK", "2"), "the rank must be below the world size"},
                      BadEnv{With(kTorchrun, "RANK", "x1"), "RANK=x1: must be an integer >= 0"},
                      BadEnv{With(kTorchrun, "WORLD_SIZE", "0"), "WORLD_SIZE=0: must be an integer >= 1"},
                      BadEnv{With(kTorchrun, "MASTER_PORT", "70000"), "MASTER_PORT=70000: must be 1..65535"},
                      BadEnv{With(kTorchrun, "MASTER_ADDR", "<unset>"), "MASTER_ADDR is not set"},
                      BadEnv{With(kTorchrun, "LOCAL_WORLD_SIZE", "3"), "the local world cannot exceed"},
                      BadEnv{{{"SLURM_STEP_NUM_TASKS", "two"}, {"SLURM_PROCID", "0"}},
                             "SLURM_STEP_NUM_TASKS=two"},
                      BadEnv{{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                             "the rank must be below the world size"}),
    [](const ::testing::TestParamInfo<BadEnv>& info) { return "case" + std::to_string(info.index); });

TEST(Launcher, FirstSlurmHost) {
  EXPECT_EQ(FirstSlurmHost("localhost"), "localhost");
  EXPECT_EQ(FirstSlurmHost("node[01-04,7]"), "node01");
  EXPECT_EQ(FirstSlurmHost("node[3,5-6],gpu1"), "node3");
  EXPECT_EQ(FirstSlurmHost("a1,b[1-2]"), "a1");
  EXPECT_EQ(FirstSlurmHost("rack[2-3]-n[1-4]"), "rack2-n1");
}

// Where ListenForStore bound, closing the socket.
std::string BoundTo(const std::string& host, bool fallback, bool remote_peers) {
  StoreSocket s = ListenForStore(host, 0, fallback, remote_peers);
  EXPECT_GT(s.port, 0);
  ::close(s.fd);
  return s.bind;
}

TEST(StoreSocket, BindsTheAddressItIsGivenAndFallsBackOnlyWhenItMust) {
  EXPECT_EQ(BoundTo("127.0.0.1", false, false), "127.0.0.1");             // a spawn: loopback only
  EXPECT_NE(BoundTo("localhost", true, false), "*");  // every rank on this host: no fallback
  EXPECT_EQ(BoundTo("127.0.0.1", true, true), "*");  // loopback cannot serve other hosts
  EXPECT_EQ(BoundTo("192.0.2.7", true, false), "*");  // TEST-NET-1: not an address of this host
  try {
    BoundTo("192.0.2.7", false, false);
    FAIL() << "bound an address this host does not have";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddpbench
