// Rendezvous and process group of one rank: c10d's TCPStore (served by the
// launcher, or by rank 0) and c10d's own Gloo or NCCL backend, exactly what
// torch.distributed.init_process_group builds. This is the only file that
// includes ProcessGroupGloo.hpp: the torch wheel ships no Gloo headers, so it
// is compiled against Debian's libgloo-dev headers (declarations only; every
// Gloo symbol comes from libtorch_cpu, and the class holds Gloo objects only
// through shared_ptr, so its layout does not depend on the Gloo version).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DDPBENCH_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include "harness/dist.h"
#include "harness/flight_watch.h"
#include "harness/recording_backend.h"
#include "harness/shm_backend.h"
#include "planning/shm_chunks.h"
#include "base/config.h"
#include "planning/mesh.h"
#include "base/log.h"
#include "harness/socket_ifname.h"
#include "harness/store_socket.h"

namespace ddpbench {
namespace {

// GLOO_SOCKET_IFNAME=eth0,eth1 as in torch.distributed: one Gloo device per
// interface; otherwise loopback for ranks ddpbench spawned on this host, else the
// address this host's name resolves to.
std::vector<std::shared_ptr<::gloo::transport::Device>> GlooDevices(bool local_only) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names && *names) {
    std::stringstream ss(names);
    std::string name;
    while (std::getline(ss, name, ','))
      if (!name.empty()) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  }
  if (devices.empty() && local_only) devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  if (devices.empty()) devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

}  // namespace

void DistContext::Connect(double timeout_s, bool cuda, bool nccl) {
  const auto timeout = std::chrono::milliseconds(CheckedMilliseconds("--timeout", timeout_s));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(master_port);
  opts.isServer = rank == 0 && !store_served;
  opts.numWorkers = world;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    // Rank 0 serves on MASTER_ADDR's interface only (every interface only
    // when that is not an address of this host, e.g. behind NAT, or is
    // loopback here while ranks on other hosts must reach it).
    if (opts.isServer) {
      StoreSocket listener = ListenForStore(master_addr, master_port, true, local_world < world);
      opts.masterListenFd = listener.fd;
      store_bind = listener.bind;
      if (listener.bind == "*")
        LogWarn("MASTER_ADDR={} is not an address of this host that the other hosts reach: the store "
                "listens on every interface", master_addr);
    } else if (store_served) {
      store_bind = launcher == "spawn" ? "127.0.0.1" : launcher + "-agent";
    }
    store = c10::make_intrusive<c10d::TCPStore>(master_addr, opts);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("rank {}: rendezvous at {}:{} ({}) failed: {}", rank, master_addr,
                                         master_port, opts.isServer ? "serving the store" : "store client",
                                         e.what()));
  }
  // A prefix of our own, so a launcher's keys (torchrun's agent) never collide.
  store = c10::make_intrusive<c10d::PrefixStore>(store_prefix, store);

  // NCCL's bootstrap listens where the store does (socket_ifname.h).
  const SocketIfname ifname = ChooseSocketIfname(std::getenv("NCCL_SOCKET_IFNAME"), local_world == world, master_addr);
  if (ifname.source != "user" && !ifname.name.empty()) ::setenv("NCCL_SOCKET_IFNAME", ifname.name.c_str(), 1);
  socket_ifname = ifname.Describe();

  store_ = store;
  timeout_s_ = timeout_s;
  cuda_ = cuda;
  nccl_ = nccl;
  std::vector<int> everyone(world);
  std::iota(everyone.begin(), everyone.end(), 0);
  group = MakeGroup(store, rank, everyone, "");
  watch_ = std::make_shared<FlightWatch>(store, rank, world);
  LogInfo("joined {} ranks ({}, rendezvous {}:{})", world, backend, master_addr, master_port);
}

c10::intrusive_ptr<c10d::ProcessGroup> DistContext::MakeGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                              int group_rank, const std::vector<int>& ranks,
                                                              const std::string& name) {
  const int size = static_cast<int>(ranks.size());
  const auto timeout = std::chrono::milliseconds(CheckedMilliseconds("--timeout", timeout_s_));
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, group_rank, size);
  if (nccl_) {
#ifdef DDPBENCH_WITH_CUDA
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, group_rank, size, options);
    nccl->setTimeout(timeout);
    pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::NCCL, nccl);
    pg->setDefaultBackend(c10d::ProcessGroup::NCCL);
    backend = "nccl";
    group_backends.push_back("nccl");
#else
    throw std::runtime_error("this build of ddpbench has no NCCL");
