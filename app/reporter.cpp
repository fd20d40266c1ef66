// The CSV-row reporter and the console line: RunResult in, text out. Every
// figure a row carries is formatted here, in one place, from what the loop
// measured; nothing here measures.
#include "app/run_result.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/config.h"
#include "models/conv_bn.h"
#include "models/fused_norm.h"
#include "planning/traits.h"

namespace ddpbench {
namespace {

std::string Num(double v, int digits = 3) { return fmt::format("{:.{}f}", v, digits); }
std::string JoinNums(const std::vector<double>& v, int digits = 1) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "/" : "") + Num(v[i], digits);
  return s;
}
std::string Bool(bool b) { return b ? "true" : "false"; }

template <typename F>
std::vector<double> Collect(const std::vector<RankFigures>& ranks, F field) {
  std::vector<double> out;
  for (const auto& r : ranks) {
    auto v = field(r);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Who made the others wait (multi-rank runs whose collectives were
// recorded): "none" below the noise line, else the rank, its lateness and phase.
void AddStragglerColumns(const StragglerFigures& s, Row& row) {
  if (!s.measured) return;
  row["straggler_rank"] = s.rank < 0 ? "none" : std::to_string(s.rank);
  row["straggler_ms"] = Num(s.late_ms, 2);
  if (s.rank >= 0) row["straggler_phase"] = s.phase.empty() ? "unknown" : s.phase;
  if (s.rank < 0 && !s.phase.empty()) row["straggler_phase"] = s.phase;  // communication: a slow link
  row["straggler_noise_ms"] = Num(s.noise_ms, 2);
  row["rank_compute_ms"] = JoinNums(s.compute_per_rank_ms, 2);
}

// What ran, where, and how (the row's identity).
// --fuse, and which kernels served it in this process: "bn-add-relu (cuDNN)",
// or ATen's with the reason cuDNN passed (a data type it does not fuse).
std::string FuseColumn(const std::string& fuse) {
  if (fuse == "off") return fuse;
  if (fuse == "conv-bn")
    return fmt::format("conv-bn (ATen stages, {} calls; this build has no cuDNN graph engines for them)",
                       ConvBnCalls());
  const FusedNormUse use = FusedNormUsage();
  if (use.aten_calls == 0) return fuse + " (cuDNN)";
  if (use.cudnn_calls == 0) return fmt::format("{} (ATen: {})", fuse, use.why_aten);
  return fmt::format("{} (cuDNN {} calls, ATen {}: {})", fuse, use.cudnn_calls, use.aten_calls, use.why_aten);
}

void AddIdentity(const RunResult& r, Row& row) {
  const RunConfig& c = *r.config;
  row["timestamp"] = r.env.timestamp;
  row["git_sha"] = kGitSha;
  row["host"] = r.env.host;
  row["strategy"] = c.data_only ? "data-only" : c.strategy;
  row["gpus"] = std::to_string(c.gpus);
  row["nodes"] = std::to_string(r.nodes);
  if (!c.run_id.empty()) row["run_id"] = c.run_id;
  if (!c.entry.empty()) row["entry"] = c.entry;
  row["world_size"] = std::to_string(r.world);
  row["launcher"] = r.launcher;
  if (!r.store_bind.empty()) row["store_bind"] = r.store_bind;
  if (!r.comm_backend.empty()) row["comm_backend"] = r.comm_backend;
  if (!r.socket_ifname.empty()) row["nccl_socket_ifname"] = r.socket_ifname;
  if (!r.trace_file.empty()) row["trace"] = r.trace_file;
  if (!r.profile_file.empty()) row["profile"] = r.profile_file;
  if (!c.inject.empty()) row["inject"] = fmt::format("{}", fmt::join(c.inject, ";"));
  AddStragglerColumns(r.straggler, row);
  row["device"] = c.device;
  row["device_name"] = r.device_name;
  row["threads_per_device"] = r.cuda ? "" : std::to_string(c.threads_per_device);
  row["oversubscribed"] = Bool(r.oversubscribed);
  row["model"] = c.model;
  row["norm"] = c.norm;
  row["width"] = std::to_string(c.width);
  row["small_input"] = Bool(c.small_input);
  row["dataset"] = c.dataset;
  row["image_size"] = std::to_string(r.image_size);
  row["per_device_batch"] = std::to_string(c.batch_size);
  row["global_batch"] = std::to_string(r.global_batch);
  row["steps"] = std::to_string(r.timed_steps);
  row["warmup"] = std::to_string(c.warmup);
  if (c.epochs > 0) row["epochs"] = fmt::format("{}", c.epochs);
  row["amp"] = c.amp;
  row["optimizer"] = c.optimizer;
  row["lr"] = fmt::format("{}", r.lr);
  row["memory_format"] = r.settings.memory_format;
  row["optimizer_impl"] = r.settings.optimizer_impl;
  row["cpu_malloc"] = c.cpu_malloc;
  if (r.cuda) {
    row["tf32"] = r.settings.tf32;
    row["cudnn_benchmark"] = Bool(r.settings.cudnn_benchmark);
    row["cuda_graphs"] = Bool(c.cuda_graphs);
  }
  row["fuse"] = FuseColumn(c.fuse);
}

void AddSpeed(const RunResult& r, Row& row) {
  if (r.timed_steps == 0) return;  // stopped (budget, target) inside the warm-up: nothing was timed
  const double throughput = r.Throughput();
  row["throughput_img_s"] = Num(throughput, 2);
  const auto repeats = r.RepeatThroughputs();
  row["repeats"] = std::to_string(repeats.size());
  if (repeats.size() > 1) {
    row["throughput_mad_img_s"] = Num(MedianAbsoluteDeviation(repeats), 2);
    row["throughput_min_img_s"] = Num(*std::min_element(repeats.begin(), repeats.end()), 2);
    row["throughput_max_img_s"] = Num(*std::max_element(repeats.begin(), repeats.end()), 2);
  }
  row["throughput_per_rank_img_s"] = JoinNums(Collect(r.ranks, [](const RankFigures& f) {
    return std::vector<double>{f.throughput};
  }), 2);
  row["step_ms_p50"] = Num(Percentile(r.step_ms, 50));
  row["step_ms_p90"] = Num(Percentile(r.step_ms, 90));
  const Phase kReported[] = {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer,
                             Phase::kCommunication};
  for (Phase p : kReported) {
    // A replayed CUDA graph runs forward, backward and optimizer as one launch.
    if (r.config->cuda_graphs && (p == Phase::kForward || p == Phase::kBackward || p == Phase::kOptimizer)) continue;
    const double ms = r.phase_ms[static_cast<int>(p)];
    if (p != Phase::kCommunication || ms > 0) row[std::string(PhaseName(p)) + "_ms"] = Num(ms);
  }
  if (r.data) {
    row["data_wait_ms"] = Num(r.data->wait_ms);
    row["data_bound_frac"] = Num(r.data->bound_frac, 4);
    if (!r.data->bound_stage.empty()) {
      std::string stages;
      for (int i = 0; i < kLoadStages; ++i)
        stages += fmt::format("{}{}:{:.4f}", i ? "/" : "", kLoadStageNames[i], r.data->stage_ms[i]);
      row["data_stage_ms"] = stages;
      row["data_bound_stage"] = r.data->bound_stage;
    }
    if (r.data->loader_img_s > 0) row["loader_img_s"] = Num(r.data->loader_img_s, 1);
    row["data_workers"] = std::to_string(r.data->workers);
    if (r.config->skip_bad_images) row["bad_images_skipped"] = std::to_string(r.data->bad_images);
  }
  if (r.model_flops_per_img > 0) {
    row["model_tflops_per_img"] = fmt::format("{:.6g}", r.model_flops_per_img / 1e12);
    if (r.hardware_flops_per_img > 0)
      row["hardware_tflops_per_img"] = fmt::format("{:.6g}", r.hardware_flops_per_img / 1e12);
    if (r.peak_flops > 0) row["mfu"] = Num(throughput * r.model_flops_per_img / r.peak_flops, 4);
  }
}

void AddMemoryAndQuality(const RunResult& r, Row& row) {
  const auto alloc = Collect(r.ranks, [](const RankFigures& f) { return f.mem_allocated_mb; });
  row["peak_mem_mb"] = Num(alloc.empty() ? 0 : *std::max_element(alloc.begin(), alloc.end()), 1);
  row["mem_per_device_mb"] = JoinNums(alloc);
  if (r.cuda) row["mem_reserved_per_device_mb"] = JoinNums(Collect(r.ranks, [](const RankFigures& f) {
                return f.mem_reserved_mb;
              }));
  double rss = 0, loss = 0;
  for (const auto& f : r.ranks) {
    rss = std::max(rss, f.peak_rss_mb);
    loss += f.final_loss / static_cast<double>(r.ranks.size());
  }
  if (!r.cuda) row["peak_rss_mb"] = Num(rss, 1);
  if (!r.ranks.empty() && r.ranks.front().optimizer_state_mb >= 0)
    row["optimizer_state_mb"] = JoinNums(Collect(r.ranks, [](const RankFigures& f) {
      return std::vector<double>{f.optimizer_state_mb};
    }), 2);
  if (r.accuracy >= 0) row["accuracy"] = Num(r.accuracy, 4);
  if (r.test_loss >= 0) row["test_loss"] = Num(r.test_loss, 4);
  if (r.eval_images > 0) row["eval_images"] = std::to_string(r.eval_images);
  row["final_loss"] = Num(loss, 4);
  if (r.parity) {
    row["parity_max_abs_diff"] = fmt::format("{:.3e}", r.parity->max_abs_diff);
    row["parity_steps"] = std::to_string(r.parity->steps);
    row["parity_model"] = r.parity->model;
    row["parity_ok"] = Bool(r.parity->max_abs_diff <= r.config->verify_tolerance);
  }
}

// Budgets, targets, epochs and snapshots.
void AddGoal(const RunResult& r, Row& row) {
  const RunConfig& c = *r.config;
  if (c.val_fraction > 0) row["val_fraction"] = fmt::format("{}", c.val_fraction);
  if (c.time_budget_s > 0) row["time_budget_s"] = fmt::format("{}", c.time_budget_s);
  if (c.target_accuracy > 0) row["target_accuracy"] = fmt::format("{}", c.target_accuracy);
  if (!r.goal) return;
  const GoalFigures& g = *r.goal;
  auto set = [&](const char* column, double v, int digits) {
    if (v >= 0) row[column] = Num(v, digits);
  };
  row["stop_reason"] = g.stop_reason;
  row["steps_done"] = std::to_string(g.steps_done);
  set("train_time_s", g.train_time_s, 2);
  if (g.resumed_from >= 0) row["resumed_from_step"] = std::to_string(g.resumed_from);
  row["restarts"] = std::to_string(g.restarts);
  if (g.restarts > 0) {
    row["worlds"] = g.worlds;
    row["steps_lost"] = std::to_string(g.steps_lost);
  }
  if (!g.batch_adjusted.empty()) row["batch_adjusted"] = g.batch_adjusted;
  if (c.TrainsToAnswer()) row["epochs_completed"] = std::to_string(g.epochs_completed);
  row["steps_per_epoch"] = std::to_string(g.steps_per_epoch);
  set("mean_epoch_s", g.mean_epoch_s, 3);
  set("best_val_loss", g.best_val_loss, 4);
  set("val_accuracy", g.val_accuracy, 4);
  set("time_to_target_s", g.time_to_target_s, 2);
  if (g.steps_to_target >= 0) row["steps_to_target"] = std::to_string(g.steps_to_target);
  if (!g.epoch_csv.empty()) row["epoch_csv"] = g.epoch_csv;
  if (!g.snapshot.empty()) row["snapshot"] = g.snapshot;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

std::vector<double> RunResult::RepeatThroughputs() const {
  std::vector<double> out;
  for (size_t i = 0; !ranks.empty() && i < ranks.front().wall_ms.size(); ++i) {
    double max_wall = 0;
    for (const auto& f : ranks) max_wall = std::max(max_wall, f.wall_ms[i]);
    out.push_back(max_wall > 0 ? global_batch * timed_steps * 1000.0 / max_wall : 0);
  }
  return out;
}

double RunResult::Throughput() const { return Median(RepeatThroughputs()); }

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double TrimmedMean(std::vector<double> values, double trim) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto cut = static_cast<size_t>(std::floor(trim * static_cast<double>(values.size())));
  double sum = 0;
  for (size_t i = cut; i < values.size() - cut; ++i) sum += values[i];
  return sum / static_cast<double>(values.size() - 2 * cut);
}

double MedianAbsoluteDeviation(const std::vector<double>& values) {
  const double m = Median(values);
  std::vector<double> dev;
  for (double v : values) dev.push_back(std::abs(v - m));
  return Median(dev);
}

// `out` = row[measured] / row[expected] where both are there (vs_expected:
// throughput against the model's; memory_vs_expected: the fullest device's
// peak against the model's).
void AddRatio(Row& row, const char* measured_key, const char* expected_key, const char* out) {
  const auto expected = row.find(expected_key);
  const auto measured = row.find(measured_key);
  if (expected == row.end() || measured == row.end() || measured->second.empty()) return;
  const double e = std::stod(expected->second);
  if (e > 0) row[out] = fmt::format("{:.3f}", std::stod(measured->second) / e);
}

Row BuildRow(const RunResult& r) {
  Row row;
  AddIdentity(r, row);
  AddSpeed(r, row);
  AddMemoryAndQuality(r, row);
  AddGoal(r, row);
  row["recompute"] = r.recompute;
  for (const auto& [k, v] : r.extras) row[k] = v;
  AddRatio(row, "throughput_img_s", "expected_img_s", "vs_expected");
  AddRatio(row, "peak_mem_mb", "memory_expected_mb", "memory_vs_expected");
  row["torch_version"] = r.env.torch_version;
  row["cuda_version"] = r.env.cuda_version;
  row["nccl_version"] = r.env.nccl_version;
  if (!r.env.driver_version.empty()) row["driver_version"] = r.env.driver_version;
  row["cpu_model"] = r.env.cpu_model;
  row["cpu_isa"] = r.env.cpu_isa;
  row["machine_id"] = r.env.machine_id;
  row["command"] = r.config->command;
  return row;
}

bool FindBaselineThroughput(const std::vector<Row>& rows, const Row& row, double* throughput) {
  static const char* kMatch[] = {"model", "dataset", "per_device_batch", "device", "threads_per_device",
                                 "image_size", "amp", "width", "small_input", "norm", "device_name"};
  auto get = [](const Row& x, const char* k) {
    auto f = x.find(k);
    return f == x.end() ? std::string() : f->second;
  };
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    const Row& r = *it;
    const StrategyTraits* traits = FindTraits(get(r, "strategy"));
    if (!traits || traits->family != Family::kSingle || get(r, "gpus") != "1") continue;
    bool same = true;
    for (const char* k : kMatch) same = same && get(r, k) == get(row, k);
    if (!same || get(r, "throughput_img_s").empty()) continue;
    *throughput = std::stod(get(r, "throughput_img_s"));
    return *throughput > 0;
  }
  return false;
}

bool AddScaling(const std::vector<Row>& baseline_rows, double gpus, Row* row) {
  double base = 0;
  if (!row->count("throughput_img_s") || !FindBaselineThroughput(baseline_rows, *row, &base)) return false;
  (*row)["baseline_throughput_img_s"] = Num(base, 2);
  (*row)["scaling_efficiency"] = Num(std::stod(row->at("throughput_img_s")) / (gpus * base), 4);
  return true;
}

std::string SummaryLine(const RunResult& r, const Row& row) {
  const RunConfig& c = *r.config;
  return fmt::format("{} gpus={} {}: {:.1f} img/s, step p50 {:.1f} ms, peak mem {} MB{}{}", c.strategy, c.gpus,
                     c.device, r.Throughput(), Percentile(r.step_ms, 50), row.at("mem_per_device_mb"),
                     r.accuracy >= 0 ? fmt::format(", accuracy {:.4f}", r.accuracy) : "",
                     r.parity ? ", parity " + row.at("parity_max_abs_diff") : "");
}

namespace {

// One line of the summary block: a label and text with {column} holes filled
// from the row; shown only when the row has `needs` (every column named).
struct SummaryItem {
  const char* label;
  std::vector<const char*> needs;
  const char* text;
};

std::string Cell(const Row& row, const std::string& k) {
  auto it = row.find(k);
  return it == row.end() ? std::string() : it->second;
}

std::string Fill(const Row& row, const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t end = text[i] == '{' ? text.find('}', i) : std::string::npos;
    if (end == std::string::npos) {
      out += text[i];
      continue;
    }
    out += Cell(row, text.substr(i + 1, end - i - 1));
    i = end;
  }
  return out;
}

bool Has(const Row& row, const std::vector<const char*>& columns) {
  for (const char* c : columns)
    if (Cell(row, c).empty()) return false;
  return true;
}

// Every line a row can fill, in the order a reader asks: what ran, how fast,
// how much memory, how good, and the strategy's own figures.
const std::vector<SummaryItem>& SummaryItems() {
  static const std::vector<SummaryItem> items = {
      {"strategy", {"strategy"}, "{strategy}"},
      {"devices", {"threads_per_device"}, "{gpus} x {device} ({device_name}), {threads_per_device} thread(s) each"},
      {"devices", {"mem_reserved_per_device_mb"}, "{gpus} x {device} ({device_name})"},
      {"ranks", {"launcher"}, "{world_size} (launcher: {launcher})"},
      {"workload", {"model"}, "{model} width {width}, {dataset} {image_size} px, batch {per_device_batch}/device, "
                              "{steps} timed steps after {warmup}"},
      {"throughput", {"throughput_img_s"}, "{throughput_img_s} img/s"},
      {"  spread", {"throughput_mad_img_s"},
       "min {throughput_min_img_s}, max {throughput_max_img_s}, MAD {throughput_mad_img_s} over {repeats} repeats"},
      {"  per rank", {"throughput_per_rank_img_s"}, "{throughput_per_rank_img_s} img/s"},
      {"step", {"step_ms_p50"}, "p50 {step_ms_p50} ms, p90 {step_ms_p90} ms"},
      {"memory/device", {"mem_per_device_mb"}, "{mem_per_device_mb} MB"},
      {"  reserved", {"mem_reserved_per_device_mb"}, "{mem_reserved_per_device_mb} MB"},
      {"peak RSS", {"peak_rss_mb"}, "{peak_rss_mb} MB"},
      {"accuracy", {"accuracy", "test_loss"}, "{accuracy} (test loss {test_loss})"},
      {"final loss", {"final_loss"}, "{final_loss}"},
      {"scaling eff.", {"scaling_efficiency"}, "{scaling_efficiency} (single: {baseline_throughput_img_s} img/s)"},
      {"expected", {"vs_expected"}, "{expected_img_s} img/s from its own parts and link; measured is {vs_expected} "
                                     "of it (largest term: {expected_term})"},
      {"parity", {"parity_max_abs_diff"}, "{parity_max_abs_diff} (ok: {parity_ok}; {parity_model})"},
      {"split", {"split"}, "{split}"},
      {"  units", {"units"}, "{units}"},
      {"  at set-up", {"split_setup"}, "{split_setup}"},
      {"schedule", {"schedule"}, "{schedule}, {chunks} micro-batches"},
      {"  chunks/device", {"virtual_stages"}, "{virtual_stages}"},
      {"bubble", {"bubble_measured"}, "measured {bubble_measured}"},
      {"  theory", {"bubble_theory"}, "{bubble_theory}"},
      {"  simulated", {"bubble_simulated"}, "{bubble_simulated}"},
      {"stage busy", {"stage_busy_ms"}, "{stage_busy_ms} ms/step"},
      {"  step ratio", {"stage_busy_step_ratio"}, "{stage_busy_step_ratio} (median/max)"},
      {"communication", {"communication_ms"}, "{communication_ms} ms/step"},
      {"  hidden", {"allreduce_hidden_frac"}, "{allreduce_hidden_frac} of it behind backward"},
      {"model state", {"zero_expected_mb"}, "param {param_mb} + grad {grad_mb} + optimizer {optimizer_state_mb} MB; "
                                            "expected {zero_expected_mb} MB"},
      {"stopped by", {"stop_reason"}, "{stop_reason} after {steps_done} steps"},
      {"validation", {"val_accuracy"}, "accuracy {val_accuracy}"},
      {"target", {"time_to_target_s"}, "reached in {time_to_target_s} s"},
  };
  return items;
}

}  // namespace

std::string SummaryBlock(const Row& row) {
  std::string out;
  for (const auto& item : SummaryItems()) {
    if (!Has(row, item.needs)) continue;
    const std::string text = Fill(row, item.text);
    out += fmt::format("  {:<15} {}\n", item.label, text);
  }
  return out;
}

}  // namespace ddpbench
