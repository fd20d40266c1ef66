#include "app/launcher.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "base/config.h"
#include "base/log.h"
#include "harness/flight_watch.h"
#include "harness/shm_names.h"
#include "harness/store_socket.h"

extern char** environ;

namespace ddpbench {
namespace {

int ParseInt(const std::string& name, const std::string& value, int minimum) {
  size_t pos = 0;
  long v = -1;
  try {
    v = std::stol(value, &pos);
  } catch (...) {
    pos = std::string::npos;
  }
  if (pos != value.size() || v < minimum || v > 1 << 30)
    throw ConfigError(fmt::format("{}={}: must be an integer >= {}", name, value.empty() ? "''" : value, minimum));
  return static_cast<int>(v);
}

class Vars {
 public:
  Vars(const EnvLookup& env, std::string launcher) : env_(env), launcher_(std::move(launcher)) {}
  bool Has(const std::string& name) const { return env_(name).has_value(); }
  std::string Str(const std::string& name) const {
    auto v = env_(name);
    if (!v || v->empty())
      throw ConfigError(fmt::format("{} is not set, but the {} launcher variables are: every rank needs it",
                                    name, launcher_));
    return *v;
  }
  std::string StrOr(const std::string& name, const std::string& fallback) const {
    auto v = env_(name);
    return v && !v->empty() ? *v : fallback;
  }
  int Int(const std::string& name, int minimum) const { return ParseInt(name, Str(name), minimum); }
  int IntOr(const std::string& name, int minimum, int fallback) const {
    return Has(name) ? Int(name, minimum) : fallback;
  }

