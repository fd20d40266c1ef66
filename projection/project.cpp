// The what-if table of ddpbench --project (project.h).
#include "projection/project.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "projection/step_model.h"
#include "planning/mesh.h"
#include "planning/traits.h"

namespace ddpbench {

namespace {

std::vector<int> ParseCounts(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t pos = 0;
    int v = 0;
    try { v = std::stoi(part, &pos); } catch (...) { v = 0; }
    if (v < 1 || pos != part.size())
      throw ConfigError(fmt::format("{}={}: want a comma list of whole numbers >= 1, e.g. 1,2,4,8", flag, text));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}


std::string Num(double v, int digits = 1) { return fmt::format("{:.{}f}", v, digits); }

// An entry of --strategies: a strategy, or a pipeline strategy with "-dp"
// (pmp-dp: a pipeline of each node's devices, replicated across the nodes,
// as --stage-ranks --replicate-degree=nodes runs it).
struct Entry {
  std::string name, strategy;
  bool by_node = false;  // replicated one per node (pmp-dp; hsdp by its traits)
};
Entry ParseEntry(const std::string& name) {
  const std::string suffix = "-dp";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string base = name.substr(0, name.size() - suffix.size());
    const StrategyTraits* t = FindTraits(base);
    if (!t || t->family != Family::kPipeline)
      throw ConfigError(fmt::format("--strategies: '{}': only a pipeline strategy (mp, pmp) takes -dp", name));
    return {name, base, true};
  }
  const StrategyTraits* t = FindTraits(name);
  return {name, name, t && t->replicate_by_node};
}

// The row's mesh: "replicate=R,shard=S" or "pp=P,dp=D" where replicated.
std::string MeshOf(const Entry& e, const Topology& t) {
  if (!e.by_node || t.nodes < 2) return "";
  const StrategyTraits* traits = FindTraits(e.strategy);
  return DescribeMesh(traits && traits->family == Family::kPipeline, t.per_node, t.nodes);
}

Row MakeRow(const RunConfig& c, const Entry& e, const Topology& t, int64_t batch, const StepPrediction& s,
            const StepPrediction& recomputed, double single_img_s) {
  const double error = ValidatedErrorPct(e.name);
  const StrategyTraits* traits = FindTraits(e.strategy);
  const bool pipeline = traits && traits->family == Family::kPipeline;
  // pmp-dp: each pipeline takes its node's share, --batch-size a device.
  const int64_t pipeline_batch = pipeline && e.by_node ? batch * t.per_node : batch;
  const int pipelines = pipeline && e.by_node ? t.nodes : 1;
  const int validated = std::max(1, ValidatedWorld());
  return Row{{"strategy", e.name},
             {"mesh", MeshOf(e, t)},
             {"schedule", traits && traits->micro_batches ? c.schedule : ""},
             {"nodes", std::to_string(t.nodes)},
             {"gpus_per_node", std::to_string(t.per_node)},
             {"world", std::to_string(t.world())},
             {"batch_per_device", std::to_string(batch)},
             {"global_batch", std::to_string(pipeline ? pipeline_batch * pipelines : batch * t.world())},
             {"step_ms", Num(s.step_ms, 2)},
             {"compute_ms", Num(s.compute_ms, 2)},
             {"exposed_comm_ms", Num(s.exposed_comm_ms, 2)},
             {"bubble_ms", Num(s.bubble_ms, 2)},
             {"img_s", Num(s.ImagesPerSecond())},
             {"scaling_efficiency", Num(s.ImagesPerSecond() / (t.world() * single_img_s), 3)},
             {"memory_mb", Num(s.memory_mb)},
             {"max_batch", c.device_memory_gb > 0
                               ? std::to_string(s.LargestBatch(c.device_memory_gb * 1024, pipeline_batch) /
                                                (pipeline_batch / batch))
                               : ""},
             {"max_batch_recompute", c.device_memory_gb > 0
                                         ? std::to_string(recomputed.LargestBatch(c.device_memory_gb * 1024,
                                                                                  pipeline_batch) /
                                                          (pipeline_batch / batch))
                                         : ""},
             {"error_pct", error >= 0 ? Num(error) : ""},
             {"extrapolated", t.world() > 16 * validated ? "1" : "0"},
             {"largest_term", s.LargestTerm()},
             {"intra", t.intra.name},
             {"inter", t.nodes > 1 ? t.inter.name : ""},
             {"profile", c.project}};
}

// The query of entry `e` on `t` with the run's pmp and bucket flags.
StepQuery QueryFor(const RunConfig& c, const Entry& e, const Topology& t, int64_t batch) {
  StepQuery q{e.strategy, t, batch};
  q.schedule = ParsePipelineSchedule(c.schedule), q.micro_batches = static_cast<int>(c.chunks);
  q.virtual_stages = static_cast<int>(c.virtual_stages), q.bucket_cap_mb = c.bucket_cap_mb;
  q.replicas = e.by_node ? t.nodes : 0;
  // A pipeline of a node's devices replicated across nodes takes the node's
  // share of the global batch (--batch-size a device), as ddp's ranks do.
  if (e.by_node && FindTraits(e.strategy)->family == Family::kPipeline) q.batch = batch * t.per_node;
  return q;
}

// The profile with its compute (units, step overhead, optimizer) scaled so
// that one device runs `img_s` at `batch`: a device measured elsewhere or a
// published figure, with the model's structure (bytes per unit) from the
// profile. The measured interference of collectives with the computation
// belongs to the measured device and is dropped.
Profile ScaledToDevice(Profile p, int64_t batch, double img_s) {
  StepQuery one{"single", Topology{}, batch};
  one.topology.intra = one.topology.inter = Link{"none", 0, 1, "", {}};
  const double k = batch * 1000.0 / img_s / PredictStep(p, one).step_ms;
  for (UnitProfile& u : p.units)
    for (auto& [b, c] : u.cost) c.forward_ms *= k, c.backward_ms *= k;
  p.step_overhead_ms *= k, p.optimizer_ms_per_mb *= k;
  p.comm_compute_ms_per_call = p.comm_compute_ms_per_mb = p.comm_loaded_ms_per_call = p.comm_loaded_ms_per_mb = 0;
  p.sharded_comm.reset(), p.comm_wake_ms.reset(), p.comm_core_latency_ms.reset();
  return p;
}

}  // namespace

