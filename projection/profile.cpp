// The calibration profile as JSON (profile.h), read with nlohmann::json, the
// JSON library the snapshots and traces already use.
#include "projection/profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "base/results.h"

namespace ddpbench {

BackwardLine FitBackwardLine(int64_t large, double at_large, int64_t small, double at_small) {
  if (large == small) return {at_large / static_cast<double>(large), 0.0};
  const double slope = (at_large - at_small) / static_cast<double>(large - small);
  const double fixed = at_large - slope * static_cast<double>(large);
  if (slope < 0) return {0.0, at_large};
  if (fixed < 0) return {at_large / static_cast<double>(large), 0.0};
  return {slope, fixed};
}

std::string PrecisionName(const std::string& amp) { return amp == "off" ? "float32" : "amp-" + amp; }

double UnitProfile::ParamBytes() const { return std::accumulate(param_bytes.begin(), param_bytes.end(), 0.0); }

int64_t Profile::Parameters() const {
  double bytes = 0;
  for (const UnitProfile& u : units) bytes += u.ParamBytes();
  return static_cast<int64_t>(std::llround(bytes / static_cast<double>(element_bytes)));
}

std::vector<int64_t> Profile::Batches() const {
  std::vector<int64_t> batches;
  if (!units.empty())
    for (const auto& [b, c] : units[0].cost) batches.push_back(b);
  return batches;
}

std::vector<UnitCost> Profile::CostAt(int64_t batch, bool* scaled) const {
  const std::vector<int64_t> have = Batches();
  if (have.empty()) throw ConfigError("profile: no unit times");
  int64_t from = have.back();  // nearest measured size, the larger on a tie
  for (int64_t b : have)
    if (std::llabs(b - batch) <= std::llabs(from - batch)) from = b;
  if (scaled) *scaled = from != batch;
  const double k = static_cast<double>(batch) / static_cast<double>(from);
  std::vector<UnitCost> out;
  for (const UnitProfile& u : units) {
    const UnitCost& c = u.cost.at(from);
    out.push_back({c.forward_ms * k, c.backward_ms * k});
  }
  return out;
}

Profile::CommTerms Profile::CommTermsOf(Collective c) const {
  if (sharded_comm && (c == Collective::kAllGather || c == Collective::kReduceScatter)) return *sharded_comm;
  return {comm_compute_ms_per_call, comm_compute_ms_per_mb, comm_loaded_ms_per_call, comm_loaded_ms_per_mb};
}

void WriteProfile(const Profile& p, const std::string& path) {
  nlohmann::json units = nlohmann::json::array();
  for (const UnitProfile& u : p.units) {
    nlohmann::json cost = nlohmann::json::object();
    for (const auto& [b, c] : u.cost) cost[std::to_string(b)] = {{"forward_ms", c.forward_ms}, {"backward_ms", c.backward_ms}};
    units.push_back({{"name", u.name}, {"param_bytes", u.param_bytes}, {"activation_bytes", u.activation_bytes},
                     {"output_bytes", u.output_bytes}, {"backward_bytes", u.backward_bytes},
                     {"backward_fixed_bytes", u.backward_fixed_bytes}, {"cost", cost}});
  }
  nlohmann::json j = {{"version", p.version}, {"model", p.model}, {"width", p.width}, {"image_size", p.image_size},
                      {"batch_size", p.batch_size}, {"precision", p.precision}, {"element_bytes", p.element_bytes},
                      {"optimizer", p.optimizer}, {"momentum", p.momentum}, {"device", p.device},
                      {"concurrent", p.concurrent}, {"machine", p.machine}, {"command", p.command},
                      {"torch_version", p.torch_version}, {"git_sha", p.git_sha}, {"created", p.created},
                      {"optimizer_ms_per_mb", p.optimizer_ms_per_mb}, {"step_overhead_ms", p.step_overhead_ms},
                      {"comm_compute_ms_per_call", p.comm_compute_ms_per_call},
                      {"comm_compute_ms_per_mb", p.comm_compute_ms_per_mb},
                      {"comm_loaded_ms_per_call", p.comm_loaded_ms_per_call},
                      {"comm_loaded_ms_per_mb", p.comm_loaded_ms_per_mb},
                      {"buffer_broadcast_bytes", p.buffer_broadcast_bytes}, {"units", units}};
  if (p.sharded_comm)  // the field names of the four all-reduce terms, so that one --set changes both
    j["sharded_comm"] = {{"comm_compute_ms_per_call", p.sharded_comm->compute_ms_per_call},
                         {"comm_compute_ms_per_mb", p.sharded_comm->compute_ms_per_mb},
                         {"comm_loaded_ms_per_call", p.sharded_comm->loaded_ms_per_call},
                         {"comm_loaded_ms_per_mb", p.sharded_comm->loaded_ms_per_mb}};
  if (p.comm_wake_ms) j["comm_wake_ms"] = *p.comm_wake_ms;
  if (p.comm_core_latency_ms) j["comm_core_latency_ms"] = *p.comm_core_latency_ms;
  if (p.link) {
    nlohmann::json points = nlohmann::json::array();
    for (const LinkMeasurement& m : p.link_points)
      points.push_back({{"collective", m.collective}, {"ranks", m.ranks}, {"points", m.points}});
    nlohmann::json own = nlohmann::json::object();
    for (const auto& [c, fit] : p.link->own)
      own[CollectiveName(c)] = {{"alpha_us", fit.alpha_s * 1e6}, {"bandwidth_gb_s", fit.bandwidth / 1e9}};
    j["link"] = {{"alpha_us", p.link->alpha_s * 1e6}, {"bandwidth_gb_s", p.link->bandwidth / 1e9},
                 {"ranks", p.link_ranks}, {"lanes", p.link->lanes}, {"source", p.link->source},
                 {"collectives", own}, {"measured", points}};
  }
  ReplaceFile(path, j.dump(1) + "\n");
}

namespace {

template <typename T>
T Field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.is_object() || !j.contains(key))
    throw ConfigError(fmt::format("{}: not a ddpbench profile: field '{}' is missing (make one with "
                                  "ddpbench --calibrate=FILE)", path, key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(fmt::format("{}: field '{}' has the wrong type", path, key));
  }
}

// The link's fits per collective ("collectives": {"reduce-scatter": {...}}).
void ReadOwnFits(const nlohmann::json& own, const std::string& path, Link* link) {
  for (const auto& [name, fit] : own.items()) {
    const std::optional<Collective> c = CollectiveFromName(name);
    if (!c) throw ConfigError(fmt::format("{}: link.collectives: unknown collective '{}'", path, name));
    const LinkFit f{Field<double>(fit, "alpha_us", path) * 1e-6, Field<double>(fit, "bandwidth_gb_s", path) * 1e9};
    if (!(f.bandwidth > 0) || !(f.alpha_s >= 0))
      throw ConfigError(fmt::format("{}: link.collectives.{} needs alpha >= 0 and bandwidth > 0", path, name));
    link->own[*c] = f;
  }
}

// The calibration's measured points ("measured": [{"collective", "ranks",
// "points": [[bytes, seconds], ...]}]), kept in the profile and as the
// link's table (links.h).
void ReadMeasured(const nlohmann::json& measured, const std::string& path, Profile* p) {
  if (!measured.is_array()) throw ConfigError(fmt::format("{}: link.measured must be a list", path));
  for (const auto& m : measured) {
    LinkMeasurement lm{Field<std::string>(m, "collective", path), Field<int>(m, "ranks", path),
                       Field<std::vector<std::pair<double, double>>>(m, "points", path)};
    const std::optional<Collective> c = CollectiveFromName(lm.collective);
    if (!c) throw ConfigError(fmt::format("{}: link.measured: unknown collective '{}'", path, lm.collective));
    for (const auto& [bytes, seconds] : lm.points)
      if (!(bytes > 0) || !(seconds > 0) || !std::isfinite(bytes) || !std::isfinite(seconds))
        throw ConfigError(fmt::format("{}: link.measured: {} point ({}, {}): bytes and seconds must be positive",
                                      path, lm.collective, bytes, seconds));
    AddToTable(&*p->link, *c, lm.ranks, lm.points);
    p->link_points.push_back(std::move(lm));
  }
}

UnitProfile ReadUnit(const nlohmann::json& j, const std::string& path) {
  UnitProfile u;
  u.name = Field<std::string>(j, "name", path);
  u.param_bytes = Field<std::vector<double>>(j, "param_bytes", path);
  u.activation_bytes = Field<double>(j, "activation_bytes", path);
  u.output_bytes = Field<double>(j, "output_bytes", path);
  u.backward_bytes = j.value("backward_bytes", 0.0);
  u.backward_fixed_bytes = j.value("backward_fixed_bytes", 0.0);
  const auto cost = Field<nlohmann::json>(j, "cost", path);
  if (!cost.is_object() || cost.empty()) throw ConfigError(fmt::format("{}: unit {} has no times", path, u.name));
  for (const auto& [key, c] : cost.items()) {
    int64_t batch = 0;
    try {
      batch = std::stoll(key);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("{}: unit {}: batch '{}' is not a number", path, u.name, key));
    }
    UnitCost uc{Field<double>(c, "forward_ms", path), Field<double>(c, "backward_ms", path)};
    if (batch < 1 || !(uc.forward_ms >= 0) || !(uc.backward_ms >= 0))
      throw ConfigError(fmt::format("{}: unit {} batch {}: times must be >= 0", path, u.name, key));
    u.cost[batch] = uc;
  }
  return u;
}

}  // namespace

