// The distributed context of one process: rank, world, the launcher that made
// it, and a c10d process group (Gloo on CPU, NCCL on CUDA) with the few
// collectives the harness itself needs (gathering figures to rank 0). World 1
// has no process group and every collective is the identity.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "planning/mesh.h"

namespace ddpbench {

struct RunConfig;
class FlightWatch;

struct DistContext {
  int rank = 0;
  int local_rank = 0;
  int world = 1;
  int local_world = 1;
  std::string launcher = "none";  // none|spawn|torchrun|slurm|mpi
  std::string backend;            // gloo|nccl ("" when world == 1)
  int comm_lanes = 1;             // collectives in flight at once: Gloo's threads, NCCL's one stream
  // --cpu-backend: gloo, shm (shared memory for every group; one spanning
  // hosts is refused) or auto (shared memory where a group's ranks share a
  // host); each rank's slot of a group's segment holds the largest bucket.
  std::string cpu_backend = "auto";
  int64_t shm_slot_bytes = 25 << 20;
  int64_t shm_p2p_bytes = 0;  // > 0: shared-memory groups carry point-to-point messages up to this size
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  c10::intrusive_ptr<c10d::Backend> shm_world;  // the world's shared-memory backend, when it has one
  // Each group's collectives as the row's comm_backend says them, in the order
  // made: shm, gloo, nccl, or "gloo(shm: WHY)" where shared memory was asked
  // for and could not be had (/dev/shm too small).
  std::vector<std::string> group_backends;
  // The distinct group_backends joined by '+' ("shm+gloo"); "" for world 1.
  std::string CommBackend() const;
  torch::Device device = torch::kCPU;  // where collective buffers live (NCCL: the GPU)
  // Rendezvous (from the launcher, app/launcher.h).
  std::string master_addr;
  int master_port = 0;
  bool store_served = false;  // else rank 0 serves the TCPStore
  std::string store_prefix = "ddpbench/";  // of every key (app/launcher.h: one per torchrun attempt)
  // Where the TCPStore listens, as the row reports it (set by Connect on rank
  // 0): the address bound, "*" for every interface, "torchrun-agent".
  std::string store_bind;
  // NCCL_SOCKET_IFNAME as this rank's NCCL bootstrap sees it, and why
  // (socket_ifname.h): "lo (loopback)", "eth0 (master_addr)", "ib0 (user)".
  std::string socket_ifname;

  // Joins the other ranks: c10d TCPStore rendezvous, then an NCCL process
  // group (`nccl`) or a Gloo one (CPU tensors, and CUDA tensors too when
  // `cuda`: ranks that share a GPU) whose collectives time out after
  // timeout_s. Throws with the address and the rank when the rendezvous fails.
  void Connect(double timeout_s, bool cuda, bool nccl);
  // Shuts the process groups down (NCCL: its communicators, so that no
  // destroy_process_group warning is printed at exit). Collective.
  void Shutdown();

  // --replicate-degree (planning/mesh.h): this rank's place in the mesh, its
  // group's process group and its replicate group's (null until
  // ConnectMesh; the world group is the group when there is no mesh).
  MeshCoords mesh;
  c10::intrusive_ptr<c10d::ProcessGroup> mesh_group, replicate_group;
  // Collective, after Connect: cuts the world into `replicas` groups of
  // consecutive ranks and joins this rank's group and replicate group
  // (every rank makes them in the same order, over the same store);
  // `pipeline`: the groups are pipelines (else shard groups).
  void ConnectMesh(int replicas, bool pipeline);
  // The process group of `ranks` (this rank among them; null otherwise),
  // with the world group's backend and timeout, rendezvous under `name`.
  c10::intrusive_ptr<c10d::ProcessGroup> NewGroup(const std::string& name, const std::vector<int>& ranks);
  // The group this rank's strategy runs in: its group of the mesh, or the
  // world: this rank's place in it, its size, its process group.
  int group_rank() const { return mesh_group ? mesh.index : rank; }
  int group_world() const { return mesh_group ? mesh.group_size : world; }
  c10d::ProcessGroup* strategy_group() const { return (mesh_group ? mesh_group : group).get(); }

  // The ranks of a group read the same batches (pipeline stages on separate
  // ranks, --stage-ranks) instead of each its own share of the data: the
  // data is shared among the mesh's replicas (one share when there is none).
  bool same_data = false;

  bool is_root() const { return rank == 0; }
  // The shard of the data this rank reads: (rank, world), or with same_data
  // its replica's (replica, replicas); (0, 1) without a mesh.
  int data_rank() const { return same_data ? mesh.replica : rank; }
  int data_world() const { return same_data ? mesh.replicas : world; }
  void Barrier();
  // Every rank's values, concatenated in rank order (all ranks get them).
  std::vector<double> AllGather(const std::vector<double>& values);
  double AllReduceSum(double value);
  // Rank 0's values of `tensors` on every rank, coalesced into 250 MiB
  // buffers as torch's DDP does (its _sync_module_states and buffer
  // broadcast); `label` names the collective in errors. No-op for world 1
  // or no tensors.
  void BroadcastFromRoot(const std::vector<at::Tensor>& tensors, const char* label);
  // The same from rank `root` (tensors on `device`).
  void BroadcastFrom(int root, const std::vector<at::Tensor>& tensors, const char* label);
  double AllReduceMax(double value);
  // Every rank's `mine` on rank 0, in rank order, through the rendezvous
  // store under `key`/RANK (no size limit of a collective, no device copy);
  // other ranks get {}. World 1: {mine}. `label` names it in errors.
  std::vector<std::string> GatherTextToRoot(const std::string& key, const std::string& mine, const char* label);

 private:
  // The group of global `ranks` ("" names the world), this rank
  // `group_rank` of it; its Gloo backend is recorded (flight_recorder.h).
  c10::intrusive_ptr<c10d::ProcessGroup> MakeGroup(const c10::intrusive_ptr<c10d::Store>& store, int group_rank,
                                                   const std::vector<int>& ranks, const std::string& name);
  // Whether the group of global `ranks` (`label` in errors) uses shared memory (--cpu-backend).
  bool UseShm(const std::vector<int>& ranks, const std::string& label) const;
  c10::intrusive_ptr<c10d::Store> store_;  // the world's rendezvous, prefixed; sub-groups meet under it
  std::shared_ptr<FlightWatch> watch_;      // this rank's progress for the others (flight_watch.h)
  double timeout_s_ = 0;
  bool cuda_ = false, nccl_ = false;
};

// Names the collective this thread is in, so that a failure or a timeout is
// reported as "rank 1: DDP gradient all-reduce: ..." (see CurrentCollective).
class CollectiveLabel {
 public:
  explicit CollectiveLabel(const char* name);
  ~CollectiveLabel();
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;

 private:
  const char* previous_;
  int uncaught_;
};
// The backend `group` runs its CPU collectives on: gloo, shm or nccl.
std::string BackendName(c10d::ProcessGroup& group);

const char* CurrentCollective();  // nullptr outside any labelled collective
// The innermost labelled collective that an exception left (nullptr if none).
const char* FailedCollective();

}  // namespace ddpbench
