// See snapshot.h. Each rank's tensors go through torch::pickle_save (the
// format torch.save writes, so `torch.load` reads a rank file in Python) and
// ReplaceFile (temporary file, fsync, rename); the SHA-1 of each file comes
// back to rank 0 through an all-gather, which is also the point where every
// rank has finished writing, and only then is the manifest written. Loading
// walks the manifests newest first and takes the first one that every rank
// finds intact (an all-reduce per candidate), so all ranks resume together.
#include "base/crash_point.h"
#include "harness/snapshot.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <c10/util/hash.h>
#include <dirent.h>
#include <sys/stat.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/config.h"
#include "harness/context.h"
#include "harness/cuda_support.h"
#include "harness/dist.h"
#include "base/log.h"
#include "base/results.h"

namespace ddpbench {
namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "ddpbench-snapshot/1";

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "H-step000000120.json" -> 120 for hash H; -1 for any other name.
int64_t StepOf(const std::string& name, const std::string& hash, const std::string& suffix) {
  const std::string prefix = hash + "-step";
  if (!StartsWith(name, prefix) || !EndsWith(name, suffix)) return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

std::string Sha1(const std::string& bytes) { return c10::sha1(bytes).str(); }

// A SHA-1 hex digest as five exact doubles (for the all-gather) and back.
std::vector<double> DigestWords(const std::string& hex) {
  std::vector<double> words;
  for (size_t i = 0; i < 5; ++i) words.push_back(static_cast<double>(std::stoul(hex.substr(i * 8, 8), nullptr, 16)));
  return words;
}
std::string DigestHex(const double* words) {
  std::string hex;
  for (int i = 0; i < 5; ++i) hex += fmt::format("{:08x}", static_cast<uint32_t>(words[i]));
  return hex;
}

json ToJson(const LoopState& s) {
  json history = json::array();
  for (const auto& e : s.history)
    history.push_back({{"epoch", e.epoch}, {"steps", e.steps}, {"train_loss", e.train_loss},
                       {"val_loss", e.val_loss}, {"val_accuracy", e.val_accuracy}, {"epoch_s", e.epoch_s},
                       {"elapsed_s", e.elapsed_s}});
  return {{"step", s.step}, {"elapsed_s", s.elapsed_s}, {"history", history},
          {"time_to_target_s", s.time_to_target_s}, {"steps_to_target", s.steps_to_target},
          {"epoch_csv", s.epoch_csv}, {"restarts", s.restarts}, {"epoch_loss_sum", s.epoch_loss_sum},
          {"epoch_loss_steps", s.epoch_loss_steps}, {"worlds", s.worlds}, {"steps_lost", s.steps_lost}};
}

LoopState FromJson(const json& j) {
  LoopState s;
  s.step = j.at("step").get<int64_t>();
  s.elapsed_s = j.at("elapsed_s").get<double>();
  for (const auto& e : j.at("history"))
    s.history.push_back({e.at("epoch").get<int64_t>(), e.at("steps").get<int64_t>(), e.at("train_loss").get<double>(),
                         e.at("val_loss").get<double>(), e.at("val_accuracy").get<double>(),
                         e.at("epoch_s").get<double>(), e.at("elapsed_s").get<double>()});
  s.time_to_target_s = j.at("time_to_target_s").get<double>();
  s.steps_to_target = j.at("steps_to_target").get<int64_t>();
  s.epoch_csv = j.at("epoch_csv").get<std::string>();
  s.restarts = j.at("restarts").get<int64_t>();
  s.epoch_loss_sum = j.value("epoch_loss_sum", 0.0);  // absent in the first snapshots of this format
  s.epoch_loss_steps = j.value("epoch_loss_steps", int64_t{0});
  s.worlds = j.value("worlds", "");
  s.steps_lost = j.value("steps_lost", int64_t{0});
  return s;
}

// The manifests in `dir` (any configuration), parsed; unreadable ones are
// returned with `error` set.
struct Manifest {
  std::string name;
  json body;
  std::string error;
};
std::vector<Manifest> ReadManifests(const std::string& dir) {
  std::vector<Manifest> out;
  for (const auto& name : ListDir(dir)) {
    if (!EndsWith(name, ".json") || name.find("-step") == std::string::npos) continue;
    Manifest m{name, {}, ""};
    try {
      m.body = json::parse(ReadWholeFile(dir + "/" + name));
      if (m.body.value("format", "") != kFormat) throw std::runtime_error("not a " + std::string(kFormat) + " manifest");
    } catch (const std::exception& e) {
      m.error = e.what();
    }
    out.push_back(std::move(m));
  }
  return out;
}

// The first flag whose value differs, as "--batch-size: 16 there, 32 here".
std::string FirstDifference(const std::map<std::string, std::string>& ours, const json& theirs) {
  for (const auto& [key, value] : ours) {
    const std::string other = theirs.contains(key) ? theirs.at(key).get<std::string>() : "(unset)";
    if (other != value) return fmt::format("--{}: {} there, {} here", key, other, value);
  }
  for (const auto& [key, value] : theirs.items())  // a flag only the snapshot names (set there, default here)
    if (!ours.count(key) && !IsLayoutFlag(key)) return fmt::format("--{}: {} there, (unset) here", key, value.get<std::string>());
  return "the same flags, another format version";
}

torch::ScalarType DtypeNamed(const std::string& name) {
  for (auto t : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kLong, torch::kInt,
                 torch::kByte, torch::kBool})
    if (name == c10::toString(t)) return t;
  throw std::runtime_error("its state names the unknown dtype " + name);
}

json ToJson(const StateDescription& d) {
  json pieces = json::array(), logical = json::object();
  for (const auto& p : d.pieces) pieces.push_back({p.logical, p.begin, p.length, p.holder, p.stored, p.stored_offset});
  for (const auto& [name, t] : d.logical) logical[name] = {c10::toString(t.dtype), t.shape};
  return {{"world", d.world}, {"whole", d.whole}, {"pieces", pieces}, {"logical", logical}};
}

StateDescription StateFromJson(const json& j) {
  StateDescription d;
  d.world = j.at("world").get<int>();
  d.whole = j.at("whole").get<std::vector<std::string>>();
  for (const auto& p : j.at("pieces"))
    d.pieces.push_back({p.at(0).get<std::string>(), p.at(1).get<int64_t>(), p.at(2).get<int64_t>(), p.at(3).get<int>(),
                        p.at(4).get<std::string>(), p.at(5).get<int64_t>()});
  for (const auto& [name, t] : j.at("logical").items())
    d.logical[name] = {t.at(1).get<std::vector<int64_t>>(), DtypeNamed(t.at(0).get<std::string>())};
  return d;
}

// "half-blocks" when a described state's model is cut in half blocks (a unit
// "layer1_0a" holds a residual block's first half, models/resnet.h), else "blocks".
std::string CutOf(const json& state) {
  const std::string prefix = "model.units.";
  for (const auto& [name, t] : state.at("logical").items()) {
    if (!StartsWith(name, prefix)) continue;
    const std::string unit = name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size());
    if (StartsWith(unit, "layer") && (unit.back() == 'a' || unit.back() == 'b')) return "half-blocks";
  }
  return "blocks";
}

