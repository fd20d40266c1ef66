// Command-line parsing with CLI11 (a maintained parser: --flag=value and
// --flag value forms, typed conversion), our own messages for the two common
// mistakes (a flag given twice names both values; an unknown flag names the
// nearest known one), then ValidateConfig for checks that span several flags.
#include "app/cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <sstream>

#include "datasets/dataset.h"
#include "app/help.h"
#include "app/numeric_flags.h"
#include "harness/inject.h"
#include "strategies/registry.h"
#include "planning/mesh.h"
#include "planning/traits.h"
#include "planning/schedules.h"

namespace ddpbench {
namespace {

void CheckMember(const std::string& flag, const std::string& value,
                 const std::vector<std::string>& accepted) {
  for (const auto& a : accepted)
    if (a == value) return;
  throw ConfigError(fmt::format("{}={}: not accepted; accepted values: {}", flag,
                                value.empty() ? "''" : value, JoinNames(accepted)));
}

template <typename T>
void CheckAtLeast(const std::string& flag, T value, T minimum) {
  if (value < minimum)
    throw ConfigError(fmt::format("{}={}: must be at least {}", flag, value, minimum));
}

// Edit distance (insertions, deletions, substitutions) between two flags.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// Arguments CLI11 did not take: an unknown flag, with the nearest known one.
void RejectExtras(const CLI::App& app, const std::vector<std::string>& extras) {
  if (extras.empty()) return;
  const std::string arg = extras.front();
  if (arg.empty() || arg[0] != '-')
    throw ConfigError(fmt::format("unexpected argument '{}': ddpbench takes only --flags (see --help)", arg));
  const std::string name = arg.substr(0, arg.find('='));
  std::string best;
  size_t best_distance = std::string::npos;
  for (const CLI::Option* opt : app.get_options())
    for (const auto& known : opt->get_lnames())
      if (size_t d = EditDistance(name, "--" + known); d < best_distance) {
        best_distance = d;
        best = "--" + known;
      }
  const bool close = best_distance <= std::max<size_t>(2, name.size() / 3);
  throw ConfigError(fmt::format("{}: unknown flag{}", name,
                                close ? fmt::format("; did you mean {}?", best) : " (see --help)"));
}

// A flag given more than once is a mistake (which value was meant?), but
// for --inject, whose faults add up.
void RejectRepeats(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() < 2 || opt->get_name() == "--inject") continue;
    std::vector<std::string> values;
    for (const auto& v : opt->results()) values.push_back(ShellQuote(v));
    throw ConfigError(fmt::format("{} is given {} times ({}); give it once", opt->get_name(), opt->count(),
                                  fmt::join(values, ", ")));
  }
}

// Labels name a night or a matrix entry in file names and reports: short,
// no spaces or separators.
void CheckLabel(const std::string& flag, const std::string& value) {
  if (value.size() <= 64 && value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                    "0123456789-_.:+") == std::string::npos)
    return;
  throw ConfigError(fmt::format("{}={}: not accepted; a label is at most 64 characters of letters, digits "
                                "and - _ . : +", flag, value));
}

// The row of --strategy, or the registry's one error naming the registered strategies.
const StrategyTraits& TraitsOf(const RunConfig& c) { return FindStrategy(c.strategy).info; }

// --trace and --profile each write a file of their own: never the results
// file (--out, --baseline) nor the other's.
void CheckWrittenFilesApart(const RunConfig& c) {
  struct File {
    const char* flag;
    const std::string& path;
    const char* what;     // the file's name in the message; for the written ones, what writes it
    const char* example;  // a file name the message suggests instead
  };
  const std::vector<File> taken = {{"--out", c.out, "--out results", ""},
                                   {"--baseline", c.baseline, "--baseline results", ""},
                                   {"--trace", c.trace, "trace", "trace.json"},
                                   {"--profile", c.profile, "profile", "profile.json"},
                                   {"--memory-snapshot", c.memory_snapshot, "memory snapshot", "memory.pickle"},
                                   {"--export", c.export_file, "export", "weights.pt"}};
  for (size_t w = 2; w < taken.size(); ++w) {
    const File& file = taken[w];
    if (file.path.empty()) continue;
    for (size_t o = 0; o < w; ++o)
      if (taken[o].path == file.path)
        throw ConfigError(fmt::format("{}={}: is also the {} file, which the {} would overwrite; give another file "
                                      "(e.g. {})", file.flag, file.path, o < 2 ? taken[o].what : taken[o].flag,
                                      file.what, file.example));
  }
}

// A strategy-specific flag given with another strategy: one error naming
// the strategies it applies to.
void CheckFlagsApply(const RunConfig& c) {
  const StrategyTraits& traits = TraitsOf(c);
  for (const auto& [flag, value] : c.given) {
    const auto strategies = FlagStrategies(flag);
    if (!strategies.empty() && !traits.Reads(flag))
      throw ConfigError(fmt::format("{}={}: applies only to --strategy={}, not to --strategy={}; leave it out",
                                    flag, value, JoinNames(strategies), c.strategy));
  }
}

// --recompute and --memory-budget-mb against each other and the schedule
// (the unit names are checked against the model when the run is prepared).
void CheckRecompute(const RunConfig& c) {
  CheckAtLeast("--memory-budget-mb", c.memory_budget_mb, int64_t{0});
  if (c.given.count("--memory-budget-mb") && c.recompute != "auto")
    throw ConfigError(fmt::format("--memory-budget-mb={} with --recompute={}: the budget chooses which units to "
                                  "recompute; accepted: --recompute=auto, or leave --memory-budget-mb out",
                                  c.memory_budget_mb, c.recompute));
  if (c.recompute.empty())
    throw ConfigError("--recompute=: empty; accepted: none, all, auto, or a comma list of units");
  if (c.recompute == "none") return;
  if (c.given.count("--schedule") && SplitsBackward(ParsePipelineSchedule(c.schedule)))
    throw ConfigError(fmt::format("--recompute={} with --schedule={}: a zero-bubble schedule splits each unit's "
                                  "backward into its input and weight gradients, which a recomputed unit computes "
                                  "in one pass; accepted: --schedule=gpipe|1f1b|interleaved|looped-bfs, or "
                                  "--recompute=none", c.recompute, c.schedule));
  if (c.cuda_graphs)
    throw ConfigError(fmt::format("--recompute={} with --cuda-graphs: a recomputing backward inside a captured "
                                  "step is not built; accepted: leave one of them out", c.recompute));
}

// --cuda-graphs on a strategy whose step cannot be captured: why, by name.
void CheckCudaGraphs(const RunConfig& c) {
  const std::string& why = TraitsOf(c).no_cuda_graphs;
  if (!c.cuda_graphs || why.empty()) return;
  throw ConfigError(fmt::format("--cuda-graphs with --strategy={}: {}; accepted: --strategy={}, or leave "
                                "--cuda-graphs out", c.strategy, why, JoinNames(StrategiesReading("--cuda-graphs"))));
}