const std::vector<std::string>& ProjectionColumns() {
  static const std::vector<std::string> kColumns = {
      "strategy", "mesh", "schedule", "nodes", "gpus_per_node", "world", "batch_per_device", "global_batch", "step_ms",
      "compute_ms", "exposed_comm_ms", "bubble_ms", "img_s", "scaling_efficiency", "memory_mb", "max_batch",
      "max_batch_recompute", "error_pct", "extrapolated", "largest_term", "intra", "inter", "profile"};
  return kColumns;
}

std::vector<std::string> SplitNames(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t cut = text.find(separator, start);
    out.push_back(text.substr(start, cut == std::string::npos ? std::string::npos : cut - start));
    if (cut == std::string::npos) return out;
    start = cut + 1;
  }
}

Topology MakeTopology(const Profile& p, const RunConfig& c, int nodes) {
  const Link* measured = p.link ? &*p.link : nullptr;
  Topology t;
  t.per_node = c.gpus_per_node, t.nodes = nodes, t.nics = c.nics_per_node;
  t.intra = ParseLink(c.intra.empty() ? (measured ? "measured" : "nvlink4") : c.intra, measured, "--intra");
  t.inter = ParseLink(c.inter.empty() ? (measured ? "measured" : "ib-ndr400") : c.inter, measured, "--inter");
  return t;
}

void CheckProfileMatchesFlags(const Profile& p, const RunConfig& c, const std::string& path) {
  auto want = [&](const char* flag, const std::string& value, const std::string& fallback) {
    return c.given.count(flag) ? value : fallback;
  };
  CheckProfileMatches(p, want("--model", c.model, p.model),
                      std::stoll(want("--width", std::to_string(c.width), std::to_string(p.width))),
                      std::stoll(want("--image-size", std::to_string(c.image_size), std::to_string(p.image_size))),
                      want("--amp", PrecisionName(c.amp), p.precision), path);
}