// "zero2x2": a layout's strategy and ranks.
std::string LayoutName(const json& layout) {
  return fmt::format("{}x{}", layout.value("strategy", "?"), layout.value("world", "?"));
}

// Rank `rank`'s file of manifest `m`, checked against its size and SHA-1;
// throws std::runtime_error naming what is wrong.
std::string ReadRankFile(const std::string& dir, const json& m, int rank) {
  const json& entry = m.at("files").at(rank);
  const std::string path = dir + "/" + entry.at("file").get<std::string>();
  std::string bytes;
  try {
    bytes = ReadWholeFile(path);
  } catch (const ResultsError&) {
    throw std::runtime_error(fmt::format("rank {}'s file {} cannot be read", rank, path));
  }
  if (bytes.size() != entry.at("bytes").get<size_t>())
    throw std::runtime_error(fmt::format("rank {}'s file {} has {} bytes, the manifest says {} (truncated?)", rank,
                                         path, bytes.size(), entry.at("bytes").get<size_t>()));
  if (Sha1(bytes) != entry.at("sha1").get<std::string>())
    throw std::runtime_error(fmt::format("rank {}'s file {} fails its SHA-1 check (corrupt)", rank, path));
  return bytes;
}

TensorMap Unpickle(const std::string& bytes) {
  TensorMap tensors;
  const auto dict = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  for (const auto& item : dict) tensors[item.key().toStringRef()] = item.value().toTensor();
  return tensors;
}