// --overlap-optimizer: refused, with the reason, where stepping a bucket as
// soon as it is reduced would not be the plain step's maths, or where the
// strategy has no per-bucket completion to step from.
void CheckOverlapOptimizer(const RunConfig& c) {
  if (!c.overlap_optimizer) return;
  auto refuse = [&](const std::string& why, const std::string& instead) {
    throw ConfigError(fmt::format("--overlap-optimizer with {}; accepted: {}, or leave --overlap-optimizer out", why,
                                  instead));
  };
  if (!TraitsOf(c).Reads("--overlap-optimizer"))
    refuse(fmt::format("--strategy={}: it steps each parameter as its gradient becomes final (a bucket's "
                       "reduction, a stage's last backward), which {} does not do yet (its optimizer steps after the "
                       "whole backward)", c.strategy, c.strategy),
           "--strategy=" + JoinNames(StrategiesReading("--overlap-optimizer")));
  if (TraitsOf(c).family == Family::kPipeline && c.device == "cuda")
    throw ConfigError(PipelineOverlapOnGpuRefusal(c));
  if (TraitsOf(c).family == Family::kPipeline && c.stage_ranks)
    refuse("--stage-ranks: a stage's parameters are stepped by the process's other stages once their rows are "
           "done, and a rank runs one stage", "the stages in one process (leave --stage-ranks out)");
  if (c.amp == "fp16")
    refuse("--amp=fp16: the loss scaler must see every gradient (inf/NaN anywhere skips the whole step) before any "
           "parameter steps", "--amp=bf16|off");
  if (c.cuda_graphs)
    refuse("--cuda-graphs: the optimizer would run inside the all-reduces' completion callbacks, which a captured "
           "graph does not replay", "eager steps");
}

// --replicate-degree: at least 1 and, where the rank count is known here
// (--gpus, spawned ranks), a divisor of it (a pipeline's leaving 2 or more stages)
// (CheckMeshOfWorld repeats this against a launcher's world).
void CheckReplicateDegree(const RunConfig& c) {
  if (c.replicate_degree < 1)
    throw ConfigError(fmt::format("--replicate-degree={}: accepted: 1 (no replication) or more", c.replicate_degree));
  if (c.replicate_degree <= 1 || !TraitsOf(c).Reads("--replicate-degree")) return;
  if (TraitsOf(c).family == Family::kPipeline && !c.stage_ranks)
    throw ConfigError(fmt::format("--replicate-degree={} with --strategy={}: a pipeline is replicated as ranks; "
                                  "accepted: add --stage-ranks (one rank per stage), or leave --replicate-degree out",
                                  c.replicate_degree, c.strategy));
  if (c.gpus_given) CheckMeshOfWorld(c, static_cast<int>(c.gpus));
}

void CheckShapeTrials(const RunConfig& c) {
  if (c.shape_trials < 0 || c.shape_trials > 64)
    throw ConfigError(fmt::format("--shape-trials={}: accepted: 0 (choose by prediction alone) to 64", c.shape_trials));
}

// --cpu-backend picks how CPU ranks exchange tensors: refused, with why, where
// nothing it picks runs (the strategies without ranks are refused by the
// traits' flag lists).
void CheckCpuBackendApplies(const RunConfig& c) {
  if (!c.given.count("--cpu-backend")) return;
  if (c.device == "cuda")
    throw ConfigError(fmt::format("--cpu-backend={} with --device=cuda: GPU ranks exchange tensors over NCCL (Gloo "
                                  "where two share a GPU), never through --cpu-backend; accepted: --device=cpu, or "
                                  "leave --cpu-backend out", c.cpu_backend));
  if (TraitsOf(c).family == Family::kPipeline && !c.stage_ranks)
    throw ConfigError(fmt::format("--cpu-backend={} with --strategy={}: its stages run in one process and hand "
                                  "activations on in memory, with no collectives; accepted: add --stage-ranks (one "
                                  "rank per stage), or leave --cpu-backend out", c.cpu_backend, c.strategy));
}

// --rebalance: a value it accepts, and with warmup on pmp something to
// re-balance (no --split, time balance) and a warm-up long enough to measure
// in (its first step's times include first-touch costs).
void CheckRebalance(const RunConfig& c) {
  CheckMember("--rebalance", c.rebalance, {"auto", "off", "warmup"});
  if (c.rebalance != "warmup" || !TraitsOf(c).Reads("--rebalance")) return;
  if (!c.split.empty())
    throw ConfigError(fmt::format("--rebalance=warmup with --split={}: a given split is run as given; accepted: "
                                  "--rebalance=off, or leave --split out", c.split));
  if (c.balance != "time")
    throw ConfigError(fmt::format("--rebalance=warmup with --balance={}: re-balancing moves units by measured time; "
                                  "accepted: --balance=time, or --rebalance=off", c.balance));
  if (c.warmup < 2)
    throw ConfigError(fmt::format("--rebalance=warmup with --warmup={}: needs at least 2 warm-up steps (the first "
                                  "one's times include first-touch costs); accepted: --warmup>=2, or --rebalance=off",
                                  c.warmup));
}

// --stage-ranks: what the stages-across-ranks pipeline does not run (yet):
// each refused naming the flag and what is accepted.
void CheckStageRanks(const RunConfig& c) {
  if (!c.stage_ranks) return;
  if (c.TrainsToAnswer())
    throw ConfigError("--stage-ranks: validation during training is not built for stages on separate ranks; "
                      "accepted with --steps (and the test-set evaluation after it), or leave --stage-ranks out "
                      "(one process drives every stage)");
  if (c.rebalance == "warmup")
    throw ConfigError("--rebalance=warmup with --stage-ranks: moving units between ranks is not built; "
                      "accepted: --rebalance=off|auto (off across ranks)");
  if (!c.calibrate.empty())
    throw ConfigError("--calibrate with --stage-ranks: calibrate with --strategy=ddp --gpus=2 (its profile "
                      "predicts pmp too); leave --stage-ranks out");
}

