// Command-line parsing with CLI11 (a maintained parser: --flag=value and
// --flag value forms, typed conversion, "did you mean" and range messages for
// free), followed by ValidateConfig for checks that span several flags.
#include "harness/config.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <sstream>

#include "strategies/registry.h"

namespace ddpbench {
namespace {

std::string Join(const std::vector<std::string>& items) { return fmt::format("{}", fmt::join(items, "|")); }

void CheckMember(const std::string& flag, const std::string& value,
                 const std::vector<std::string>& accepted) {
  for (const auto& a : accepted)
    if (a == value) return;
  throw ConfigError(fmt::format("{}={}: not accepted; accepted values: {}", flag,
                                value.empty() ? "''" : value, Join(accepted)));
}

template <typename T>
void CheckAtLeast(const std::string& flag, T value, T minimum) {
  if (value < minimum)
    throw ConfigError(fmt::format("{}={}: must be at least {}", flag, value, minimum));
}

}  // namespace

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_=./,:+@%") == std::string::npos)
    return arg;
  std::string quoted = "'";
  for (char c : arg) {
    if (c == '\'') quoted += "'\\''";
    else quoted += c;
  }
  return quoted + "'";
}

int RunConfig::Depth() const {
  static const std::vector<std::string> kModels = {"resnet18", "resnet34", "resnet50", "resnet101",
                                                   "resnet152"};
  CheckMember("--model", model, kModels);
  return std::stoi(model.substr(6));
}