void MakeDirectory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw ResultsError(fmt::format("--snapshot-dir={}: cannot create it: {}", dir, std::strerror(errno)));
}

}  // namespace

std::map<std::string, std::string> RunIdentity(const RunConfig& c, int world) {
  auto num = [](double v) { return fmt::format("{}", v); };
  std::map<std::string, std::string> identity = {
      {"strategy", c.strategy}, {"world", std::to_string(world)}, {"gpus", std::to_string(c.gpus)},
      {"device", c.device}, {"threads-per-device", std::to_string(c.threads_per_device)},
      {"model", c.model}, {"width", std::to_string(c.width)}, {"small-input", c.small_input ? "1" : "0"},
      {"norm", c.norm}, {"dataset", c.dataset}, {"image-size", std::to_string(c.image_size)},
      {"batch-size", std::to_string(c.batch_size)}, {"augment", c.augment ? "1" : "0"},
      {"num-classes", std::to_string(c.num_classes)}, {"val-fraction", num(c.val_fraction)},
      {"amp", c.amp}, {"optimizer", c.optimizer}, {"lr", num(c.lr)}, {"lr-scaling", c.lr_scaling},
      {"momentum", num(c.momentum)}, {"weight-decay", num(c.weight_decay)}, {"seed", std::to_string(c.seed)},
      {"memory-format", c.memory_format}, {"optimizer-impl", c.optimizer_impl},
      {"bucket-cap-mb", num(c.bucket_cap_mb)}, {"grad-accum", std::to_string(c.grad_accum)},
      {"compression", c.compression}, {"zero-reduce", c.zero_reduce}, {"balance", c.balance},
      {"split", c.split}, {"units", c.units}, {"chunks", std::to_string(c.chunks)}, {"schedule", c.schedule},
      {"virtual-stages", std::to_string(c.virtual_stages)},
  };
  // Flags added later name themselves only when set, so that the snapshots of
  // earlier runs keep their configuration's hash.
  if (c.replicate_degree != 1) identity["replicate-degree"] = std::to_string(c.replicate_degree);
  if (c.stage_ranks) identity["stage-ranks"] = "1";
  return identity;
}

bool IsLayoutFlag(const std::string& flag) {
  static const std::set<std::string> kLayout = {
      "strategy", "world", "gpus", "batch-size", "grad-accum", "bucket-cap-mb", "zero-reduce", "balance", "split",
      "units", "chunks", "schedule", "virtual-stages", "replicate-degree", "stage-ranks"};
  return kLayout.count(flag) != 0;
}

SnapshotStore::SnapshotStore(std::string dir, const std::map<std::string, std::string>& identity, int64_t keep)
    : dir_(std::move(dir)), keep_(keep) {
  for (const auto& [flag, value] : identity) (IsLayoutFlag(flag) ? layout_ : identity_)[flag] = value;
  identity_json_ = json(identity_).dump();
  hash_ = Sha1(identity_json_).substr(0, 12);
}

std::vector<int64_t> SnapshotStore::CompleteSteps() const {
  std::vector<int64_t> steps;
  for (const auto& name : ListDir(dir_)) {
    const int64_t step = StepOf(name, hash_, ".json");
    if (step >= 0) steps.push_back(step);
  }
  return steps;
}