// Budgets, targets, validation and snapshots.
void ValidateAnswerFlags(const RunConfig& c) {
  if (c.target_accuracy != -1 && !(c.target_accuracy > 0 && c.target_accuracy <= 1))
    throw ConfigError(fmt::format("--target-accuracy={}: must be a top-1 fraction in (0, 1], e.g. 0.85",
                                  c.target_accuracy));
  const bool real = c.dataset != "synthetic";
  if (c.target_accuracy > 0 && !real)
    throw ConfigError(fmt::format("--target-accuracy={}: synthetic data has no validation set; use a real "
                                  "--dataset (mnist|fashion-mnist|cifar10|cifar100)", c.target_accuracy));
  CheckAtLeast("--eval-every", c.eval_every, int64_t{0});
  if (c.given.count("--eval-every") && !(c.TrainsToAnswer() && real))
    throw ConfigError(fmt::format("--eval-every={}: validation runs only when training to an answer on real "
                                  "data (--epochs, --time-budget or --target-accuracy with a real --dataset)",
                                  c.eval_every));
  if (c.val_fraction != -1 && !(c.val_fraction >= 0 && c.val_fraction < 1))
    throw ConfigError(fmt::format("--val-fraction={}: must be in [0, 1)", c.val_fraction));
  if (c.val_fraction > 0 && !real)
    throw ConfigError(fmt::format("--val-fraction={}: synthetic data has no training set to hold out from; "
                                  "use a real --dataset", c.val_fraction));
  if (c.target_accuracy > 0 && c.val_fraction == 0)
    throw ConfigError("--target-accuracy with --val-fraction=0: the target is checked on the validation set; "
                      "give --val-fraction > 0");
  if (c.repeat > 1 && c.TrainsToAnswer())
    throw ConfigError(fmt::format("--repeat={}: repeats time a fixed number of steps; leave it out with "
                                  "--epochs, --time-budget or --target-accuracy", c.repeat));
  for (const char* flag : {"--snapshot-every", "--snapshot-keep", "--resume"})
    if (c.given.count(flag) && c.snapshot_dir.empty())
      throw ConfigError(fmt::format("{}: snapshots need --snapshot-dir=DIR", flag));
  if (c.repeat > 1 && !c.snapshot_dir.empty())
    throw ConfigError(fmt::format("--repeat={} with --snapshot-dir: repeats time the same steps again, a resumed "
                                  "run continues one training; use one or the other", c.repeat));
  c.SnapshotEverySteps();
  CheckAtLeast("--snapshot-keep", c.snapshot_keep, int64_t{1});
  if (!c.snapshot_dir.empty() && c.verify)
    throw ConfigError("--verify with --snapshot-dir: the parity check trains from fresh weights; run it "
                      "without snapshots");
}

}  // namespace


double ParseDuration(const std::string& flag, const std::string& value) {
  const auto bad = [&] {
    return ConfigError(fmt::format("{}={}: not a duration; accepted: seconds or a number with s|m|h units, "
                                   "e.g. 90, 45s, 30m, 2h, 1h30m", flag, value.empty() ? "''" : value));
  };
  double total = 0;
  size_t i = 0;
  std::string last_unit;
  while (i < value.size()) {
    size_t used = 0;
    double number = 0;
    try {
      number = std::stod(value.substr(i), &used);
    } catch (...) {
      throw bad();
    }
    if (used == 0 || !std::isfinite(number) || number < 0 || !std::isdigit(static_cast<unsigned char>(value[i])))
      throw bad();
    i += used;
    const char unit = i < value.size() ? value[i++] : 's';
    const double scale = unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : 0;
    if (scale == 0 || (i == value.size() && used == 0)) throw bad();
    total += number * scale;
  }
  if (!(total > 0) || !std::isfinite(total) || total > 1e9) throw bad();  // 1e9 s: 31 years
  return total;
}

std::vector<std::string> FlagStrategies(const std::string& flag) { return StrategiesReading(flag); }



namespace {

// --calibrate and --project replace training; their own flags need --project.
void ValidateProjectionFlags(const RunConfig& c) {
  if (!c.calibrate.empty() + !c.project.empty() + !c.search.empty() > 1)
    throw ConfigError("--calibrate, --project and --search: give one of them (calibrate first, then project or "
                      "search its file)");
  if (c.project.empty() && c.search.empty())
    for (const char* flag : {"--nodes", "--gpus-per-node", "--nics-per-node", "--intra", "--inter",
                             "--device-memory-gb", "--device-img-s"})
      if (c.given.count(flag))
        throw ConfigError(fmt::format("{}={}: applies to --project and --search only", flag, c.given.at(flag)));
  if (c.project.empty())
    for (const char* flag : {"--project-csv", "--strategies"})
      if (c.given.count(flag))
        throw ConfigError(fmt::format("{}={}: applies to --project only", flag, c.given.at(flag)));
  if (c.search.empty())
    for (const char* flag : {"--search-space", "--search-csv"})
      if (c.given.count(flag))
        throw ConfigError(fmt::format("{}={}: applies to --search only", flag, c.given.at(flag)));
  CheckAtLeast("--gpus-per-node", c.gpus_per_node, 1);
  CheckAtLeast("--nics-per-node", c.nics_per_node, 0);
  if (!(c.device_img_s >= 0) || !std::isfinite(c.device_img_s))
    throw ConfigError(fmt::format("--device-img-s={}: must be a positive number of images per second", c.device_img_s));
  if (!(c.device_memory_gb >= 0) || !std::isfinite(c.device_memory_gb))
    throw ConfigError(fmt::format("--device-memory-gb={}: must be a positive number of GB", c.device_memory_gb));
  if (!c.calibrate.empty() && (c.verify || !c.snapshot_dir.empty() || c.TrainsToAnswer() || c.data_only))
    throw ConfigError("--calibrate measures the model and exits: it takes none of --verify, --snapshot-dir, "
                      "--epochs, --time-budget, --target-accuracy, --data-only");
}

// --batch-size (over --grad-accum) and pmp's micro-batches against what batch
// norm can train on, where the image size is given (pmp checks a dataset's
// native size again once the dataset is open: CheckPipelineShape).
void CheckBatchNormImages(const RunConfig& c) {
  if (c.image_size <= 0) return;
  const int64_t fewest = FewestTrainingImages(c, c.image_size);
  if (c.batch_size / c.grad_accum < fewest)
    throw ConfigError(fmt::format("--batch-size={}{}: batch norm (--norm=batch) needs at least {} images per device at "
                                  "--image-size={}, where the last stage's map is 1x1; accepted: --batch-size>={}{}, "
                                  "a larger --image-size, or --norm=group", c.batch_size,
                                  c.grad_accum > 1 ? fmt::format(" --grad-accum={}", c.grad_accum) : "", fewest,
                                  c.image_size, fewest * c.grad_accum, c.grad_accum > 1 ? " (per micro-batch)" : ""));
  if (TraitsOf(c).micro_batches && c.chunks > 0 && c.batch_size % c.chunks == 0) CheckMicroBatchImages(c, c.image_size);
}

}  // namespace



std::string PipelineOverlapOnGpuRefusal(const RunConfig& c) {
  return fmt::format("--overlap-optimizer with --strategy={} on --device={}{}: the stages step as their gradients "
                     "become final only on CPU devices so far; accepted: --device=cpu, or leave --overlap-optimizer "
                     "out", c.strategy, c.device, c.device == "cuda" ? "" : " (a GPU)");
}

std::string GpuDecodeRefusal(const std::string& device) {
  if (device == "cpu")
    return "--decode=gpu with --device=cpu: GPU decode runs on a CUDA device's JPEG decoder (nvJPEG), which a "
           "CPU run has none of; accepted: --decode=cpu (the default) or --device=cuda";
  return "--decode=gpu: this binary was built without nvJPEG (CMake found no nvjpeg.h and libnvjpeg beside "
         "LibTorch's CUDA; scripts/setup.sh installs PyPI's nvidia-nvjpeg); JPEGs are decoded by the CPU pool "
         "(--data-workers); accepted: --decode=cpu";
}

