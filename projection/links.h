// Alpha-beta models of the links between devices and of the collectives the
// strategies run over them, as NCCL runs them and nccl-tests accounts for them
// (algbw = S / t; busbw = algbw x BusBwFactor). A link is (alpha, bandwidth):
// one message of b bytes costs alpha + b / bandwidth on one hop, one direction.
//   all-reduce, ring   t = 2(n-1) alpha + 2(n-1)/n S / B
//   all-reduce, tree   t = 2 ceil(log2 n) alpha + 2 S / B (pipelined)
//   reduce-scatter     t = (n-1) alpha + (n-1)/n S / B   (all-gather alike)
//   broadcast          t = (n-1) alpha + S / B            (ring, pipelined)
//   point-to-point     t = alpha + S / B
// Across nodes a collective runs hierarchically (reduce-scatter inside each
// node, the collective on 1/g of the data across nodes, all-gather inside).
// Presets (docs/projection.md gives each one's source) stand in for links
// that cannot be measured here; FitLink turns measured times into a link.
// Pure logic, no LibTorch.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddpbench {

enum class Collective { kAllReduce, kAllReduceTree, kReduceScatter, kAllGather, kBroadcast, kP2P };

struct LinkFit {
  double alpha_s = 0, bandwidth = 0;
};

struct Link {
  std::string name;
  double alpha_s = 0;      // per message (one step of a collective)
  double bandwidth = 0;    // bytes/s per direction of one device's connection
  std::string source;
  // Collectives measured on their own (a calibrated link: Gloo runs its
  // reduce-scatter as an all-to-all and its all-gather its own way, each with
  // its own cost): their fit replaces (alpha_s, bandwidth) in their formula.
  std::map<Collective, LinkFit> own;
  // The calibration's own times, (bytes, seconds) by size, of each collective
  // on `table_ranks` ranks: between its smallest and largest size a
  // collective on that many ranks is read from it (linear between the
  // neighbouring sizes), as one reads an nccl-tests table, so what a fit
  // smooths over (a shaped link's burst, a size the transport handles its
  // own way) stays in the prediction; outside it, and on other rank counts,
  // the fits. Overrides and shared NICs describe another link: they drop it.
  std::map<Collective, std::vector<std::pair<double, double>>> table{};
  int table_ranks = 0;
  // Collectives in flight at once over it, as the calibrating process
  // group ran them (Gloo: its 2 threads; NCCL and the presets: 1). Kept by
  // overrides, which change the wire, not the transport.
  int lanes = 1;
};

// `link` with every alpha (its own fits' too) times `alpha_factor` and every
// bandwidth times `bw_factor`: an override or a shared NIC keeps what the
// calibration measured about each collective relative to the others (its
// table goes unless both factors are 1).
Link ScaleLink(Link link, double alpha_factor, double bw_factor);

// Keeps measured (bytes, seconds) points of `c` on `ranks` ranks as the
// link's table (sorted by size). Every collective in a table is on the same
// ranks: points on other ranks than the table's are not kept.
void AddToTable(Link* link, Collective c, int ranks, std::vector<std::pair<double, double>> points);

std::string CollectiveName(Collective c);
std::optional<Collective> CollectiveFromName(const std::string& name);

// The named presets: nvlink3, nvlink4, pcie3, pcie4, pcie5, ib-hdr200,
// ib-ndr400, 100gbe, 25gbe.
const std::vector<Link>& LinkPresets();

// A link from --intra/--inter: a preset name, or "measured" (the profile's
// own fit, `measured`), each optionally followed by overrides, or overrides
// alone: "100gbe", "measured,bw=500Mbit/s", "alpha=20us,bw=12.5GB/s".
// alpha takes s, ms, us, ns; bw takes GB/s, MB/s, Gbit/s, Mbit/s (and
// gbit, mbit as tc writes them). ConfigError naming the value otherwise.
Link ParseLink(const std::string& spec, const Link* measured, const std::string& flag);

// (alpha count, bytes factor): t = count x alpha + factor x S / bandwidth.
std::pair<double, double> CollectiveTerms(Collective c, int ranks);
double BusBwFactor(Collective c, int ranks);
// Seconds for `c` of `bytes` on `ranks` devices joined by `link`: read from
// the link's table where it covers them, else the collective's own fit where
// the link has one, else all-reduce takes the faster of ring and tree, as
// NCCL's tuner does.
double CollectiveSeconds(const Link& link, Collective c, int ranks, double bytes);

// Devices: `per_node` on the intra link in each of `nodes` nodes; each node's
// devices share `nics` NICs on the inter link (0: one per device).
struct Topology {
  int per_node = 1, nodes = 1, nics = 0;
  Link intra, inter;
  int world() const { return per_node * nodes; }
};
// Seconds for `c` of `bytes` over the whole topology (hierarchical across
// nodes; point-to-point: between neighbouring ranks, across nodes when
// `across` and there is more than one node).
double TopologySeconds(const Topology& t, Collective c, double bytes, bool across = false);

// A world of `t` cut into groups of `group` consecutive ranks (a shard group
// of HSDP, a pipeline of pp x dp), the groups replicas of each other: the
// topology of one group, and of one replicate group (the ranks at the same
// place in every group). A group within a node runs on the intra link; the
// replicate groups of a node cross between nodes at once, each device over
// its share of the node's NICs. A group that neither divides nor is a
// multiple of the ranks per node is taken as spanning nodes.
//
// Replicate groups that do not cross at once (a pipeline's stages finish at
// different times) are priced by `alone`, one replicate group crossing with
// the node's link to itself, and `crossings`, how many of a node's replicate
// groups cross at that rate at once (its NICs, or all of them where each
// device has its own; all when the replicas stay inside a node): see
// SharedLinkEnds.
struct MeshTopology {
  Topology group, replicas;
  Topology alone;
  int crossings = 1;
};
MeshTopology SplitTopology(const Topology& t, int group);

// Transfers over one shared link, each started at `start_ms[i]` and taking
// `alone_ms[i]` with the link to itself: at most `capacity` run at full rate,
// more share it equally (processor sharing). Each one's end, in ms.
// std::invalid_argument on sizes that differ, a time below 0 or capacity < 1.
std::vector<double> SharedLinkEnds(const std::vector<double>& start_ms, const std::vector<double>& alone_ms,
                                   double capacity);

// The link whose model is closest to measured (bytes, seconds) points of `c`
// on `ranks`: least squares on relative error (sizes span orders of
// magnitude, so every point counts alike). std::invalid_argument when the
// points cannot give one (fewer than two sizes, times not growing with size).
Link FitLink(const std::vector<std::pair<double, double>>& points, Collective c, int ranks,
             const std::string& name);

}  // namespace ddpbench