std::string SnapshotStore::WhyNothing() const {
  const auto manifests = ReadManifests(dir_);
  if (manifests.empty()) return fmt::format("{} holds no ddpbench snapshot", dir_);
  std::string why;
  for (const auto& m : manifests) {
    if (!why.empty()) break;
    if (!m.error.empty()) continue;
    try {  // a manifest whose fields are missing or of another type counts as unreadable
      if (m.body.value("identity_hash", "") == hash_) return fmt::format("{}: no intact snapshot of this configuration", dir_);
      why = fmt::format("{}/{} belongs to another configuration ({})", dir_, m.name,
                        FirstDifference(identity_, m.body.at("identity")));
    } catch (const json::exception&) {
      continue;
    }
  }
  return why.empty() ? fmt::format("{} holds only unreadable snapshot manifests", dir_) : why;
}

std::optional<SnapshotStore::Loaded> SnapshotStore::LoadNewest(DistContext& dist, bool can_reshard) {
  std::vector<Manifest> ours;
  for (auto& m : ReadManifests(dir_)) {
    if (StepOf(m.name, hash_, ".json") < 0) continue;
    if (!m.error.empty()) {
      if (dist.is_root()) LogWarn("snapshot {}/{}: unreadable manifest ({}); skipped", dir_, m.name, m.error);
      continue;
    }
    ours.push_back(std::move(m));
  }
  std::reverse(ours.begin(), ours.end());  // newest first (names sort by step)
  const json layout = layout_;
  for (const auto& m : ours) {
    std::string why;
    Loaded loaded;
    try {
      loaded.loop = FromJson(m.body.at("loop"));  // every field present and of its type, or the snapshot is skipped
      if (m.body.at("identity").dump() != identity_json_) throw std::runtime_error("its flags differ from this run's");
      const json& files = m.body.at("files");
      const json theirs = m.body.value("layout", json::object());
      loaded.reshard = theirs != layout;
      loaded.from = LayoutName(theirs);
      if (!loaded.reshard) {
        if (static_cast<int>(files.size()) != dist.world)
          throw std::runtime_error(fmt::format("it has {} rank files, this run {} ranks", files.size(), dist.world));
        loaded.tensors = Unpickle(ReadRankFile(dir_, m.body, dist.rank));
      } else {
        if (const std::string why_not = WhyNotResharded(m.body, can_reshard); !why_not.empty())
          throw std::runtime_error(why_not);
        for (size_t r = dist.rank; r < files.size(); r += dist.world) ReadRankFile(dir_, m.body, static_cast<int>(r));
        loaded.layout_json = theirs.dump();
        loaded.state_json = m.body.at("state").dump();
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) LogWarn("snapshot {}/{}: {}; trying the previous one", dir_, m.name, why);
    if (dist.AllReduceMax(why.empty() ? 0.0 : 1.0) > 0) continue;
    loaded.name = dir_ + "/" + m.name;
    return loaded;
  }
  return std::nullopt;
}

TensorMap SnapshotStore::Reshard(const Loaded& loaded, const TensorMap& fresh, const StateLayout& layout,
                                 DistContext& dist) const {
  const StateDescription old = StateFromJson(json::parse(loaded.state_json));
  std::vector<ShardPiece> want;
  TensorMap out = AllocateTarget(layout, fresh, old.logical, dist.rank, &want);
  const auto copies = PlanReshard(AllPieces(old), want, dist.rank);
  const json manifest = json::parse(ReadWholeFile(loaded.name));
  std::map<int, TensorMap> files;
  for (int holder : HoldersRead(copies)) files[holder] = Unpickle(ReadRankFile(dir_, manifest, holder));
  ApplyCopies(copies, files, &out);
  LogInfo("rank {}: resharded {} ({} -> {}x{}): {} slice copies from rank file(s) {}", dist.rank, loaded.name,
          loaded.from, layout_.count("strategy") ? layout_.at("strategy") : "?", dist.world, copies.size(),
          fmt::join(HoldersRead(copies), ","));
  return out;
}

std::string SnapshotStore::WhyNotResharded(const json& manifest, bool can_reshard) const {
  const std::string from = LayoutName(manifest.value("layout", json::object()));
  if (!manifest.contains("state")) return fmt::format("it was written by {}, whose state cannot be resharded", from);
  if (!can_reshard) return fmt::format("it was written by {}, and --data-only cannot read another layout's state", from);
  const std::string units = layout_.count("units") ? layout_.at("units") : "auto", cut = CutOf(manifest.at("state"));
  if (units != "auto" && units != cut)
    return fmt::format("it was written by {}, whose model is cut in {} (its tensors are named by them), this run's "
                       "in {}; accepted: --units={} or auto", from, cut, units, cut);
  return "";
}

std::string SnapshotStore::WhyNoLayoutFits(bool can_reshard) const {
  std::string why;
  const json layout = layout_;
  for (const auto& m : ReadManifests(dir_)) {
    if (StepOf(m.name, hash_, ".json") < 0 || !m.error.empty()) continue;
    if (m.body.value("layout", json::object()) == layout) return "";
    why = WhyNotResharded(m.body, can_reshard);
    if (why.empty()) return "";
    why = fmt::format("{}/{}: {}", dir_, m.name, why);
  }
  return why;
}

std::string SnapshotStore::NewestCut() const {
  const auto steps = CompleteSteps();
  if (steps.empty()) return "";
  try {
    const json m = json::parse(ReadWholeFile(fmt::format("{}/{}-step{:09d}.json", dir_, hash_, steps.back())));
    return m.contains("state") ? CutOf(m.at("state")) : "";
  } catch (const std::exception&) {
    return "";  // an unreadable manifest: LoadNewest names it
  }
}

std::map<std::string, std::string> SnapshotStore::NewestLayout() const {
  const auto steps = CompleteSteps();
  if (steps.empty()) return {};
  try {
    const json m = json::parse(ReadWholeFile(fmt::format("{}/{}-step{:09d}.json", dir_, hash_, steps.back())));
    return m.value("layout", json::object()).get<std::map<std::string, std::string>>();
  } catch (const std::exception&) {
    return {};  // an unreadable manifest: LoadNewest names it
  }
}

void SnapshotStore::MarkProgress(int64_t step) const {
  std::ofstream(dir_ + "/" + hash_ + "-progress.txt", std::ios::trunc) << step << "\n";
}

int64_t SnapshotStore::Progress() const {
  std::ifstream in(dir_ + "/" + hash_ + "-progress.txt");
  int64_t step = -1;
  return (in >> step) ? step : -1;
}

std::string SnapshotStore::Write(const LoopState& loop, const std::map<std::string, torch::Tensor>& tensors,
                                 DistContext& dist, const StateDescription* state) {
  MakeDirectory(dir_);
  const std::string base = fmt::format("{}-step{:09d}", hash_, loop.step);
  const std::string file = fmt::format("{}.rank{}.pt", base, dist.rank);
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, value] : tensors)  // compact CPU copies: a view would save its whole storage
    dict.insert(key, value.detach().to(torch::kCPU).clone(at::MemoryFormat::Contiguous));
  const std::vector<char> bytes = torch::pickle_save(dict);
  const std::string data(bytes.begin(), bytes.end());
  CrashPoint("snapshot: before the rank file");
  ReplaceFile(dir_ + "/" + file, data);
  CrashPoint("snapshot: rank file written");
  std::vector<double> mine = DigestWords(Sha1(data));
  mine.push_back(static_cast<double>(data.size()));
  const std::vector<double> all = dist.AllGather(mine);  // every rank's file is complete past this point
  CrashPoint("snapshot: every rank's file written, before the manifest");
  const std::string manifest = dir_ + "/" + base + ".json";
  if (dist.is_root()) {
    json files = json::array();
    for (int r = 0; r < dist.world; ++r)
      files.push_back({{"rank", r}, {"file", fmt::format("{}.rank{}.pt", base, r)},
                       {"bytes", static_cast<int64_t>(all[r * 6 + 5])}, {"sha1", DigestHex(&all[r * 6])}});
    json body = {{"format", kFormat}, {"written_at", UtcTimestamp()}, {"identity_hash", hash_},
                 {"identity", json::parse(identity_json_)}, {"layout", layout_}, {"loop", ToJson(loop)},
                 {"files", files}};
    if (state) body["state"] = ToJson(*state);
    ReplaceFile(manifest, body.dump(1) + "\n");
  }
  CrashPoint("snapshot: manifest written");
  dist.Barrier();  // the manifest exists before anything older is pruned
  Prune(dist.world, dist.rank, loop.step);
  CrashPoint("snapshot: pruned");
  return manifest;
}