namespace {

// The devices, the model and its data.
void CheckDevicesModelAndData(const RunConfig& c) {
  CheckAtLeast("--gpus", c.gpus, 1);
  if (c.gpus > 1024) throw ConfigError(fmt::format("--gpus={}: must be at most 1024", c.gpus));
  CheckMember("--device", c.device, {"auto", "cuda", "cpu"});
  CheckAtLeast("--threads-per-device", c.threads_per_device, 1);
  c.Depth();
  CheckAtLeast("--width", c.width, int64_t{1});
  CheckMember("--norm", c.norm, {"batch", "group", "frozen-bn"});
  CheckMember("--dataset", c.dataset, DatasetNames());
  if (c.image_size != 0 && (c.image_size < 8 || c.image_size > 1024))
    throw ConfigError(fmt::format("--image-size={}: must be 0 (native) or 8..1024", c.image_size));
  CheckAtLeast("--batch-size", c.batch_size, int64_t{1});
  CheckAtLeast("--prefetch", c.prefetch, 0);
  CheckAtLeast("--data-workers", c.data_workers, 0);
  if (c.data_only && (c.verify || !c.snapshot_dir.empty() || c.TrainsToAnswer()))
    throw ConfigError("--data-only times the data source without a model: it takes none of --verify, "
                      "--snapshot-dir, --epochs, --time-budget, --target-accuracy");
  CheckMember("--decode", c.decode, {"cpu", "gpu"});
  if (c.decode == "gpu" && c.dataset != "imagefolder")
    throw ConfigError(fmt::format("--decode=gpu: only --dataset=imagefolder decodes images (got --dataset={}); "
                                  "leave it out", c.dataset));
  if (c.decode == "gpu" && c.device == "cpu") throw ConfigError(GpuDecodeRefusal(c.device));
  if ((c.data_workers > 0 || c.skip_bad_images) && c.dataset != "imagefolder")
    throw ConfigError(fmt::format("--data-workers/--skip-bad-images: only --dataset=imagefolder decodes images "
                                  "(got --dataset={}); leave them out", c.dataset));
}

// How long the run trains, and the number types and kernels it trains with.
void CheckLengthPrecisionAndKernels(const RunConfig& c) {
  if (c.num_classes < 0) throw ConfigError(fmt::format("--num-classes={}: must be at least 1", c.num_classes));
  if (c.steps != -1 && c.epochs != -1)
    throw ConfigError(fmt::format("--steps={} and --epochs={}: give one of them, not both", c.steps, c.epochs));
  if (c.steps == 0 || c.steps < -1) throw ConfigError(fmt::format("--steps={}: must be at least 1", c.steps));
  if (c.epochs != -1 && (!(c.epochs > 0) || !std::isfinite(c.epochs)))
    throw ConfigError(fmt::format("--epochs={}: must be a positive number", c.epochs));
  CheckAtLeast("--warmup", c.warmup, int64_t{0});
  CheckAtLeast("--repeat", c.repeat, int64_t{1});
  if (c.repeat > 1 && c.epochs != -1)
    throw ConfigError(fmt::format("--repeat={} with --epochs={}: repeats time a fixed number of steps; "
                                  "use --steps", c.repeat, c.epochs));
  CheckMember("--amp", c.amp, {"off", "bf16", "fp16"});
  CheckMember("--optimizer", c.optimizer, {"sgd", "adam"});
  CheckMember("--memory-format", c.memory_format, {"auto", "channels_last", "contiguous"});
  CheckMember("--tf32", c.tf32, {"on", "off", "all"});
  CheckMember("--optimizer-impl", c.optimizer_impl, {"auto", "fused", "foreach", "per-param"});
  CheckMember("--cpu-malloc", c.cpu_malloc, {"reuse", "system"});
  CheckAtLeast("--cpu-device-memory-mb", c.cpu_device_memory_mb, int64_t{0});
  if (c.cuda_graphs && c.amp == "fp16")
    throw ConfigError("--cuda-graphs with --amp=fp16: the loss scaler decides on the host whether to skip each "
                      "step, which a replayed graph cannot do; use --amp=bf16 or --amp=off");
  if (c.cuda_graphs && c.optimizer_impl != "auto" && c.optimizer_impl != "fused")
    throw ConfigError(fmt::format("--cuda-graphs with --optimizer-impl={}: only the fused kernels keep their step "
                                  "count on the device, where a replayed graph can advance it; use "
                                  "--optimizer-impl=fused (the default on CUDA)", c.optimizer_impl));
  CheckMember("--fuse", c.fuse, {"off", "bn-add-relu", "conv-bn"});
  if (c.fuse != "off" && c.norm != "batch")
    throw ConfigError(fmt::format("--fuse={} with --norm={}: only BatchNorm is fused; use --norm=batch or "
                                  "leave --fuse out", c.fuse, c.norm));
  if (c.fuse == "bn-add-relu" && c.device == "cpu")
    throw ConfigError(fmt::format("--fuse={}: the fusion runs in cuDNN, which needs --device=cuda (or auto on a "
                                  "machine with a GPU); leave the flag out on CPU", c.fuse));
  if (!c.memory_snapshot.empty() && c.device == "cpu")
    throw ConfigError(fmt::format("--memory-snapshot={}: the snapshot is the CUDA caching allocator's history, which "
                                  "needs --device=cuda; on CPU the row's peak_mem columns are the tracking "
                                  "allocator's measure", c.memory_snapshot));
  if (c.cuda_graphs && c.device == "cpu")
    throw ConfigError("--cuda-graphs: CUDA graphs need --device=cuda (or auto on a machine with a GPU); "
                      "leave the flag out on CPU");
  if (c.cuda_graphs && c.gradient_as_bucket_view)
    throw ConfigError("--gradient-as-bucket-view with --cuda-graphs: every step resets the gradients and the "
                      "Reducer points them at its buckets again, which a captured step has not been checked to "
                      "replay; accepted: leave one of them out");
}

// The optimizer, evaluation and the parity check, the data-parallel
// strategies' collectives (buckets, accumulation, compression, timeouts), and
// the files the run writes.
void CheckOptimizerCollectivesAndOutputs(const RunConfig& c, const StrategyTraits& traits) {
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw ConfigError(fmt::format("--lr={}: must be a positive number", c.lr));
  CheckMember("--lr-scaling", c.lr_scaling, {"none", "linear", "sqrt"});
  if (c.momentum < 0 || c.momentum >= 1) throw ConfigError(fmt::format("--momentum={}: must be in [0, 1)", c.momentum));
  if (c.weight_decay < 0) throw ConfigError(fmt::format("--weight-decay={}: must be >= 0", c.weight_decay));
  CheckMember("--progress", c.progress, {"auto", "on", "off"});
  CheckAtLeast("--eval-batches", c.eval_batches, int64_t{0});
  CheckAtLeast("--verify-steps", c.verify_steps, int64_t{1});
  if (!(c.verify_tolerance > 0)) throw ConfigError(fmt::format("--verify-tolerance={}: must be > 0", c.verify_tolerance));
  if (!(c.bucket_cap_mb > 0)) throw ConfigError(fmt::format("--bucket-cap-mb={}: must be > 0", c.bucket_cap_mb));
  if (traits.zero_stage == 3 && c.bucket_cap_mb != 25.0)
    throw ConfigError(fmt::format("--bucket-cap-mb={}: {}'s buckets are the model's units (one each); leave "
                                  "--bucket-cap-mb at its default, or use {}", c.bucket_cap_mb, c.strategy,
                                  JoinNames(StrategiesWhere([](const StrategyTraits& t) {
                                    return t.Reads("--bucket-cap-mb") && t.zero_stage != 3;
                                  }))));
  CheckAtLeast("--grad-accum", c.grad_accum, int64_t{1});
  if (c.grad_accum > 1 && !traits.Reads("--grad-accum"))
    throw ConfigError(fmt::format("--grad-accum={}: gradient accumulation is a ddp option; use it with "
                                  "--strategy=ddp or leave it at 1", c.grad_accum));
  if (c.batch_size % c.grad_accum != 0)
    throw ConfigError(fmt::format("--grad-accum={}: must divide --batch-size={} (each step splits the batch "
                                  "into that many micro-batches)", c.grad_accum, c.batch_size));
  CheckMember("--compression", c.compression, {"none", "fp16", "bf16"});
  if (c.compression != "none" && traits.family == Family::kSharded)
    throw ConfigError(fmt::format("--compression={}: gradient compression is a ddp option; {} reduces "
                                  "gradients in full precision (leave --compression at none)", c.compression, c.strategy));
  if (!(c.timeout_s > 0)) throw ConfigError(fmt::format("--timeout={}: must be > 0 seconds", c.timeout_s));
  CheckAtLeast("--flight-recorder", c.flight_recorder, int64_t{0});
  CheckWrittenFilesApart(c);
  if (!c.export_file.empty() && c.data_only)
    throw ConfigError(fmt::format("--export={}: --data-only trains no model; accepted: a run without --data-only",
                                  c.export_file));
}

// The row's labels, the flags that pick a strategy's variant (its collectives,
// recompute, graphs, the optimizer's overlap), and mp/pmp's cuts and schedules.
void CheckLabelsAndStrategyVariants(const RunConfig& c) {
  CheckLabel("--run-id", c.run_id);
  CheckLabel("--entry", c.entry);
  CheckMember("--zero-reduce", c.zero_reduce, {"reduce-scatter", "all-reduce"});
  CheckMember("--cpu-backend", c.cpu_backend, {"gloo", "shm", "auto"});
  CheckCpuBackendApplies(c);
  CheckMember("--balance", c.balance, {"time", "params"});
  CheckMember("--units", c.units, {"auto", "blocks", "half-blocks"});
  CheckRebalance(c);
  CheckShapeTrials(c);
  CheckReplicateDegree(c);
  CheckCudaGraphs(c);
  CheckOverlapOptimizer(c);
  CheckRecompute(c);
  CheckStageRanks(c);
  if (c.given.count("--chunks")) CheckAtLeast("--chunks", c.chunks, int64_t{1});
  CheckBatchNormImages(c);
  const PipelineSchedule schedule = ParsePipelineSchedule(c.schedule);
  CheckMember("--fill-waits", c.fill_waits, {"on", "off"});
  // The schedule is fixed by --schedule, or by --chunks (then 1f1b unless given).
  if (c.given.count("--fill-waits") && (c.given.count("--schedule") || c.given.count("--chunks")) &&
      !SplitsBackward(schedule))
    throw ConfigError(fmt::format("--fill-waits={} with --schedule={}{}: only the zero-bubble schedules have W's to "
                                  "fill waits with; accepted with --schedule=zero-bubble|interleaved-zero-bubble|zbv|dualpipev, or "
                                  "leave it out", c.fill_waits, c.schedule,
                                  c.given.count("--schedule") ? "" : " (the default with --chunks)"));
  CheckAtLeast("--virtual-stages", c.virtual_stages, int64_t{0});
  if (c.virtual_stages > 0 && IsVShaped(schedule) && c.virtual_stages != 2)
    throw ConfigError(fmt::format("--virtual-stages={}: --schedule={} places exactly 2 chunks per device in a V; "
                                  "accepted: --virtual-stages=2, or leave it out", c.virtual_stages, c.schedule));
  if (c.virtual_stages > 0 && !IsInterleaved(schedule) && !IsVShaped(schedule))
    throw ConfigError(fmt::format("--virtual-stages={}: applies only to --schedule=interleaved|interleaved-zero-bubble|"
                                  "looped-bfs (and 2 to zbv|dualpipev), not to --schedule={}", c.virtual_stages,
                                  c.schedule));
  if (!c.split.empty()) {
    std::stringstream ss(c.split);
    std::string part;
    while (std::getline(ss, part, ',')) {
      size_t pos = 0;
      int v = -1;
      try { v = std::stoi(part, &pos); } catch (...) {}
      if (v < 1 || pos != part.size())
        throw ConfigError(fmt::format("--split={}: must be a comma list of unit counts >= 1, one per device, e.g. 4,6", c.split));
    }
  }
}

}  // namespace

