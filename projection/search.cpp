// ddpbench --search (search.h): the space, its candidates and their ranking.
#include "projection/search.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "planning/schedules.h"
#include "planning/traits.h"
#include "projection/project.h"

namespace ddpbench {

namespace {

bool WholeAtLeast(const std::string& s, int64_t least, int64_t* v) {
  size_t pos = 0;
  try {
    *v = std::stoll(s, &pos);
  } catch (...) {
    return false;
  }
  return pos == s.size() && *v >= least;
}

// key=v1,v2 -> the values, each parsed by `parse` (false: not accepted).
template <typename T>
std::vector<T> ParseValues(const std::string& key, const std::string& text,
                           const std::function<bool(const std::string&, T*)>& parse, const std::string& accepted) {
  std::vector<T> out;
  for (const std::string& part : SplitNames(text)) {
    T v{};
    if (part.empty() || !parse(part, &v))
      throw ConfigError(fmt::format("--search-space: {}={}: '{}' is not accepted; {}", key, text, part, accepted));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<int64_t> Wholes(const std::string& key, const std::string& text, int64_t least, const std::string& what) {
  return ParseValues<int64_t>(key, text, [&](const std::string& s, int64_t* v) { return WholeAtLeast(s, least, v); },
                              what);
}

bool IsStrategy(const std::string& s, std::string* v) {
  const auto& all = ModelledStrategies();
  *v = s;
  return std::find(all.begin(), all.end(), s) != all.end();
}

bool IsSchedule(const std::string& s, std::string* v) {
  try {
    *v = PipelineScheduleName(ParsePipelineSchedule(s));
  } catch (const ConfigError&) {
    return false;
  }
  return true;
}

bool IsBucket(const std::string& s, double* v) {
  size_t pos = 0;
  try {
    *v = std::stod(s, &pos);
  } catch (...) {
    return false;
  }
  return pos == s.size() && *v > 0;
}

// One knob of the space from its key=values text.
void SetKnob(SearchSpace* space, const std::string& key, const std::string& text) {
  if (key == "strategies") {
    space->strategies = ParseValues<std::string>(
        key, text, IsStrategy, fmt::format("accepted: {}", fmt::join(ModelledStrategies(), ", ")));
  } else if (key == "batch") {
    space->batches = Wholes(key, text, 1, "a batch per device is a whole number >= 1");
  } else if (key == "bucket") {
    space->bucket_caps_mb = ParseValues<double>(key, text, IsBucket, "a bucket cap is a number of MB > 0");
  } else if (key == "schedule") {
    space->schedules = ParseValues<std::string>(
        key, text, IsSchedule,
        "accepted: gpipe, 1f1b, interleaved, zero-bubble, interleaved-zero-bubble, looped-bfs, zbv, dualpipev");
  } else if (key == "chunks") {
    space->chunks.clear();
    for (int64_t m : Wholes(key, text, 0, "micro-batches are a whole number >= 1, or 0 for the schedule's default"))
      space->chunks.push_back(static_cast<int>(m));
  } else if (key == "recompute") {
    auto mode = [](const std::string& s, std::string* v) {
      *v = s;
      return s == "none" || s == "all";
    };
    space->recompute = ParseValues<std::string>(key, text, mode, "accepted: none, all");
  } else if (key == "replicate") {
    space->replicas.clear();
    for (int64_t r : Wholes(key, text, 1, "a replicate degree is a whole number >= 1"))
      space->replicas.push_back(static_cast<int>(r));
  } else {
    throw ConfigError(fmt::format("--search-space: '{}' is not a key; accepted: strategies, batch, bucket, "
                                  "schedule, chunks, recompute, replicate",
                                  key));
  }
}

std::string Decimal(double v, int digits = 1) { return fmt::format("{:.{}f}", v, digits); }

// The knobs of one candidate.
struct Knobs {
  int64_t batch = 0;
  double bucket = 25;
  std::string schedule;
  int chunks = 0;
  bool recompute = false;
  int replicas = 1;
};

// Whether the strategy takes --bucket-cap-mb (zero3's buckets are its units).
bool TakesBuckets(const StrategyTraits& t) {
  return t.Reads("--bucket-cap-mb") && !(t.family == Family::kSharded && t.zero_stage == 3);
}

Candidate MakeCandidate(const StrategyTraits& traits, const Topology& t, const Knobs& k) {
  const bool pipeline = traits.family == Family::kPipeline;
  Candidate c;
  c.strategy = traits.name, c.batch_per_device = k.batch, c.recompute = k.recompute;
  const int64_t run_batch = pipeline ? k.batch * t.world() : k.batch;  // a pipeline's batch is its stages'
  c.global_batch = k.batch * t.world();
  c.query.strategy = traits.name, c.query.topology = t, c.query.batch = run_batch;
  c.query.bucket_cap_mb = k.bucket;
  c.query.replicas = k.replicas > 1 ? k.replicas : 0;
  c.entry = fmt::format("{}:b{}", traits.name, k.batch);
  // Across nodes a launcher (srun, torchrun) starts the ranks: no --gpus.
  c.flags = {"--strategy=" + traits.name};
  if (t.nodes == 1) c.flags.push_back(fmt::format("--gpus={}", t.world()));
  c.flags.push_back(fmt::format("--batch-size={}", run_batch));
  if (TakesBuckets(traits)) {
    c.entry += fmt::format(":cap{:g}", k.bucket);
    c.flags.push_back(fmt::format("--bucket-cap-mb={:g}", k.bucket));
  }
  if (traits.micro_batches) {
    c.query.schedule = ParsePipelineSchedule(k.schedule), c.query.micro_batches = k.chunks;
    c.entry += ":" + k.schedule + (k.chunks > 0 ? fmt::format(":m{}", k.chunks) : "");
    c.flags.push_back("--schedule=" + k.schedule);
    if (k.chunks > 0) c.flags.push_back(fmt::format("--chunks={}", k.chunks));
  }
  if (k.replicas > 1) {
    c.entry += fmt::format(":r{}", k.replicas);
    c.flags.push_back(fmt::format("--replicate-degree={}", k.replicas));
  }
  if (k.recompute) {
    c.entry += ":recompute";
    c.flags.push_back("--recompute=all");
  }
  return c;
}

// The values of a knob a strategy reads, else its first value alone.
template <typename T>
std::vector<T> IfReads(bool reads, const std::vector<T>& values) {
  return reads ? values : std::vector<T>{values.front()};
}

// The family's validated error, under the name its validation used.
double ErrorOf(const Candidate& c) {
  const StrategyTraits& t = *FindTraits(c.strategy);
  if (c.query.replicas > 1) return ValidatedErrorPct(t.family == Family::kSharded ? "hsdp" : c.strategy + "-dp");
  return ValidatedErrorPct(c.strategy);
}

// The profile with every unit's forward run again inside its backward.
Profile Recomputed(Profile p) {
  for (UnitProfile& u : p.units)
    for (auto& [batch, cost] : u.cost) cost.backward_ms += cost.forward_ms;
  return p;
}

// Predicts `c`; false (with the model's reason in the note) when it cannot run.
bool Predict(const Profile& p, const Profile& redo, Candidate* c) {
  try {
    c->predicted = PredictStep(c->recompute ? redo : p, c->query);
    if (c->recompute) {
      const StepPrediction memory = PredictRecomputedMemory(p, c->query);
      c->predicted.memory_mb = memory.memory_mb, c->predicted.states_mb = memory.states_mb;
    }
  } catch (const ConfigError& e) {
    c->note = e.what();
    return false;
  }
  // The schedule's default micro-batches, as the model took them: the run is
  // told them, not left to choose its own.
  if (FindTraits(c->strategy)->micro_batches && c->query.micro_batches == 0)
    c->flags.push_back(fmt::format("--chunks={}", c->predicted.micro_batches));
  return true;
}

bool RankedBefore(const Candidate& a, const Candidate& b) {
  if (a.fits != b.fits) return a.fits;
  if ((a.error_pct >= 0) != (b.error_pct >= 0)) return a.error_pct >= 0;
  return a.predicted.ImagesPerSecond() > b.predicted.ImagesPerSecond();
}

void PrintRanked(const std::vector<Candidate>& ranked) {
  fmt::print("{:>4}  {:<34} {:>10} {:>9} {:>9} {:>8}  {}\n", "rank", "entry", "img/s", "step ms", "mem MB", "error",
             "note");
  for (const Candidate& c : ranked)
    fmt::print("{:>4}  {:<34} {:>10} {:>9} {:>9} {:>8}  {}\n", c.rank > 0 ? std::to_string(c.rank) : "-", c.entry,
               Decimal(c.predicted.ImagesPerSecond()), Decimal(c.predicted.step_ms, 2), Decimal(c.predicted.memory_mb),
               c.error_pct >= 0 ? "±" + Decimal(c.error_pct) + "%" : "-", c.note);
}

}  // namespace

SearchSpace ParseSearchSpace(const std::string& spec, SearchSpace space) {
  if (spec.empty()) return space;
  for (const std::string& part : SplitNames(spec, ';')) {
    const size_t eq = part.find('=');
    if (eq == std::string::npos)
      throw ConfigError(fmt::format("--search-space={}: '{}' is not key=values; e.g. strategies=ddp,zero2;batch=16,32",
                                    spec, part));
    SetKnob(&space, part.substr(0, eq), part.substr(eq + 1));
  }
  return space;
}

std::vector<Candidate> EnumerateCandidates(const SearchSpace& s, const Topology& t) {
  if (s.strategies.empty() || s.batches.empty() || s.bucket_caps_mb.empty() || s.schedules.empty() ||
      s.chunks.empty() || s.recompute.empty() || s.replicas.empty())
    throw ConfigError("--search-space: a knob has no values: the search space is empty (--gpus too few for "
                      "every strategy asked?)");
  std::vector<Candidate> out;
  for (const std::string& name : s.strategies) {
    const StrategyTraits& traits = *FindTraits(name);
    const bool replicates = traits.Reads("--replicate-degree") && traits.family != Family::kPipeline;
    for (int64_t batch : s.batches)
      for (double bucket : IfReads(TakesBuckets(traits), s.bucket_caps_mb))
        for (const std::string& schedule : IfReads(traits.micro_batches, s.schedules))
          for (int chunks : IfReads(traits.micro_batches, s.chunks))
            for (const std::string& recompute : s.recompute)
              for (int replicas : IfReads(replicates, s.replicas)) {
                const bool redo = recompute == "all";
                // Recompute is refused with a split backward, as a run refuses it.
                if (redo && traits.micro_batches && SplitsBackward(ParsePipelineSchedule(schedule))) continue;
                out.push_back(MakeCandidate(traits, t, {batch, bucket, schedule, chunks, redo, replicas}));
              }
  }
  return out;
}

std::vector<Candidate> RankCandidates(const Profile& profile, std::vector<Candidate> candidates,
                                      double memory_limit_mb) {
  const Profile redo = Recomputed(profile);
  std::vector<Candidate> kept;
  std::string refused;
  for (Candidate& c : candidates) {
    if (!Predict(profile, redo, &c)) {
      if (refused.empty()) refused = c.entry + ": " + c.note;
      continue;
    }
    c.error_pct = ErrorOf(c);
    c.fits = memory_limit_mb <= 0 || c.predicted.memory_mb <= memory_limit_mb;
    if (!c.fits) c.note = fmt::format("needs {:.1f} MB of {:.1f}", c.predicted.memory_mb, memory_limit_mb);
    else if (c.error_pct < 0) c.note = "model not validated: ranked after the validated";
    kept.push_back(std::move(c));
  }
  if (kept.empty())
    throw ConfigError(fmt::format("--search-space: the model runs none of its {} configurations (first: {})",
                                  candidates.size(), refused));
  std::stable_sort(kept.begin(), kept.end(), RankedBefore);
  if (!kept.front().fits) {
    const auto closest = std::min_element(kept.begin(), kept.end(), [](const Candidate& a, const Candidate& b) {
      return a.predicted.memory_mb < b.predicted.memory_mb;
    });
    throw ConfigError(fmt::format("nothing in the search space fits {:.1f} MB per device: the closest, {}, needs "
                                  "{:.1f} MB (add recompute=all, a sharded strategy or a smaller batch)",
                                  memory_limit_mb, closest->entry, closest->predicted.memory_mb));
  }
  int rank = 0;
  for (Candidate& c : kept)
    if (c.fits) c.rank = ++rank;
  return kept;
}

const std::vector<std::string>& SearchColumns() {
  static const std::vector<std::string> kColumns = {
      "rank", "entry", "strategy", "flags", "batch_per_device", "global_batch", "predicted_img_s", "predicted_step_ms",
      "predicted_memory_mb", "fits", "validated", "error_pct", "extrapolated", "largest_term", "note"};
  return kColumns;
}

std::vector<Row> SearchRows(const std::vector<Candidate>& ranked) {
  std::vector<Row> rows;
  for (const Candidate& c : ranked)
    rows.push_back(Row{{"rank", c.rank > 0 ? std::to_string(c.rank) : ""},
                       {"entry", c.entry},
                       {"strategy", c.strategy},
                       {"flags", fmt::format("{}", fmt::join(c.flags, " "))},
                       {"batch_per_device", std::to_string(c.batch_per_device)},
                       {"global_batch", std::to_string(c.global_batch)},
                       {"predicted_img_s", Decimal(c.predicted.ImagesPerSecond())},
                       {"predicted_step_ms", Decimal(c.predicted.step_ms, 3)},
                       {"predicted_memory_mb", Decimal(c.predicted.memory_mb)},
                       {"fits", c.fits ? "1" : "0"},
                       {"validated", c.error_pct >= 0 ? "1" : "0"},
                       {"error_pct", c.error_pct >= 0 ? Decimal(c.error_pct) : ""},
                       {"extrapolated", c.query.topology.world() > 16 * std::max(1, ValidatedWorld()) ? "1" : "0"},
                       {"largest_term", c.predicted.LargestTerm()},
                       {"note", c.note}});
  return rows;
}

namespace {

// The space a search starts from: every modelled strategy the devices run
// (single alone on one device; the by-node hybrids on several nodes), at the
// run's batch, bucket, schedule and micro-batches, no recompute.
SearchSpace DefaultSpace(const RunConfig& c, const Profile& p, const Topology& t) {
  SearchSpace s;
  for (const std::string& name : ModelledStrategies()) {
    const StrategyTraits& traits = *FindTraits(name);
    const bool single = traits.family == Family::kSingle;
    if (single != (t.world() == 1) || t.world() < traits.min_devices()) continue;
    if (traits.replicate_by_node && t.nodes < 2) continue;
    s.strategies.push_back(name);
  }
  s.batches = {c.given.count("--batch-size") ? c.batch_size : p.batch_size};
  s.bucket_caps_mb = {c.bucket_cap_mb};
  s.schedules = {c.schedule};
  s.chunks = {static_cast<int>(c.chunks)};
  s.recompute = {"none"};
  s.replicas = {1};
  return s;
}

// One node of --gpus devices on the profile's link, or (--nodes,
// --gpus-per-node given) the cluster they name.
Topology SearchTopology(const RunConfig& c, const Profile& p) {
  if (!c.given.count("--nodes") && !c.given.count("--gpus-per-node")) {
    RunConfig one = c;
    one.gpus_per_node = c.gpus;
    return MakeTopology(p, one, 1);
  }
  const std::vector<std::string> nodes = SplitNames(c.nodes);
  int64_t n = 0;
  if (nodes.size() != 1 || !WholeAtLeast(nodes[0], 1, &n))
    throw ConfigError(fmt::format("--nodes={}: --search takes one node count, a whole number >= 1", c.nodes));
  return MakeTopology(p, c, static_cast<int>(n));
}

}  // namespace

int RunSearch(const RunConfig& c) {
  const Profile p = ReadProfile(c.search);
  CheckProfileMatchesFlags(p, c, c.search);
  if (c.device != "auto" && c.device != p.device)
    throw ConfigError(fmt::format("--search={}: the profile was measured on {} devices, the search is for --device={}; "
                                  "calibrate on {}",
                                  c.search, p.device, c.device, c.device));
  const Topology t = SearchTopology(c, p);
  const SearchSpace space = ParseSearchSpace(c.search_space, DefaultSpace(c, p, t));
  const double limit = c.device_memory_gb > 0 ? c.device_memory_gb * 1024 : static_cast<double>(c.cpu_device_memory_mb);
  const std::vector<Candidate> ranked = RankCandidates(p, EnumerateCandidates(space, t), limit);
  fmt::print("profile {}: {} width {} at {} px, {}, measured on {} ({}); {} node(s) x {} device(s){}\n", c.search,
             p.model, p.width, p.image_size, p.precision, p.device, p.machine, t.nodes, t.per_node,
             t.world() > 16 * std::max(1, ValidatedWorld()) ? ", extrapolated far past the validated sizes" : "");
  PrintRanked(ranked);
  if (!c.search_csv.empty()) {
    std::string data = fmt::format("{}\n", fmt::join(SearchColumns(), ","));
    for (const Row& r : SearchRows(ranked)) data += FormatRow(SearchColumns(), r);
    ReplaceFile(c.search_csv, data);
  }
  return 0;
}

}  // namespace ddpbench