// Every strategy the what-if prices, from the traits: the data-parallel ranks,
// the sharded ones, in-process replicas, the micro-batched pipelines, then
// each of those pipelines replicated by data parallelism ("pmp-dp").
static std::vector<std::string> DefaultProjected() {
  std::vector<std::string> names;
  for (Family f : {Family::kDataRanks, Family::kSharded, Family::kDataInProcess, Family::kPipeline})
    for (const auto& t : StrategyTraitsTable())
      if (t.family == f && (f != Family::kPipeline || t.micro_batches)) names.push_back(t.name);
  for (const auto& t : StrategyTraitsTable())
    if (t.family == Family::kPipeline && t.micro_batches && t.Reads("--replicate-degree")) names.push_back(t.name + "-dp");
  return names;
}

std::vector<Row> ProjectRows(const Profile& measured, const RunConfig& c) {
  const int64_t batch = c.given.count("--batch-size") ? c.batch_size : measured.batch_size;
  const Profile p = c.device_img_s > 0 ? ScaledToDevice(measured, batch, c.device_img_s) : measured;
  const bool given = !c.strategies.empty();
  std::vector<Entry> entries;
  for (const std::string& name : given ? SplitNames(c.strategies) : DefaultProjected())
    entries.push_back(ParseEntry(name));
  StepQuery base{"single", MakeTopology(p, c, 1), batch};
  base.topology.per_node = 1;
  const double single = PredictStep(p, base).ImagesPerSecond();
  std::vector<Row> rows;
  for (int nodes : ParseCounts("--nodes", c.nodes)) {
    const Topology t = MakeTopology(p, c, nodes);
    for (const Entry& e : entries) {
      if (!given && e.by_node && nodes == 1) continue;  // on one node: the same as its one-dimensional self
      try {
        rows.push_back(MakeRow(c, e, t, batch, PredictStep(p, QueryFor(c, e, t, batch)),
                               PredictRecomputedMemory(p, QueryFor(c, e, t, batch)), single));
      } catch (const ConfigError& err) {
        if (given) throw;  // a size the named strategy cannot run is an error
        fmt::print(stderr, "ddpbench: {} on {} x {} left out: {}\n", e.name, nodes, c.gpus_per_node, err.what());
      }
    }
  }
  return rows;
}

int RunProjection(const RunConfig& c) {
  const Profile p = ReadProfile(c.project);
  CheckProfileMatchesFlags(p, c, c.project);
  const std::vector<Row> rows = ProjectRows(p, c);
  fmt::print("profile {}: {} width {} at {} px, batch {}, {}, measured on {} ({})\n", c.project, p.model, p.width,
             p.image_size, p.batch_size, p.precision, p.device, p.machine);
  if (c.device_img_s > 0)
    fmt::print("compute scaled to {} img/s on one device (--device-img-s); links as given\n", c.device_img_s);
  fmt::print("{:<7} {:<18} {:<12} {:>5} {:>4} {:>6} {:>11} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>5}\n", "strat",
             "mesh", "schedule", "nodes", "gpn", "world", "img/s", "eff", "step ms", "compute", "exposed", "bubble", "mem MB",
             "error", "extr");
  for (const Row& r : rows)
    fmt::print("{:<7} {:<18} {:<12} {:>5} {:>4} {:>6} {:>11} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>5}\n",
               r.at("strategy"), r.at("mesh").empty() ? "-" : r.at("mesh"), r.at("schedule").empty() ? "-" : r.at("schedule"), r.at("nodes"),
               r.at("gpus_per_node"), r.at("world"), r.at("img_s"), r.at("scaling_efficiency"), r.at("step_ms"),
               r.at("compute_ms"), r.at("exposed_comm_ms"), r.at("bubble_ms"), r.at("memory_mb"),
               r.at("error_pct").empty() ? "-" : "±" + r.at("error_pct") + "%", r.at("extrapolated") == "1" ? "yes" : "");
  if (!c.project_csv.empty()) {
    std::string data;
    for (size_t i = 0; i < ProjectionColumns().size(); ++i) data += (i ? "," : "") + ProjectionColumns()[i];
    data += "\n";
    for (const Row& r : rows) data += FormatRow(ProjectionColumns(), r);
    ReplaceFile(c.project_csv, data);
  }
  return 0;
}

}  // namespace ddpbench