void ValidateConfig(const RunConfig& c) {
  const StrategyTraits& traits = TraitsOf(c);  // names the registered strategies if unknown
  CheckDevicesModelAndData(c);
  CheckLengthPrecisionAndKernels(c);
  CheckOptimizerCollectivesAndOutputs(c, traits);
  CheckLabelsAndStrategyVariants(c);
  ValidateAnswerFlags(c);
  ValidateProjectionFlags(c);
  ParseInjections(c.inject);  // each --inject checked here; its rank once the world is known
  if (c.project.empty() && c.search.empty()) CheckFlagsApply(c);
}

namespace {

// Adds `name` bound to `field` with its range check (the check runs on the
// value as typed; CLI11 then converts it). Integer fields keep their type's
// limits inside the range.
template <typename T>
CLI::Option* AddNumber(CLI::App& app, const std::string& name, T& field, NumberRange range,
                       const std::string& description) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "AddNumber takes a numeric field");
  NumericFlag flag{name, std::is_integral_v<T>, range};
  if constexpr (std::is_integral_v<T>) {
    flag.range.min = std::max<long double>(flag.range.min, std::numeric_limits<T>::min());
    flag.range.max = std::min<long double>(flag.range.max, std::numeric_limits<T>::max());
  }
  auto& table = NumericFlagTable();
  bool known = false;
  for (const auto& f : table) known = known || f.name == name;
  if (!known) table.push_back(flag);
  CLI::Option* option = app.add_option(name, field, description);
  option->check(CLI::Validator(
      [flag](std::string& value) {
        CheckNumber(flag, value);
        return std::string();
      },
      "", "range"));
  return option;
}