// Keeps the newest keep_ complete snapshots of this configuration: rank 0
// removes older manifests (first, so a snapshot stops being complete before
// its files go), every rank its own older or orphaned files, and rank 0 also
// those of ranks this world lacks (written by a larger world before a resume).
void SnapshotStore::Prune(int world, int rank, int64_t newest) {
  std::vector<int64_t> complete = CompleteSteps();
  const size_t drop = complete.size() > static_cast<size_t>(keep_) ? complete.size() - keep_ : 0;
  const std::vector<int64_t> kept(complete.begin() + static_cast<std::ptrdiff_t>(drop), complete.end());
  auto is_kept = [&](int64_t step) { return std::find(kept.begin(), kept.end(), step) != kept.end(); };
  if (rank == 0)
    for (size_t i = 0; i < drop; ++i) ::unlink(fmt::format("{}/{}-step{:09d}.json", dir_, hash_, complete[i]).c_str());
  for (const auto& name : ListDir(dir_)) {
    const size_t at = name.find(".rank");
    if (at == std::string::npos) continue;
    const int64_t step = StepOf(name.substr(0, at) + ".json", hash_, ".json");
    const int file_rank = std::atoi(name.c_str() + at + 5);  // a killed writer's "...rankR.pt.tmp-..." too
    const bool mine = file_rank == rank || (rank == 0 && file_rank >= world);
    if (step >= 0 && mine && step <= newest && !is_kept(step)) ::unlink((dir_ + "/" + name).c_str());
  }
}