#endif
  } else {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices = GlooDevices(launcher == "spawn");
    c10::intrusive_ptr<c10d::Backend> gloo;
    try {
      gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, group_rank, size, options);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("rank {}: connecting the Gloo process group{} ({} ranks via {}:{}) "
                                           "failed: {}", rank, name.empty() ? "" : " " + name, size, master_addr,
                                           master_port, e.what()));
    }
    const std::string label = name.empty() ? "world" : name;
    c10::intrusive_ptr<c10d::Backend> cpu = gloo;
    std::string described = "gloo";
    if (!cuda_ && UseShm(ranks, label)) {
      std::string why_not;
      auto shm = MakeShmBackend({store, group_rank, ranks, label, timeout, shm_slot_bytes, shm_p2p_bytes, gloo},
                                &why_not);
      described = shm ? "shm" : fmt::format("gloo(shm: {})", why_not);
      if (shm) cpu = shm;
      if (shm && name.empty()) shm_world = shm;
    }
    group_backends.push_back(described);
    cpu = RecordingBackend(cpu, label, ranks);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::GLOO, cpu);
    if (cuda_) pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::GLOO, gloo);
    pg->setDefaultBackend(c10d::ProcessGroup::GLOO);
    if (name.empty()) {  // the world's backend is the run's
      backend = cpu->getBackendName();
      comm_lanes = backend == "shm" ? 1 : options->threads;
    }
  }
  return pg;
}

bool DistContext::UseShm(const std::vector<int>& ranks, const std::string& label) const {
  if (cpu_backend == "gloo") return false;
  if (OnOneHost(ranks, local_world)) return true;
  if (cpu_backend == "shm")
    throw ConfigError(fmt::format("--cpu-backend=shm: group {} (ranks {}..{}) spans hosts of {} ranks each; shared "
                                  "memory joins ranks on one host: use --cpu-backend=auto (shared memory inside a "
                                  "host, Gloo between) or gloo", label, ranks.front(), ranks.back(), local_world));
  return false;
}

std::string DistContext::CommBackend() const {
  std::vector<std::string> distinct;
  for (const auto& b : group_backends)
    if (std::find(distinct.begin(), distinct.end(), b) == distinct.end()) distinct.push_back(b);
  return fmt::format("{}", fmt::join(distinct, "+"));
}

std::string BackendName(c10d::ProcessGroup& group) {
  if (group.getBackendType() == c10d::ProcessGroup::NCCL) return "nccl";
  return group.getBackend(c10::DeviceType::CPU)->getBackendName();
}

void DistContext::ConnectMesh(int replicas, bool pipeline) {
  mesh = MeshOf(rank, world, replicas);
  // Each rank makes the two groups it is in, its group first, each over its
  // own prefix of the store (Gloo connects a group's members as it is made;
  // every rank waits on its group before its replicate group, so none waits
  // in a circle).
  mesh_group = NewGroup(fmt::format("group{}", mesh.replica), mesh.group_ranks);
  replicate_group = NewGroup(fmt::format("replicate{}", mesh.index), mesh.replicate_ranks);
  LogInfo("mesh: {} (group ranks {}..{}, replicate group of {} ranks)", mesh.Describe(pipeline), mesh.group_ranks.front(),
          mesh.group_ranks.back(), replicas);
  if (rank == 0 && local_world < world && !GroupsWithinNodes(mesh.group_size, local_world))
    LogWarn("--replicate-degree={}: {} of {} ranks do not fit in a node's {}: what stays inside a group "
            "(all-gathers and reduce-scatters, stage hand-offs) crosses between nodes; a degree of world / ranks "
            "per node = {} keeps it inside", replicas, pipeline ? "pipelines" : "shard groups", mesh.group_size,
            local_world, world / local_world);
}

c10::intrusive_ptr<c10d::ProcessGroup> DistContext::NewGroup(const std::string& name, const std::vector<int>& ranks) {
  const auto at = std::find(ranks.begin(), ranks.end(), rank);
  if (at == ranks.end()) return {};
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(fmt::format("group/{}/", name), store_);
  return MakeGroup(prefixed, static_cast<int>(at - ranks.begin()), ranks, name);
}

void DistContext::Shutdown() {
  watch_.reset();
  if (!group) return;
  Barrier();  // no rank tears its communicators down while another still uses them
  for (auto* sub : {&mesh_group, &replicate_group})
    if (*sub) {
      (*sub)->shutdown();
      sub->reset();
    }
  group->shutdown();
  group.reset();
  shm_world.reset();
  store_.reset();
}

}  // namespace ddpbench
