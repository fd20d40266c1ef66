// Collective times on alpha-beta links, the presets and the fit (links.h).
#include "projection/links.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "base/config.h"

namespace ddpbench {

std::string CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kAllReduceTree: return "all-reduce (tree)";
    case Collective::kReduceScatter: return "reduce-scatter";
    case Collective::kAllGather: return "all-gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kP2P: return "point-to-point";
  }
  return "?";
}

std::optional<Collective> CollectiveFromName(const std::string& name) {
  for (Collective c : {Collective::kAllReduce, Collective::kAllReduceTree, Collective::kReduceScatter,
                       Collective::kAllGather, Collective::kBroadcast, Collective::kP2P})
    if (CollectiveName(c) == name) return c;
  return std::nullopt;
}

const std::vector<Link>& LinkPresets() {
  // Bandwidth per device and direction from the published specifications;
  // alpha is the order of magnitude of one step's latency on such a link.
  static const std::vector<Link> kPresets = {
      {"nvlink2", 3e-6, 150e9, "V100 SXM2: 6 NVLink 2 links x 25 GB/s per direction", {}},
      {"nvlink3", 3e-6, 300e9, "A100 SXM: NVLink 3, 600 GB/s per GPU in both directions", {}},
      {"nvlink4", 3e-6, 450e9, "H100 SXM: NVLink 4, 900 GB/s per GPU in both directions", {}},
      {"pcie3", 5e-6, 15.75e9, "PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b", {}},
      {"pcie4", 5e-6, 31.5e9, "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b", {}},
      {"pcie5", 5e-6, 63e9, "PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b", {}},
      {"ib-hdr200", 5e-6, 25e9, "InfiniBand HDR: 200 Gb/s per port (ConnectX-6)", {}},
      {"ib-ndr400", 5e-6, 50e9, "InfiniBand NDR: 400 Gb/s per port (ConnectX-7)", {}},
      {"100gbe", 20e-6, 12.5e9, "IEEE 802.3 100 Gb/s Ethernet", {}},
      {"25gbe", 30e-6, 3.125e9, "IEEE 802.3 25 Gb/s Ethernet", {}},
      {"10gbe", 30e-6, 1.25e9, "IEEE 802.3 10 Gb/s Ethernet", {}},
  };
  return kPresets;
}

namespace {

std::string PresetNames() {
  std::string names;
  for (const Link& l : LinkPresets()) names += (names.empty() ? "" : ", ") + l.name;
  return names;
}

// "20us" -> 2e-5; "500Mbit/s" -> 6.25e7 bytes/s. `units` maps suffixes to factors.
double ParseQuantity(const std::string& text, const std::vector<std::pair<std::string, double>>& units,
                     const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  if (end == text.c_str() || !std::isfinite(v) || v <= 0)
    throw ConfigError(fmt::format("{}: not a positive number", what));
  for (const auto& [suffix, factor] : units)
    if (unit == suffix) return v * factor;
  std::string accepted;
  for (const auto& u : units) accepted += (accepted.empty() ? "" : ", ") + u.first;
  throw ConfigError(fmt::format("{}: unit '{}' is not accepted; accepted: {}", what, unit, accepted));
}

// A preset's link or the profile's measured one.
Link BaseLink(const std::string& name, const Link* measured, const std::string& where) {
  if (name == "measured") {
    if (!measured) throw ConfigError(fmt::format("{}: the profile has no measured link (calibrate with --gpus=2)", where));
    return *measured;
  }
  for (const Link& l : LinkPresets())
    if (l.name == name) return l;
  throw ConfigError(fmt::format("{}: unknown link '{}'; accepted: measured, {}, optionally followed by "
                                ",alpha=TIME,bw=RATE (or alpha=20us,bw=12.5GB/s alone)", where, name, PresetNames()));
}

}  // namespace

