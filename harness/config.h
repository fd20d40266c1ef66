// RunConfig: every setting of one run, parsed from the command line (CLI11)
// and validated in one place before anything is built or timed, so that a bad
// value fails fast with one message naming it and what is accepted.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddpbench {

// A bad command line or configuration: printed as one line, exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RunConfig {
  // What to run.
  std::string strategy = "single";
  bool list = false;
  int gpus = 1;                    // logical devices (CUDA GPUs, or CPU thread groups)
  bool gpus_given = false;         // --gpus was on the command line
  std::string device = "auto";     // auto|cuda|cpu
  int threads_per_device = 1;      // CPU: intra-op threads per logical device
  bool oversubscribe = false;      // allow more devices/ranks than hardware

  // Model.
  std::string model = "resnet18";  // resnet18|34|50|101|152
  int64_t width = 64;
  bool small_input = false;
  std::string norm = "batch";      // batch|group|frozen-bn

  // Data.
  std::string dataset = "synthetic";
  std::string data_dir;
  int64_t image_size = 0;          // 0: native (synthetic: 224)
  int64_t batch_size = 32;         // per device
  bool augment = false;
  int prefetch = 2;
  int64_t num_classes = 0;         // synthetic only; 0: 1000

  // Schedule.
  int64_t steps = -1;              // timed steps (-1: unset; with --epochs: computed)
  double epochs = -1;              // alternative to --steps (-1: unset)
  int64_t warmup = 5;
  int64_t repeat = 1;              // timed sections after the one warm-up (median + spread)
  std::string amp = "off";         // off|bf16|fp16
  std::string optimizer = "sgd";   // sgd|adam
  double lr = 0.1;
  std::string lr_scaling = "none"; // none|linear|sqrt
  double momentum = 0.9;
  double weight_decay = 0.0;
  uint64_t seed = 42;

  // Speed (issue 9): how the step runs, never what it computes.
  std::string memory_format = "auto";  // auto|channels_last|contiguous (auto: by device)
  std::string tf32 = "on";             // on (PyTorch default: convolutions only)|off|all
  std::string optimizer_impl = "auto"; // auto|fused|foreach|per-param
  bool cuda_graphs = false;            // capture the step once, replay it

  // Output.
  std::string out;                 // CSV file to append the row to ("" : none)
  std::string baseline;            // CSV with the single-device row for scaling
  std::string progress = "auto";   // auto|on|off
  std::string run_id;              // the nightly job's id, copied to every row ("" : none)
  std::string entry;               // the nightly matrix entry that made the row
  bool eval = true;                // test accuracy when the dataset is real
  int64_t eval_batches = 0;        // 0: the whole test set

  // Correctness.
  bool verify = false;
  int64_t verify_steps = 3;
  double verify_tolerance = 1e-4;

  // Distributed (ddp, zero1).
  double bucket_cap_mb = 25.0;
  int64_t grad_accum = 1;
  std::string compression = "none";  // none|fp16|bf16
  double timeout_s = 300.0;          // collective timeout
  std::string zero_reduce = "reduce-scatter";  // reduce-scatter|all-reduce

  // Model parallel (mp, pmp).
  std::string balance = "time";      // time|params
  std::string split;                 // explicit: unit counts per stage, "4,6"
  int64_t chunks = 0;                // 0: pmp picks it (strategies/pipeline_shape.h)
  std::string schedule = "1f1b";     // gpipe|1f1b|interleaved|zero-bubble
  int64_t virtual_stages = 0;        // interleaved: chunks per device (0: 2)

  // The flags given on the command line (name -> value as typed), so that a
  // flag that does not apply to the strategy is an error, not ignored.
  std::map<std::string, std::string> given;

  // The command line as given, shell-quoted, for the CSV's command column.
  std::string command;

  int Depth() const;  // 18 for "resnet18", ...
  bool UsesCuda() const { return device == "cuda"; }  // after resolution
};

// Parses argv into a RunConfig and validates it. Throws ConfigError (bad
// value) or returns false when --help was printed (exit 0).
bool ParseCommandLine(int argc, char** argv, RunConfig* config);

// Range and combination checks shared by the CLI and the tests.
void ValidateConfig(const RunConfig& config);

// The strategies a strategy-specific flag applies to ("zero*": every
// strategy whose name starts with "zero"); empty for a flag every strategy
// takes. The one table of which flag belongs to which strategies.
std::vector<std::string> FlagStrategies(const std::string& flag);

std::string ShellQuote(const std::string& arg);

}  // namespace ddpbench