void CheckResumable(const RunConfig& config, int world) {
  if (!config.resume) return;
  SnapshotStore store(config.snapshot_dir, RunIdentity(config, world), config.snapshot_keep);
  struct stat st {};
  if (::stat(config.snapshot_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw ConfigError(fmt::format("--resume: --snapshot-dir={} does not exist; nothing to resume from",
                                  config.snapshot_dir));
  if (store.CompleteSteps().empty()) store.RefuseResume();
  const std::string why = store.WhyNoLayoutFits(/*can_reshard=*/!config.data_only);
  if (!why.empty()) throw ConfigError(fmt::format("--resume: {}; leave --resume out to start afresh", why));
}

void SnapshotStore::RefuseResume() const {
  throw ConfigError(fmt::format("--resume: {}; leave --resume out to start afresh", WhyNothing()));
}

void SaveRngStates(std::map<std::string, torch::Tensor>* tensors) {
  auto save = [&](const std::string& key, at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    (*tensors)[key] = gen.get_state();
  };
  save("rng.cpu", at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  for (int i = 0; CudaAvailable() && i < CudaDeviceCount(); ++i)
    save(fmt::format("rng.cuda{}", i), at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i)));
}

void LoadRngStates(const std::map<std::string, torch::Tensor>& tensors) {
  for (const auto& [key, state] : tensors) {
    if (!StartsWith(key, "rng.")) continue;
    const c10::Device device = key == "rng.cpu" ? c10::Device(c10::kCPU)
                                                : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(key.substr(8))));
    if (device.is_cuda() && !(CudaAvailable() && device.index() < CudaDeviceCount())) continue;
    at::Generator gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
}

}  // namespace ddpbench