Profile ReadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("--project={}: cannot open the profile", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not JSON ({})", path, e.what()));
  }
  Profile p;
  p.version = Field<int>(j, "version", path);
  if (p.version != 1) throw ConfigError(fmt::format("{}: profile version {}; this ddpbench reads 1", path, p.version));
  p.model = Field<std::string>(j, "model", path);
  p.width = Field<int64_t>(j, "width", path);
  p.image_size = Field<int64_t>(j, "image_size", path);
  p.batch_size = Field<int64_t>(j, "batch_size", path);
  p.precision = Field<std::string>(j, "precision", path);
  p.element_bytes = Field<int64_t>(j, "element_bytes", path);
  p.optimizer = Field<std::string>(j, "optimizer", path);
  p.momentum = Field<double>(j, "momentum", path);
  p.device = Field<std::string>(j, "device", path);
  p.concurrent = Field<int>(j, "concurrent", path);
  p.machine = Field<std::string>(j, "machine", path);
  p.command = Field<std::string>(j, "command", path);
  p.optimizer_ms_per_mb = Field<double>(j, "optimizer_ms_per_mb", path);
  // Optional in older profiles; never below 0.
  for (auto [key, field] : {std::pair{"step_overhead_ms", &p.step_overhead_ms},
                            std::pair{"comm_compute_ms_per_call", &p.comm_compute_ms_per_call},
                            std::pair{"comm_compute_ms_per_mb", &p.comm_compute_ms_per_mb},
                            std::pair{"comm_loaded_ms_per_call", &p.comm_loaded_ms_per_call},
                            std::pair{"comm_loaded_ms_per_mb", &p.comm_loaded_ms_per_mb}})
    if (j.contains(key)) *field = std::max(0.0, Field<double>(j, key, path));
  if (j.contains("sharded_comm")) {  // optional: profiles written before it price every collective alike
    Profile::CommTerms& t = p.sharded_comm.emplace();
    const nlohmann::json& sharded = j["sharded_comm"];
    for (auto [key, field] : {std::pair{"comm_compute_ms_per_call", &t.compute_ms_per_call},
                              std::pair{"comm_compute_ms_per_mb", &t.compute_ms_per_mb},
                              std::pair{"comm_loaded_ms_per_call", &t.loaded_ms_per_call},
                              std::pair{"comm_loaded_ms_per_mb", &t.loaded_ms_per_mb}})
      *field = std::max(0.0, Field<double>(sharded, key, path + " sharded_comm"));
  }
  for (auto [key, field] : {std::pair{"comm_wake_ms", &p.comm_wake_ms},
                            std::pair{"comm_core_latency_ms", &p.comm_core_latency_ms}})
    if (j.contains(key) && !j[key].is_null())  // optional: null or absent, calls do not wait
      *field = std::max(0.0, Field<double>(j, key, path));
  if (p.comm_wake_ms.has_value() != p.comm_core_latency_ms.has_value())
    throw ConfigError(fmt::format("{}: {} without {}: give both or neither", path,
                                  p.comm_wake_ms ? "comm_wake_ms" : "comm_core_latency_ms",
                                  p.comm_wake_ms ? "comm_core_latency_ms" : "comm_wake_ms"));
  if (j.contains("buffer_broadcast_bytes"))  // optional in older profiles
    for (double b : Field<std::vector<double>>(j, "buffer_broadcast_bytes", path)) {
      if (!(b > 0)) throw ConfigError(fmt::format("{}: buffer_broadcast_bytes {}: want sizes > 0", path, b));
      p.buffer_broadcast_bytes.push_back(b);
    }
  auto optional = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
  p.torch_version = optional("torch_version");
  p.git_sha = optional("git_sha");
  p.created = optional("created");
  for (const auto& u : Field<nlohmann::json>(j, "units", path)) p.units.push_back(ReadUnit(u, path));
  if (p.units.empty()) throw ConfigError(fmt::format("{}: the profile has no units", path));
  const std::vector<int64_t> batches = p.Batches();
  for (const UnitProfile& u : p.units)
    if (u.cost.size() != batches.size() || !std::equal(batches.begin(), batches.end(), u.cost.begin(),
                                                        [](int64_t b, const auto& kv) { return b == kv.first; }))
      throw ConfigError(fmt::format("{}: unit {} was timed at other batch sizes than unit {}", path, u.name,
                                    p.units[0].name));
  if (j.contains("link")) {
    const auto& l = j["link"];
    Link link{"measured", Field<double>(l, "alpha_us", path) * 1e-6, Field<double>(l, "bandwidth_gb_s", path) * 1e9,
              Field<std::string>(l, "source", path), {}};
    if (!(link.bandwidth > 0) || !(link.alpha_s >= 0))
      throw ConfigError(fmt::format("{}: the measured link needs alpha >= 0 and bandwidth > 0", path));
    if (l.contains("collectives")) ReadOwnFits(l["collectives"], path, &link);
    if (l.contains("lanes")) {  // profiles written before it: one lane
      link.lanes = Field<int>(l, "lanes", path);
      if (link.lanes < 1 || link.lanes > 64)
        throw ConfigError(
            fmt::format("{}: link.lanes {}: want 1..64 collectives in flight", path, link.lanes));
    }
    p.link = link;
    p.link_ranks = Field<int>(l, "ranks", path);
    if (l.contains("measured")) ReadMeasured(l["measured"], path, &p);
  }
  return p;
}

void CheckProfileMatches(const Profile& p, const std::string& model, int64_t width, int64_t image_size,
                         const std::string& precision, const std::string& path) {
  auto differ = [&](const std::string& what, const std::string& have, const std::string& want) {
    if (have != want)
      throw ConfigError(fmt::format("{}: the profile is of {} {}, the run asks for {}; calibrate for this run "
                                    "(ddpbench --calibrate=FILE with the run's flags)", path, what, have, want));
  };
  differ("--model", p.model, model);
  differ("--width", std::to_string(p.width), std::to_string(width));
  differ("--image-size", std::to_string(p.image_size), std::to_string(image_size));
  differ("precision", p.precision, precision);
}

}  // namespace ddpbench
