// Ranks on threads of one process, for the collectives' tests and
// micro-benchmarks: a TCPStore served here on a free port, and each rank's
// DistContext filled in as the spawn launcher fills it, ready for Connect.
#pragma once
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <string>

#include "harness/dist.h"

namespace ddpbench::testing {

// Also turns off torch's own c10d flight recorder: it is not safe for several
// ranks' Gloo groups on threads of one process (it crashes inserting into its
// map); ddpbench's recorder is its own (harness/flight_recorder.h).
inline c10::intrusive_ptr<c10d::TCPStore> ServeStoreOnFreePort() {
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
  c10d::TCPStoreOptions opts;
  opts.port = 0;
  opts.isServer = true;
  opts.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
}

// Rank `rank` of `world` on this host, joining the store served on `port`.
inline void AsSpawnedRank(DistContext& d, int rank, int world, int port, const std::string& cpu_backend) {
  d.rank = d.local_rank = rank;
  d.world = d.local_world = world;
  d.master_addr = "127.0.0.1";
  d.master_port = port;
  d.store_served = true;
  d.launcher = "spawn";
  d.cpu_backend = cpu_backend;
}

}  // namespace ddpbench::testing
