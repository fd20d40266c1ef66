// Ranks: where a process's rank, world and rendezvous address come from.
// ddpbench either joins the ranks an existing launcher made (torchrun, Slurm's
// srun, Open MPI's mpirun, or plain RANK/WORLD_SIZE/MASTER_* variables), or,
// as `torchrun --standalone` does, starts --gpus rank processes of itself,
// hosts their TCPStore, and watches them: if one fails or is killed, the
// others are stopped and the run ends naming it. Detection reads the
// environment through a lookup function so tests can feed it any launcher's.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ddpbench {

struct RunConfig;

struct LaunchEnv {
  std::string launcher = "none";  // none|spawn|torchrun|slurm|mpi|env
  int rank = 0;
  int local_rank = 0;
  int world = 1;
  int local_world = 1;
  std::string master_addr;  // TCPStore host
  int master_port = 0;
  // The TCPStore is already served by someone else (torchrun's agent, or the
  // spawning ddpbench parent); otherwise rank 0 serves it.
  bool store_served = false;
  // The store keys' prefix. torchrun's agent store (the default since torch
  // 2.5) outlives the worker group, so under it a restarted group keys its
  // own under its attempt (TORCHELASTIC_RESTART_COUNT): a failed group's keys,
  // its failure notice among them, must not reach the next.
  std::string store_prefix = "ddpbench/";
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup ProcessEnv();

// Reads the launcher variables. Throws ConfigError naming a variable whose
// value is malformed or inconsistent (e.g. RANK=3 with WORLD_SIZE=2).
LaunchEnv DetectLaunchEnv(const EnvLookup& env);

// The first host of a Slurm node list: "node[01-04,7],gpu3" -> "node01".
std::string FirstSlurmHost(const std::string& nodelist);

// Starts `world` ranks of this executable with the same arguments, hosting
// their TCPStore on 127.0.0.1, and waits for them. Returns the exit code of
// the run: 0, or the first failing rank's code (1 when it was killed by a
// signal), after stopping the others and printing one line naming the rank.
int SpawnRanks(const RunConfig& config, int world, int argc, char** argv);

}  // namespace ddpbench