// A numeric flag is added with AddNumber and its accepted range
// (app/numeric_flags.h); these are the ranges' common sanity caps.
constexpr long double kMaxCount = 1e9;        // steps, batches: more than any run takes
constexpr long double kMaxMiB = 1 << 30;      // 1 PiB: as bytes, well inside int64
constexpr long double kMaxTimeoutS = 1e7;     // 115 days: as milliseconds, well inside int64

// The flags, registered in the order --help lists them within each topic
// (GroupHelp assigns the topics). Each group binds its flags to fields of `c`.

// The run's shape: strategy and devices.
void AddRunFlags(CLI::App& app, RunConfig& c) {
  app.add_option("--strategy", c.strategy,
                 JoinNames(StrategiesWhere([](const StrategyTraits&) { return true; })) + " (see --list)");
  app.add_flag("--list", c.list, "print the registered strategies and exit");
  AddNumber(app, "--gpus", c.gpus, NumberRange::AtLeast(1, 1024), "number of devices (GPUs, or CPU thread groups)");
  app.add_option("--device", c.device, "auto|cuda|cpu");
  AddNumber(app, "--threads-per-device", c.threads_per_device, NumberRange::AtLeast(1, 1 << 16),
            "CPU: intra-op threads per logical device");
  app.add_flag("--oversubscribe", c.oversubscribe, "allow more devices/ranks than the hardware has");
}

// The model and the data it trains on.
void AddModelAndDataFlags(CLI::App& app, RunConfig& c) {
  app.add_option("--model", c.model, "resnet18|resnet34|resnet50|resnet101|resnet152");
  AddNumber(app, "--width", c.width, NumberRange::AtLeast(1, 1 << 20), "channels of the first ResNet stage");
  app.add_flag("--small-input", c.small_input, "3x3 stride-1 stem without max-pool (28/32 px)");
  app.add_option("--norm", c.norm, "batch|group|frozen-bn");
  app.add_option("--dataset", c.dataset, fmt::format("{}", fmt::join(DatasetNames(), "|")));
  app.add_option("--data-dir", c.data_dir, "dataset directory (fashion-mnist defaults to /usr/share/datasets/fashion-mnist)");
  AddNumber(app, "--image-size", c.image_size, NumberRange::AtLeast(0, 1024),
            "square image size; 0 = native (synthetic: 224)");
  AddNumber(app, "--batch-size", c.batch_size, NumberRange::AtLeast(1, kMaxCount), "batch per device");
  app.add_flag("--augment", c.augment, "random crop (pad 4) and horizontal flip on training data");
  AddNumber(app, "--prefetch", c.prefetch, NumberRange::AtLeast(0, 1024),
            "batches prepared ahead on background threads");
  AddNumber(app, "--data-workers", c.data_workers, NumberRange::AtLeast(0, 1024),
            "imagefolder: JPEG/PNG decode threads per rank "
                 "(default 0: the cores the devices' threads leave, at least 1)");
  app.add_flag("--skip-bad-images", c.skip_bad_images, "imagefolder: count and skip an undecodable image "
               "(the row says how many) instead of stopping with exit 2");
  app.add_option("--decode", c.decode, "imagefolder: where JPEGs are decoded, cpu (the --data-workers pool, "
                 "default) or gpu (nvJPEG on a CUDA device; not in this build: refused)");
  app.add_flag("--data-only", c.data_only, "time the training data source alone over --steps batches "
               "(no model): loader_img_s for --data-workers");
  AddNumber(app, "--num-classes", c.num_classes, NumberRange::AtLeast(0, 1 << 20),
            "synthetic data: number of classes (default 1000)");
}

// How long it trains, with which optimizer, number types and kernels.
void AddTrainingFlags(CLI::App& app, RunConfig& c) {
  AddNumber(app, "--steps", c.steps, NumberRange::AtLeast(1, kMaxCount), "timed training steps (default 50)");
  AddNumber(app, "--epochs", c.epochs, NumberRange::Above(0, 1e6), "train for this many epochs instead of --steps");
  AddNumber(app, "--warmup", c.warmup, NumberRange::AtLeast(0, kMaxCount), "untimed steps before timing");
  AddNumber(app, "--repeat", c.repeat, NumberRange::AtLeast(1, 10000),
            "run the timed steps this many times after one warm-up; the row "
                 "carries the median throughput and its spread");
  app.add_option("--amp", c.amp, "off|bf16|fp16");
  app.add_option("--optimizer", c.optimizer, "sgd|adam");
  AddNumber(app, "--lr", c.lr, NumberRange::Above(0, 100), "learning rate before scaling");
  app.add_option("--lr-scaling", c.lr_scaling, "none|linear|sqrt in the number of data-parallel replicas");
  AddNumber(app, "--momentum", c.momentum, NumberRange::HalfOpen(0, 1), "SGD momentum");
  AddNumber(app, "--weight-decay", c.weight_decay, NumberRange::AtLeast(0, 1), "weight decay");
  AddNumber(app, "--seed", c.seed, NumberRange::AtLeast(0, std::numeric_limits<uint64_t>::max()),
            "seed for weights, data order and augmentation");
  app.add_option("--memory-format", c.memory_format,
                 "auto (CUDA: channels_last, CPU: contiguous)|channels_last|contiguous, for weights and images");
  app.add_option("--tf32", c.tf32, "CUDA TF32: on (convolutions, PyTorch's default)|off|all (also matmul)");
  app.add_option("--optimizer-impl", c.optimizer_impl,
                 "auto (CUDA: fused, CPU: per-param)|fused|foreach|per-param optimizer kernels");
  app.add_flag("--cuda-graphs", c.cuda_graphs, "CUDA: capture the whole training step once, then replay it");
  app.add_option("--fuse", c.fuse, "off|bn-add-relu (CUDA: BatchNorm, residual add and ReLU in one cuDNN kernel)|conv-bn (BatchNorm from each conv's output sums, folded into a scale-shift-ReLU)");
  app.add_option("--cpu-malloc", c.cpu_malloc,
                 "reuse (freed host memory stays mapped: no page faults per step)|system (glibc's defaults)");
  AddNumber(app, "--cpu-device-memory-mb", c.cpu_device_memory_mb, NumberRange::AtLeast(0, kMaxMiB),
                 "capacity of each CPU logical device in MiB, enforced as a GPU's (0: the machine's memory)");
  app.add_option("--recompute", c.recompute,
                 "activation recompute: none|all|auto (the least added time within --memory-budget-mb)|a comma list "
                 "of stem, head, blocks, layerN, every-K, unit names: recomputed in backward, not kept");
  AddNumber(app, "--memory-budget-mb", c.memory_budget_mb, NumberRange::AtLeast(0, kMaxMiB),
                 "--recompute=auto: what one device may hold, MiB (default: its capacity: a GPU's memory, "
                 "--cpu-device-memory-mb); given alone it implies --recompute=auto");
}