void ValidateConfig(const RunConfig& c) {
  FindStrategy(c.strategy);  // names the registered strategies if unknown
  CheckAtLeast("--gpus", c.gpus, 1);
  if (c.gpus > 1024) throw ConfigError(fmt::format("--gpus={}: must be at most 1024", c.gpus));
  CheckMember("--device", c.device, {"auto", "cuda", "cpu"});
  CheckAtLeast("--threads-per-device", c.threads_per_device, 1);
  c.Depth();
  CheckAtLeast("--width", c.width, int64_t{1});
  CheckMember("--norm", c.norm, {"batch", "group", "frozen-bn"});
  CheckMember("--dataset", c.dataset, {"synthetic", "mnist", "fashion-mnist", "cifar10", "cifar100"});
  if (c.image_size != 0 && (c.image_size < 8 || c.image_size > 1024))
    throw ConfigError(fmt::format("--image-size={}: must be 0 (native) or 8..1024", c.image_size));
  CheckAtLeast("--batch-size", c.batch_size, int64_t{1});
  CheckAtLeast("--prefetch", c.prefetch, 0);
  if (c.num_classes < 0) throw ConfigError(fmt::format("--num-classes={}: must be at least 1", c.num_classes));
  if (c.steps != -1 && c.epochs != -1)
    throw ConfigError(fmt::format("--steps={} and --epochs={}: give one of them, not both", c.steps, c.epochs));
  if (c.steps == 0 || c.steps < -1) throw ConfigError(fmt::format("--steps={}: must be at least 1", c.steps));
  if (c.epochs != -1 && (!(c.epochs > 0) || !std::isfinite(c.epochs)))
    throw ConfigError(fmt::format("--epochs={}: must be a positive number", c.epochs));
  CheckAtLeast("--warmup", c.warmup, int64_t{0});
  CheckMember("--amp", c.amp, {"off", "bf16", "fp16"});
  CheckMember("--optimizer", c.optimizer, {"sgd", "adam"});
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw ConfigError(fmt::format("--lr={}: must be a positive number", c.lr));
  CheckMember("--lr-scaling", c.lr_scaling, {"none", "linear", "sqrt"});
  if (c.momentum < 0 || c.momentum >= 1) throw ConfigError(fmt::format("--momentum={}: must be in [0, 1)", c.momentum));
  if (c.weight_decay < 0) throw ConfigError(fmt::format("--weight-decay={}: must be >= 0", c.weight_decay));
  CheckMember("--progress", c.progress, {"auto", "on", "off"});
  CheckAtLeast("--eval-batches", c.eval_batches, int64_t{0});
  CheckAtLeast("--verify-steps", c.verify_steps, int64_t{1});
  if (!(c.verify_tolerance > 0)) throw ConfigError(fmt::format("--verify-tolerance={}: must be > 0", c.verify_tolerance));
  if (!(c.bucket_cap_mb > 0)) throw ConfigError(fmt::format("--bucket-cap-mb={}: must be > 0", c.bucket_cap_mb));
  if (c.strategy == "zero3" && c.bucket_cap_mb != 25.0)
    throw ConfigError(fmt::format("--bucket-cap-mb={}: zero3's buckets are the model's units (one each); leave "
                                  "--bucket-cap-mb at its default, or use ddp|zero1|zero2", c.bucket_cap_mb));
  CheckAtLeast("--grad-accum", c.grad_accum, int64_t{1});
  if (c.grad_accum > 1 && c.strategy != "ddp")
    throw ConfigError(fmt::format("--grad-accum={}: gradient accumulation is a ddp option; use it with "
                                  "--strategy=ddp or leave it at 1", c.grad_accum));
  if (c.batch_size % c.grad_accum != 0)
    throw ConfigError(fmt::format("--grad-accum={}: must divide --batch-size={} (each step splits the batch "
                                  "into that many micro-batches)", c.grad_accum, c.batch_size));
  CheckMember("--compression", c.compression, {"none", "fp16", "bf16"});
  if (c.compression != "none" && c.strategy.rfind("zero", 0) == 0)
    throw ConfigError(fmt::format("--compression={}: gradient compression is a ddp option; {} reduces "
                                  "gradients in full precision (leave --compression at none)", c.compression, c.strategy));
  if (!(c.timeout_s > 0)) throw ConfigError(fmt::format("--timeout={}: must be > 0 seconds", c.timeout_s));
  CheckMember("--zero-reduce", c.zero_reduce, {"reduce-scatter", "all-reduce"});
  CheckMember("--balance", c.balance, {"params", "time"});
  CheckAtLeast("--chunks", c.chunks, int64_t{1});
  CheckMember("--schedule", c.schedule, {"gpipe", "1f1b"});
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

bool ParseCommandLine(int argc, char** argv, RunConfig* config) {
  RunConfig& c = *config;
  CLI::App app{"ddpbench: train one ResNet workload under one parallelism strategy and append one "
               "honest CSV row (throughput, memory per device, accuracy, scaling, parity)."};
  app.option_defaults()->always_capture_default();
  app.add_option("--strategy", c.strategy, "single|dp|ddp|mp|pmp|zero1|zero2|zero3 (see --list)");
  app.add_flag("--list", c.list, "print the registered strategies and exit");
  app.add_option("--gpus", c.gpus, "number of devices (GPUs, or CPU thread groups)");
  app.add_option("--device", c.device, "auto|cuda|cpu");
  app.add_option("--threads-per-device", c.threads_per_device, "CPU: intra-op threads per logical device");
  app.add_flag("--oversubscribe", c.oversubscribe, "allow more devices/ranks than the hardware has");
  app.add_option("--model", c.model, "resnet18|resnet34|resnet50|resnet101|resnet152");
  app.add_option("--width", c.width, "channels of the first ResNet stage");
  app.add_flag("--small-input", c.small_input, "3x3 stride-1 stem without max-pool (28/32 px)");
  app.add_option("--norm", c.norm, "batch|group|frozen-bn");
  app.add_option("--dataset", c.dataset, "synthetic|mnist|fashion-mnist|cifar10|cifar100");
  app.add_option("--data-dir", c.data_dir, "dataset directory (fashion-mnist defaults to /usr/share/datasets/fashion-mnist)");
  app.add_option("--image-size", c.image_size, "square image size; 0 = native (synthetic: 224)");
  app.add_option("--batch-size", c.batch_size, "batch per device");
  app.add_flag("--augment", c.augment, "random crop (pad 4) and horizontal flip on training data");
  app.add_option("--prefetch", c.prefetch, "batches prepared ahead on background threads");
  app.add_option("--num-classes", c.num_classes, "synthetic data: number of classes (default 1000)");
  app.add_option("--steps", c.steps, "timed training steps (default 50)");
  app.add_option("--epochs", c.epochs, "train for this many epochs instead of --steps");
  app.add_option("--warmup", c.warmup, "untimed steps before timing");
  app.add_option("--amp", c.amp, "off|bf16|fp16");
  app.add_option("--optimizer", c.optimizer, "sgd|adam");
  app.add_option("--lr", c.lr, "learning rate before scaling");
  app.add_option("--lr-scaling", c.lr_scaling, "none|linear|sqrt in the number of data-parallel replicas");
  app.add_option("--momentum", c.momentum, "SGD momentum");
  app.add_option("--weight-decay", c.weight_decay, "weight decay");
  app.add_option("--seed", c.seed, "seed for weights, data order and augmentation");
  app.add_option("--out", c.out, "CSV file to append the result row to");
  app.add_option("--baseline", c.baseline, "CSV holding the single-device row for scaling efficiency (default: --out)");
  app.add_option("--progress", c.progress, "auto (when stderr is a terminal)|on|off");
  bool no_eval = false;
  app.add_flag("--no-eval", no_eval, "skip the test-set accuracy");
  app.add_option("--eval-batches", c.eval_batches, "evaluate on at most this many test batches per rank (0: all)");
  app.add_flag("--verify", c.verify, "check parameters against the single-device run before timing");
  app.add_option("--verify-steps", c.verify_steps, "steps of the parity check");
  app.add_option("--verify-tolerance", c.verify_tolerance, "largest parameter difference accepted by --verify");
  app.add_option("--bucket-cap-mb", c.bucket_cap_mb, "ddp|zero1|zero2: gradient bucket size");
  app.add_option("--grad-accum", c.grad_accum, "ddp: micro-steps per optimizer step");
  app.add_option("--compression", c.compression, "ddp: gradient compression hook none|fp16|bf16");
  app.add_option("--timeout", c.timeout_s, "seconds before a stuck collective ends the run");
  app.add_option("--zero-reduce", c.zero_reduce, "zero1|zero2|zero3: reduce-scatter|all-reduce");
  app.add_option("--balance", c.balance, "mp/pmp: params|time");
  app.add_option("--split", c.split, "mp/pmp: units per device, e.g. 4,6");
  app.add_option("--chunks", c.chunks, "pmp: micro-batches per batch");
  app.add_option("--schedule", c.schedule, "pmp: gpipe|1f1b");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw ConfigError(e.what());
  }
  c.eval = !no_eval;
  c.gpus_given = app.count("--gpus") > 0;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + ShellQuote(argv[i]);
  c.command = command;
  if (!c.list) ValidateConfig(c);
  if (c.steps == -1 && c.epochs == -1) c.steps = 50;
  return true;
}

}  // namespace ddpbench