Link ParseLink(const std::string& spec, const Link* measured, const std::string& flag) {
  static const std::vector<std::pair<std::string, double>> kTime = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6},
                                                                    {"ns", 1e-9}};
  static const std::vector<std::pair<std::string, double>> kRate = {
      {"GB/s", 1e9}, {"MB/s", 1e6}, {"Gbit/s", 1.25e8}, {"Mbit/s", 1.25e5}, {"gbit", 1.25e8}, {"mbit", 1.25e5}};
  const std::string where = fmt::format("{}={}", flag, spec);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = spec.find(',', start);
    parts.push_back(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  Link link;
  const bool have_base = parts[0].find('=') == std::string::npos;
  if (have_base) link = BaseLink(parts[0], measured, where);
  const Link base = link;
  bool have_alpha = false, have_bw = false;
  for (size_t i = have_base ? 1 : 0; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq == std::string::npos ? parts[i].size() : eq);
    const std::string value = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    if (key == "alpha") {
      link.alpha_s = ParseQuantity(value, kTime, where + " (alpha)");
      have_alpha = true;
    } else if (key == "bw") {
      link.bandwidth = ParseQuantity(value, kRate, where + " (bw)");
      have_bw = true;
    } else {
      throw ConfigError(fmt::format("{}: '{}' is not accepted; want a preset or measured first, then alpha=TIME "
                                    "and/or bw=RATE, comma-separated", where, parts[i]));
    }
  }
  if (!have_base && !(have_alpha && have_bw))
    throw ConfigError(fmt::format("{}: give a preset or measured, or both alpha= and bw=", where));
  // The collectives' own fits move with the link they were measured on.
  for (auto& [c, fit] : link.own) {
    if (have_bw) fit.bandwidth *= link.bandwidth / base.bandwidth;
    if (have_alpha) fit.alpha_s = base.alpha_s > 0 ? fit.alpha_s * link.alpha_s / base.alpha_s : link.alpha_s;
  }
  if (have_alpha || have_bw) {
    link.table.clear();  // times measured on another link
    link.name = spec;
    link.source = have_base ? link.source + " (given: " + spec + ")" : "given: " + spec;
  }
  return link;
}

std::pair<double, double> CollectiveTerms(Collective c, int n) {
  if (n <= 1) return {0.0, 0.0};
  switch (c) {
    case Collective::kAllReduce: return {2.0 * (n - 1), 2.0 * (n - 1) / n};
    case Collective::kAllReduceTree: return {2.0 * std::ceil(std::log2(n)), 2.0};
    case Collective::kReduceScatter:
    case Collective::kAllGather: return {n - 1.0, (n - 1.0) / n};
    case Collective::kBroadcast: return {n - 1.0, 1.0};
    case Collective::kP2P: return {1.0, 1.0};
  }
  return {0.0, 0.0};
}

double BusBwFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kAllReduceTree: return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather: return (n - 1.0) / n;
    default: return 1.0;
  }
}

Link ScaleLink(Link link, double alpha_factor, double bw_factor) {
  link.alpha_s *= alpha_factor;
  link.bandwidth *= bw_factor;
  for (auto& [c, fit] : link.own) fit = {fit.alpha_s * alpha_factor, fit.bandwidth * bw_factor};
  if (alpha_factor != 1.0 || bw_factor != 1.0) link.table.clear();
  return link;
}

void AddToTable(Link* link, Collective c, int ranks, std::vector<std::pair<double, double>> points) {
  if (ranks < 2 || points.size() < 2) return;
  if (link->table.empty()) link->table_ranks = ranks;
  if (ranks != link->table_ranks) return;
  std::sort(points.begin(), points.end());
  link->table[c] = std::move(points);
}