// What the run writes, evaluates, snapshots and checks; `no_eval` is set by --no-eval.
void AddOutputFlags(CLI::App& app, RunConfig& c, bool& no_eval) {
  app.add_option("--out", c.out, "CSV file to append the result row to");
  app.add_option("--baseline", c.baseline, "CSV holding the single-device row for scaling efficiency (default: --out)");
  app.add_option("--export", c.export_file,
                 "FILE.pt: the trained weights as a state_dict with torchvision's ResNet names (torch.load()-able)");
  app.add_option("--trace", c.trace, "Chrome trace (Perfetto) of every rank's phases, micro-batches and collectives");
  app.add_option("--memory-snapshot", c.memory_snapshot,
                 "CUDA: write the caching allocator's history (segments, device traces) as PyTorch's memory "
                 "snapshot pickle, which pytorch.org/memory_viz reads; rank R > 0 writes FILE.rankR");
  app.add_option("--profile", c.profile,
                 "PyTorch profiler (Kineto) trace of rank 0's timed steps: operators, and on CUDA every kernel");
  app.add_option("--run-id", c.run_id, "label copied to the row's run_id column (one nightly job)");
  app.add_option("--entry", c.entry, "label copied to the row's entry column (a nightly matrix entry)");
  app.add_option("--progress", c.progress, "auto (when stderr is a terminal)|on|off");
  app.add_flag("--no-eval", no_eval, "skip the test-set accuracy");
  AddNumber(app, "--eval-batches", c.eval_batches, NumberRange::AtLeast(0, kMaxCount),
            "evaluate on at most this many test batches per rank (0: all)");
  app.add_option("--time-budget", c.time_budget, "train whole steps until this much time is spent "
                 "(e.g. 90m, 2h), then evaluate and write the row");
  AddNumber(app, "--target-accuracy", c.target_accuracy, NumberRange::Above(0, 1),
            "stop when the validation top-1 accuracy reaches this "
                 "fraction (row: time_to_target_s, steps_to_target)");
  AddNumber(app, "--eval-every", c.eval_every, NumberRange::AtLeast(0, kMaxCount),
            "validate every this many steps (0: at each epoch's end)");
  AddNumber(app, "--val-fraction", c.val_fraction, NumberRange::HalfOpen(0, 1),
            "fraction of the training set held out for validation "
                 "(default 0.2 when training to an answer on real data, else 0)");
  app.add_option("--snapshot-dir", c.snapshot_dir, "write resumable snapshots here; a run of the same "
                 "configuration resumes from the newest valid one");
  app.add_option("--snapshot-every", c.snapshot_every, "steps between snapshots, or 'epoch' (default)");
  AddNumber(app, "--snapshot-keep", c.snapshot_keep, NumberRange::AtLeast(1, 1000000),
            "newest snapshots kept in --snapshot-dir");
  app.add_flag("--resume", c.resume, "require a snapshot of this configuration in --snapshot-dir and resume from it");
  app.add_option("--epoch-csv", c.epoch_csv, "per-epoch CSV (default: beside --out)");
  app.add_flag("--verify", c.verify, "check parameters against the single-device run before timing");
  AddNumber(app, "--verify-steps", c.verify_steps, NumberRange::AtLeast(1, 1000000), "steps of the parity check");
  AddNumber(app, "--verify-tolerance", c.verify_tolerance, NumberRange::Above(0, 1e6),
            "largest parameter difference accepted by --verify");
}

// The strategies' own knobs: collectives, faults, sharding, pipeline cuts and schedules.
void AddStrategyFlags(CLI::App& app, RunConfig& c) {
  AddNumber(app, "--bucket-cap-mb", c.bucket_cap_mb, NumberRange::Above(0, 1 << 20),
            JoinNames(StrategiesReading("--bucket-cap-mb")) +
                ": gradient bucket size in MB (zero3, hsdp: the default only; their buckets are the model's units)");
  AddNumber(app, "--grad-accum", c.grad_accum, NumberRange::AtLeast(1, 1 << 20), "ddp: micro-steps per optimizer step");
  app.add_option("--compression", c.compression, "ddp: gradient compression hook none|fp16|bf16");
  AddNumber(app, "--timeout", c.timeout_s, NumberRange::Above(0, kMaxTimeoutS),
            "seconds before a stuck collective ends the run");
  AddNumber(app, "--flight-recorder", c.flight_recorder, NumberRange::AtLeast(0, 1000000),
            "collectives each rank keeps, written as JSON when a "
                 "collective times out or a rank dies; straggler columns read them (0: off)");
  app.add_option("--inject", c.inject, "a fault on purpose (repeatable): delay:rank=R,phase=P,ms=M[,every=K], "
                 "slow-data:rank=R,ms=M[,every=K], hang:rank=R,step=S, crash:rank=R,step=S (docs/robustness.md)");
  app.add_option("--zero-reduce", c.zero_reduce, JoinNames(StrategiesReading("--zero-reduce")) + ": reduce-scatter|all-reduce");
  app.add_option("--cpu-backend", c.cpu_backend,
                 "auto|shm|gloo: CPU ranks' collectives through shared memory where a group's ranks share a host, "
                 "else Gloo (auto, the default; the row's comm_backend says which ran), shared memory only, or Gloo");
  app.add_flag("--overlap-optimizer", c.overlap_optimizer,
               "ddp, zero1, zero2, zero3, hsdp: step each gradient bucket's parameters (zero: this rank's slice) as "
               "soon as its all-reduce or reduce-scatter completes, overlapping the optimizer with the rest of "
               "backward; mp, pmp (CPU, one process): step each parameter once its last micro-batch's gradient "
               "lands, in the other stages' drain (the same update)");
  app.add_flag("--gradient-as-bucket-view", c.gradient_as_bucket_view,
               "ddp: each parameter's .grad is a view into the Reducer's bucket, as torch DDP's "
               "gradient_as_bucket_view=True: one copy of the gradients instead of two, and no copy back after the "
               "all-reduce");
  app.add_option("--balance", c.balance, "mp/pmp: time (measured forward+backward per unit)|params");
  app.add_option("--split", c.split, "mp/pmp: units per stage, e.g. 4,6");
  app.add_option("--units", c.units,
                 "mp/pmp: what stages are cut from: blocks (stem, each residual block, head), half-blocks "
                 "(each block as two units, so a cut can fall inside it) or auto (default: pmp measures half "
                 "blocks and cuts inside a block only where that is predicted clearly faster; otherwise blocks)");
  AddNumber(app, "--chunks", c.chunks, NumberRange::AtLeast(1, 1 << 20),
            "pmp: micro-batches per batch (default: chosen by predicted step time)");
  AddNumber(app, "--replicate-degree", c.replicate_degree, NumberRange::AtLeast(1, 1024),
                 "zero1/zero2/zero3/hsdp: shard within groups of world/R ranks (consecutive ranks: a node's) and "
                 "replicate across the R groups, all-reducing each reduced shard between them (HSDP; default 1, "
                 "hsdp: one per node); mp/pmp with --stage-ranks: R pipelines of world/R stages, each stage's "
                 "gradients all-reduced across them");
  AddNumber(app, "--shape-trials", c.shape_trials, NumberRange::AtLeast(0, 64),
                 "pmp with its shape left open: run the K fastest predicted shapes, mp's and plain 1F1B's for a few "
                 "interleaved steps each and keep the fastest measured (default 3; 0: trust the prediction)");
  app.add_option("--schedule", c.schedule, "pmp: gpipe|1f1b|interleaved|zero-bubble|interleaved-zero-bubble|looped-bfs|zbv|dualpipev");
  AddNumber(app, "--virtual-stages", c.virtual_stages, NumberRange::AtLeast(0, 64),
            "pmp --schedule=interleaved[-zero-bubble]|looped-bfs: model chunks per device (default 2)");
  app.add_option("--fill-waits", c.fill_waits,
                 "pmp zero-bubble schedules on CPU devices: on (default: a device whose next input has not arrived "
                 "runs its pending W's a weight node at a time until it does)|off (the table's order exactly)");
  app.add_flag("--stage-ranks", c.stage_ranks,
               "mp/pmp: one rank (process) per stage, spawned or from a launcher, activations and gradients "
               "handed on by point-to-point send/recv over the process group (Gloo; CPU devices)");
  app.add_option("--rebalance", c.rebalance,
                 "pmp: warmup (re-split the model once from the chunks' times measured in the warm-up steps; needs "
                 "--balance=time, no --split, --warmup>=2)|off (the set-up split throughout)|auto (default: warmup "
                 "where each device holds one chunk and those needs are met, else off)");
}