 private:
  const EnvLookup& env_;
  std::string launcher_;
};

// SLURM_STEP_TASKS_PER_NODE ("2(x3),1"): the task count of node `node`.
int SlurmTasksOnNode(const std::string& spec, int node) {
  int index = 0;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int count = 0, repeat = 1;
    if (std::sscanf(part.c_str(), "%d(x%d)", &count, &repeat) < 1) return -1;
    if (node < index + repeat) return count;
    index += repeat;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return -1;
}

void CheckRanks(const LaunchEnv& e) {
  auto bad = [&](const std::string& what) {
    throw ConfigError(fmt::format("{} launcher: {} (rank {}, local rank {}, world {}, local world {})",
                                  e.launcher, what, e.rank, e.local_rank, e.world, e.local_world));
  };
  if (e.rank >= e.world) bad("the rank must be below the world size");
  if (e.local_world > e.world) bad("the local world cannot exceed the world");
  if (e.local_rank >= e.local_world) bad("the local rank must be below the local world size");
  if (e.master_port < 1 || e.master_port > 65535)
    throw ConfigError(fmt::format("MASTER_PORT={}: must be 1..65535", e.master_port));
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::string FirstSlurmHost(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
  }
  // "node[01-04,7]" -> "node01": the first number of every bracket (zero
  // padding kept).
  std::string host;
  for (size_t i = 0; i < end; ++i) {
    if (nodelist[i] != '[') {
      host += nodelist[i];
      continue;
    }
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos || close > end) close = end;
    std::string inner = nodelist.substr(i + 1, close - i - 1);
    host += inner.substr(0, inner.find_first_of(",-"));
    i = close;
  }
  return host;
}

LaunchEnv DetectLaunchEnv(const EnvLookup& env) {
  LaunchEnv e;
  // torchrun's variables, which ddpbench's own spawn and plain exports share.
  auto torch_style = [&](const std::string& launcher) {
    e.launcher = launcher;
    Vars v(env, launcher);
    e.world = v.Int("WORLD_SIZE", 1);
    e.rank = v.Int("RANK", 0);
    e.local_rank = v.IntOr("LOCAL_RANK", 0, e.rank);
    e.local_world = v.IntOr("LOCAL_WORLD_SIZE", 1, e.world);
    e.master_addr = v.Str("MASTER_ADDR");
    e.master_port = v.Int("MASTER_PORT", 1);
    e.store_served = launcher == "spawn" ||
                     (launcher == "torchrun" && v.StrOr("TORCHELASTIC_USE_AGENT_STORE", "") == "True");
    if (e.store_served && launcher == "torchrun")
      e.store_prefix = fmt::format("ddpbench/attempt-{}/", v.IntOr("TORCHELASTIC_RESTART_COUNT", 0, 0));
  };
  auto spawn = env("DDPBENCH_LAUNCHER");
  if (spawn && *spawn == "spawn") {
    torch_style("spawn");
  } else if (env("TORCHELASTIC_RUN_ID")) {
    torch_style("torchrun");
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    // Before Slurm: mpirun inside an allocation starts its daemons with srun,
    // so its ranks also carry a (one-task) step's SLURM_* variables.
    e.launcher = "mpi";
    Vars v(env, e.launcher);
    e.world = v.Int("OMPI_COMM_WORLD_SIZE", 1);
    e.rank = v.Int("OMPI_COMM_WORLD_RANK", 0);
    e.local_rank = v.IntOr("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0);
    e.local_world = v.IntOr("OMPI_COMM_WORLD_LOCAL_SIZE", 1, e.world);
    if (v.Has("MASTER_ADDR")) {
      e.master_addr = v.Str("MASTER_ADDR");
    } else if (e.local_world == e.world) {
      e.master_addr = "127.0.0.1";
    } else {
      throw ConfigError(fmt::format(
          "mpirun started {} ranks on several hosts but MASTER_ADDR is not set: export rank 0's host "
          "(mpirun -x MASTER_ADDR=HOST -x MASTER_PORT=PORT)", e.world));
    }
    e.master_port = v.IntOr("MASTER_PORT", 1, 29500);
  } else if (env("SLURM_STEP_NUM_TASKS") && env("SLURM_PROCID")) {
    // srun: one task per rank. (A batch script's own shell has SLURM_NTASKS
    // but no step variables, so ddpbench run there spawns its ranks itself.)
    e.launcher = "slurm";
    Vars v(env, e.launcher);
    e.world = v.Int("SLURM_STEP_NUM_TASKS", 1);
    e.rank = v.Int("SLURM_PROCID", 0);
    e.local_rank = v.IntOr("SLURM_LOCALID", 0, 0);
    int node = v.IntOr("SLURM_NODEID", 0, 0);
    e.local_world = SlurmTasksOnNode(v.StrOr("SLURM_STEP_TASKS_PER_NODE", ""), node);
    if (e.local_world < 1) e.local_world = e.world / v.IntOr("SLURM_STEP_NUM_NODES", 1, 1);
    std::string nodes = v.StrOr("SLURM_STEP_NODELIST", v.StrOr("SLURM_JOB_NODELIST", v.StrOr("SLURM_NODELIST", "")));
    e.master_addr = v.StrOr("MASTER_ADDR", nodes.empty() ? "" : FirstSlurmHost(nodes));
    if (e.master_addr.empty()) e.master_addr = v.Str("SLURM_STEP_NODELIST");
    // One port per job, as Lightning derives it, unless MASTER_PORT is set.
    e.master_port = v.Has("MASTER_PORT") ? v.Int("MASTER_PORT", 1)
                                        : 15000 + v.IntOr("SLURM_JOB_ID", 0, 0) % 10000;
  } else if (env("RANK") && env("WORLD_SIZE")) {
    torch_style("env");
  } else {
    return e;
  }
  CheckRanks(e);
  return e;
}

namespace {

// The children, for the signal handler (async-signal-safe: kill only).
constexpr int kMaxChildren = 1024;
volatile sig_atomic_t g_num_children = 0;
pid_t g_children[kMaxChildren];
volatile sig_atomic_t g_signal = 0;

// SIGTERM and SIGUSR1 (Slurm's --signal) reach the ranks as they are, so a
// run with snapshots can finish its step and write one; SIGINT stops them.
void ForwardSignal(int sig) {
  g_signal = sig;
  const int forward = sig == SIGINT ? SIGTERM : sig;
  for (int i = 0; i < g_num_children; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], forward);
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

bool IsLauncherVar(const char* entry) {
  static const char* kPrefixes[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                    "MASTER_PORT=", "DDPBENCH_LAUNCHER=", "TORCHELASTIC_"};
  for (const char* p : kPrefixes)
    if (std::strncmp(entry, p, std::strlen(p)) == 0) return true;
  return false;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({})", sig, strsignal(sig));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

// Waits for every rank. The first rank that fails stops the others (SIGTERM,
// then SIGKILL after 5 s) and its exit code is returned; a rank killed by a
// signal the launcher did not send is named at once, with what it was doing
// last (its flight progress in `store`), the others are asked for their
// flight records first, and the code is kExitRankLost. After a signal the
// ranks get `grace_s` to finish their step and snapshot: if they all exit
// with kExitPreempted (or 0) that is the answer, else the signal's 128 + n.
int WaitForRanks(std::vector<pid_t>& pids, double grace_s, const c10::intrusive_ptr<c10d::Store>& store) {
  using Clock = std::chrono::steady_clock;
  const int world = static_cast<int>(pids.size());
  int remaining = world, exit_code = 0, failed_rank = -1, preempted = 0;
  std::string failure;
  Clock::time_point kill_at = Clock::time_point::max();
  bool signalled = false, named_at_once = false;
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, failed_rank >= 0 || g_signal ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;  // no children left
    if (pid == 0) {
      if (g_signal && !signalled) {  // interrupted: the ranks stop (and may snapshot) first
        signalled = true;
        kill_at = std::min(kill_at, Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
      }
      if (Clock::now() >= kill_at)
        for (int r = 0; r < world; ++r)
          if (pids[r] > 0) ::kill(pids[r], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int rank = -1;
    for (int r = 0; r < world; ++r)
      if (pids[r] == pid) rank = r;
    if (rank < 0) continue;
    pids[rank] = -1;
    g_children[rank] = -1;
    --remaining;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == kExitPreempted) ++preempted;
    if ((code == 0 || code == kExitPreempted) || failed_rank != -1) continue;
    failed_rank = rank;
    exit_code = code >= 0 ? code : 1;
    failure = fmt::format("rank {} (pid {}) {}", rank, pid, Describe(status));
    if (WIFSIGNALED(status) && !g_signal) {
      exit_code = kExitRankLost;
      const std::string last = LastProgressOf(store, rank);
      if (!last.empty()) failure += "; it was last " + last;
      fmt::print(stderr, "ddpbench: error: {}\n", failure);
      named_at_once = true;
      failure.clear();
      std::vector<int> alive;
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) alive.push_back(r);
      AskForRecords(store, fmt::format("the launcher: rank {} died", rank), alive, 2.0);
    }
    if (remaining > 0) {
      failure += fmt::format("; stopped the other {} rank(s)", remaining);
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) ::kill(pids[r], SIGTERM);
    }
    kill_at = std::min(kill_at, Clock::now() + std::chrono::seconds(5));
  }
  if (failed_rank >= 0 && !g_signal) {
    if (!named_at_once) fmt::print(stderr, "ddpbench: error: {}\n", failure);
    else if (!failure.empty()) fmt::print(stderr, "ddpbench: error: {}\n", failure.substr(2));  // "; stopped ..."
    return exit_code;
  }
  if (g_signal && preempted == world) {
    fmt::print(stderr, "ddpbench: preempted (signal {}): every rank wrote its snapshot; run the same command "
               "to resume\n", static_cast<int>(g_signal));
    return kExitPreempted;
  }
  if (g_signal) {
    fmt::print(stderr, "ddpbench: error: interrupted (signal {}); stopped every rank{}\n", static_cast<int>(g_signal),
               failed_rank >= 0 ? " (" + failure + ")" : "");
    return 128 + g_signal;
  }
  return preempted > 0 ? kExitPreempted : 0;
}

}  // namespace

int SpawnRanks(const RunConfig& config, int world, int argc, char** argv) {
  if (world > kMaxChildren) throw ConfigError(fmt::format("--gpus={}: at most {} local ranks", world, kMaxChildren));
  // The parent hosts the store (as torchrun's agent does) on a port the
  // kernel picks, so there is no race for a "free" port, and on loopback
  // only: every rank is on this host.
  StoreSocket listener = ListenForStore("127.0.0.1", 0, false);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(listener.port);
  opts.masterListenFd = listener.fd;
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::milliseconds(CheckedMilliseconds("--timeout", config.timeout_s));
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  const int port = store->getPort();
  const std::string self = SelfExe();

  // Everything the children need is built before fork (no allocation after).
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e)
    if (!IsLauncherVar(*e)) base.emplace_back(*e);
  std::vector<std::vector<std::string>> envs(world, base);
  std::vector<std::vector<char*>> envp(world);
  for (int r = 0; r < world; ++r) {
    for (const auto& kv : {fmt::format("RANK={}", r), fmt::format("LOCAL_RANK={}", r),
                           fmt::format("WORLD_SIZE={}", world), fmt::format("LOCAL_WORLD_SIZE={}", world),
                           std::string("MASTER_ADDR=127.0.0.1"), fmt::format("MASTER_PORT={}", port),
                           std::string("DDPBENCH_LAUNCHER=spawn")})
      envs[r].push_back(kv);
    for (auto& s : envs[r]) envp[r].push_back(s.data());
    envp[r].push_back(nullptr);
  }
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);

  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {}, old_usr1 {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);

  const pid_t parent = ::getpid();
  std::vector<pid_t> pids(world, -1);
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      ForwardSignal(SIGTERM);
      throw std::runtime_error(fmt::format("fork for rank {} failed: {}", r, std::strerror(errno)));
    }
    if (pid == 0) {
      // A rank never outlives the parent that watches it.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execve(self.c_str(), args.data(), envp[r].data());
      ::_exit(127);
    }
    pids[r] = pid;
    g_children[r] = pid;
    g_num_children = r + 1;
  }

  const std::vector<int> spawned(pids.begin(), pids.end());
  const int code = WaitForRanks(pids, !config.snapshot_dir.empty() ? config.timeout_s : 5.0, store);
  g_num_children = 0;
  // Every rank is gone: what a killed one left in /dev/shm goes too.
  if (const int left = UnlinkSegmentsOf(spawned); left > 0 && code == 0)
    LogWarn("removed {} shared-memory segment(s) the ranks left in /dev/shm", left);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  return code;
}

}  // namespace ddpbench