namespace {

// `bytes` read from measured (bytes, seconds) points sorted by size: linear
// between the two neighbouring sizes; nullopt outside them.
std::optional<double> Interpolate(const std::vector<std::pair<double, double>>& points, double bytes) {
  if (points.size() < 2 || bytes < points.front().first || bytes > points.back().first) return std::nullopt;
  auto hi = std::lower_bound(points.begin(), points.end(), bytes,
                             [](const std::pair<double, double>& p, double b) { return p.first < b; });
  if (hi == points.begin()) return hi->second;
  auto lo = std::prev(hi);
  const double f = (bytes - lo->first) / (hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

}  // namespace

double CollectiveSeconds(const Link& link, Collective c, int ranks, double bytes) {
  if (ranks > 1 && ranks == link.table_ranks)
    if (auto row = link.table.find(c); row != link.table.end())
      if (const auto t = Interpolate(row->second, bytes)) return *t;
  auto time = [&](Collective k) {
    const auto [a, f] = CollectiveTerms(k, ranks);
    const auto own = link.own.find(k);
    const LinkFit fit = own != link.own.end() ? own->second : LinkFit{link.alpha_s, link.bandwidth};
    return a * fit.alpha_s + f * bytes / fit.bandwidth;
  };
  if (c == Collective::kAllReduce && link.own.count(c)) return time(c);
  if (c == Collective::kAllReduce) return std::min(time(Collective::kAllReduce), time(Collective::kAllReduceTree));
  return time(c);
}

double TopologySeconds(const Topology& t, Collective c, double bytes, bool across) {
  if (t.nodes == 1) return CollectiveSeconds(t.intra, c, t.per_node, bytes);
  if (c == Collective::kP2P) return CollectiveSeconds(across || t.per_node == 1 ? t.inter : t.intra, c, 2, bytes);
  // The node's devices cross at once, each over its share of the NICs.
  const int nics = t.nics > 0 ? t.nics : t.per_node;
  const Link shared = ScaleLink(t.inter, 1.0, std::min(1.0, static_cast<double>(nics) / t.per_node));
  const double share = bytes / t.per_node;
  if (c == Collective::kAllReduce || c == Collective::kAllReduceTree)
    return CollectiveSeconds(t.intra, Collective::kReduceScatter, t.per_node, bytes) +
           CollectiveSeconds(shared, c, t.nodes, share) +
           CollectiveSeconds(t.intra, Collective::kAllGather, t.per_node, bytes);
  if (c == Collective::kBroadcast)
    return CollectiveSeconds(shared, c, t.nodes, bytes) + CollectiveSeconds(t.intra, c, t.per_node, bytes);
  return CollectiveSeconds(t.intra, c, t.per_node, bytes) + CollectiveSeconds(shared, c, t.nodes, share);
}

MeshTopology SplitTopology(const Topology& t, int group) {
  MeshTopology m{t, t, t};
  const int world = t.world();
  const int replicas = std::max(1, world / std::max(1, group));
  // Every device of a node crosses at once in its own replicate group.
  const int nics = t.nics > 0 ? t.nics : t.per_node;
  const Link shared = ScaleLink(t.inter, 1.0, std::min(1.0, static_cast<double>(nics) / t.per_node));
  if (group <= t.per_node && t.per_node % group == 0) {
    m.group.per_node = group, m.group.nodes = 1;
    m.replicas.per_node = t.per_node / group, m.replicas.nodes = t.nodes;
  } else {
    m.group.nodes = std::max(1, (group + t.per_node - 1) / t.per_node);
    m.group.per_node = std::min(group, t.per_node);
    m.replicas.per_node = 1, m.replicas.nodes = replicas;
  }
  m.alone = m.replicas;
  m.replicas.inter = shared, m.replicas.nics = 0;
  m.crossings = t.nodes > 1 ? std::min(nics, t.per_node) : t.per_node;
  return m;
}

std::vector<double> SharedLinkEnds(const std::vector<double>& start_ms, const std::vector<double>& alone_ms,
                                   double capacity) {
  const size_t n = start_ms.size();
  if (alone_ms.size() != n) throw std::invalid_argument("shared link: one duration per start");
  if (!(capacity >= 1)) throw std::invalid_argument("shared link: capacity below 1");
  for (size_t i = 0; i < n; ++i)
    if (!(start_ms[i] >= 0) || !(alone_ms[i] >= 0)) throw std::invalid_argument("shared link: a time below 0");
  std::vector<double> left = alone_ms, end(n, -1);
  double now = n ? *std::min_element(start_ms.begin(), start_ms.end()) : 0;
  for (size_t done = 0; done < n;) {
    std::vector<size_t> active;
    double next_start = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < n; ++i) {
      if (end[i] >= 0) continue;
      if (start_ms[i] <= now) active.push_back(i);
      else next_start = std::min(next_start, start_ms[i]);
    }
    if (active.empty()) {
      now = next_start;
      continue;
    }
    const double rate = std::min(1.0, capacity / static_cast<double>(active.size()));
    double first_end = std::numeric_limits<double>::infinity();
    for (size_t i : active) first_end = std::min(first_end, now + left[i] / rate);
    const double until = std::min(first_end, next_start);
    for (size_t i : active) {
      left[i] -= (until - now) * rate;
      if (left[i] <= 1e-12 * (1 + alone_ms[i])) end[i] = until, ++done;  // round-off left over
    }
    now = until;
  }
  return end;
}

Link FitLink(const std::vector<std::pair<double, double>>& points, Collective c, int ranks,
             const std::string& name) {
  const auto [count, factor] = CollectiveTerms(c, ranks);
  if (count == 0) throw std::invalid_argument("fit: a collective on 1 rank moves nothing");
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  std::vector<double> sizes;
  for (const auto& [b, t] : points) {
    if (!(t > 0) || !(b >= 0)) throw std::invalid_argument("fit: every time must be > 0 and every size >= 0");
    const double w = 1.0 / (t * t);  // relative error: each row divided by its time
    s00 += w, s01 += w * b, s11 += w * b * b, r0 += w * t, r1 += w * t * b;
    if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) sizes.push_back(b);
  }
  if (sizes.size() < 2)
    throw std::invalid_argument(fmt::format("fit: need points at two sizes at least, got {}", sizes.size()));
  const double det = s00 * s11 - s01 * s01;
  const double x0 = (s11 * r0 - s01 * r1) / det, x1 = (s00 * r1 - s01 * r0) / det;
  if (!(x1 > 0)) throw std::invalid_argument("fit: the times do not grow with the size; no bandwidth fits");
  return Link{name, std::max(x0, 0.0) / count, factor / x1,
              fmt::format("fitted to {} measured {} points on {} ranks", points.size(), CollectiveName(c), ranks),
              {}};
}

}  // namespace ddpbench