// Calibration, projection and search, which answer without (or before) training.
void AddAnswerFlags(CLI::App& app, RunConfig& c) {
  app.add_option("--calibrate", c.calibrate, "measure this run's unit times, optimizer and (with --gpus>=2 under "
                 "ddp) its link, write them as a profile JSON to this file, and exit (docs/projection.md)");
  app.add_option("--project", c.project, "predict every strategy on --nodes x --gpus-per-node devices from "
                 "this profile (--calibrate) and print the what-if table; no training");
  app.add_option("--project-csv", c.project_csv, "--project: also write the table to this CSV");
  app.add_option("--search", c.search, "rank configurations by the model from this profile: each predicted, those "
                 "that do not fit memory set aside, validated strategies first (docs/search.md; scripts/search.py "
                 "measures the best)");
  app.add_option("--search-space", c.search_space, "--search: key=values;... of strategies, batch, bucket, schedule, "
                 "chunks, recompute, replicate (default: every strategy at the run's settings)");
  app.add_option("--search-csv", c.search_csv, "--search: also write the ranked table to this CSV");
  app.add_option("--strategies", c.strategies, "--project: comma list (default: every strategy each size runs)");
  app.add_option("--nodes", c.nodes, "--project: comma list of node counts (default 1)");
  AddNumber(app, "--gpus-per-node", c.gpus_per_node, NumberRange::AtLeast(1, 1 << 16),
            "--project: devices per node (default 8)");
  AddNumber(app, "--nics-per-node", c.nics_per_node, NumberRange::AtLeast(0, 1 << 16),
            "--project: NICs each node's devices share (default: one each)");
  app.add_option("--intra", c.intra, "--project: link inside a node: a preset (nvlink4, pcie5, ...), measured, "
                 "and/or alpha=TIME,bw=RATE (default: measured, else nvlink4)");
  app.add_option("--inter", c.inter, "--project: link between nodes, as --intra (default: measured, else ib-ndr400)");
  AddNumber(app, "--device-memory-gb", c.device_memory_gb, NumberRange::AtLeast(0, 1e6),
            "--project: device memory for the largest batch that fits");
  AddNumber(app, "--device-img-s", c.device_img_s, NumberRange::AtLeast(0, 1e9),
            "--project: one device's img/s (measured elsewhere or "
                 "published) that the profile's compute times are scaled to");
  app.add_option("--expected", c.expected,
                 "multi-device runs and ddp/zero on one device: auto (default: predict the run from its own "
                 "unit times and link, measured after the timed steps)|off|PROFILE (a --calibrate file)");
}

// Every flag, bound to `c` (and --no-eval to `no_eval`).
void AddFlags(CLI::App& app, RunConfig& c, bool& no_eval) {
  app.option_defaults()->always_capture_default();
  // Repeats are collected (and then refused by RejectRepeats with both values).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras();
  AddRunFlags(app, c);
  AddModelAndDataFlags(app, c);
  AddTrainingFlags(app, c);
  AddOutputFlags(app, c, no_eval);
  AddStrategyFlags(app, c);
  AddAnswerFlags(app, c);
  GroupHelp(app);
}

CLI::App NewApp() {
  return CLI::App{"ddpbench: train one ResNet workload under one parallelism strategy and append one "
                  "honest CSV row (throughput, memory per device, accuracy, scaling, parity)."};
}

}  // namespace

std::vector<NumericFlag> NumericFlags() {
  CLI::App app = NewApp();
  RunConfig c;
  bool no_eval = false;
  AddFlags(app, c, no_eval);
  return NumericFlagTable();
}

std::vector<std::string> FlagsOfNumericType() {
  CLI::App app = NewApp();
  RunConfig c;
  bool no_eval = false;
  AddFlags(app, c, no_eval);
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type == "INT" || type == "UINT" || type == "FLOAT") names.push_back(opt->get_name());
  }
  return names;
}

bool ParseCommandLine(int argc, char** argv, RunConfig* config) {
  RunConfig& c = *config;
  CLI::App app = NewApp();
  bool no_eval = false;
  AddFlags(app, c, no_eval);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(e.what());
  }
  RejectExtras(app, app.remaining());
  RejectRepeats(app);
  c.eval = !no_eval;
  c.gpus_given = app.count("--gpus") > 0;
  c.replicate_degree_given = app.count("--replicate-degree") > 0;
  for (const auto* option : app.get_options())
    if (option->count() > 0 && !option->get_name().empty()) {
      const auto& results = option->results();
      c.given[option->get_name()] = results.empty() ? "" : results.back();
    }
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + ShellQuote(argv[i]);
  c.command = command;
  if (!c.time_budget.empty()) c.time_budget_s = ParseDuration("--time-budget", c.time_budget);
  // A budget given alone asks for the plan that fits it.
  if (c.given.count("--memory-budget-mb") && !c.given.count("--recompute")) c.recompute = "auto";
  if (!c.list) ValidateConfig(c);
  // Training to an answer without a step count runs until the budget or the
  // target stops it (steps stays -1: unbounded).
  if (c.steps == -1 && c.epochs == -1 && c.time_budget_s < 0 && c.target_accuracy < 0) c.steps = 50;
  if (c.val_fraction == -1) c.val_fraction = c.TrainsToAnswer() && c.dataset != "synthetic" ? 0.2 : 0;
  return true;
}

}  // namespace ddpbench
