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

// The exit code of a run stopped by SIGTERM/SIGUSR1 after every rank wrote
// its snapshot (run the same command to resume); see main.cpp for the others.
constexpr int kExitPreempted = 5;
// A collective timed out or failed, or a rank died: the flight records say which
// rank never entered which collective (harness/flight_recorder.h).
constexpr int kExitRankLost = 7;
// The run's row was written, but a step after the timed ones (the expected
// columns' measurements, --export, --memory-snapshot) failed: its columns are
// empty and the log says why.
constexpr int kExitAfterRunFailed = 8;

struct RunConfig {
  // What to run.
  std::string strategy = "single";
  bool list = false;
  int gpus = 1;                    // logical devices (CUDA GPUs, or CPU thread groups)
  bool gpus_given = false;         // --gpus was on the command line
  bool replicate_degree_given = false;  // --replicate-degree was (hsdp: else one per node)
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
  int data_workers = 0;            // imagefolder: decode threads per rank; 0: the cores the devices leave
  bool skip_bad_images = false;    // imagefolder: count and skip undecodable images instead of stopping
  std::string decode = "cpu";      // imagefolder: where JPEGs are decoded (cpu|gpu)
  bool data_only = false;          // time the training data source alone, no model
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

  // Speed: how the step runs, never what it computes.
  std::string memory_format = "auto";  // auto|channels_last|contiguous (auto: by device)
  std::string tf32 = "on";             // on (PyTorch default: convolutions only)|off|all
  std::string optimizer_impl = "auto"; // auto|fused|foreach|per-param
  bool cuda_graphs = false;            // capture the step once, replay it
  std::string fuse = "off";            // off|bn-add-relu: BatchNorm(+add)+ReLU fused in cuDNN
  int64_t cpu_device_memory_mb = 0;    // capacity of a CPU logical device; 0: the machine's memory
  std::string recompute = "none";     // none|all|auto|LIST: units that recompute their forward in backward (planning/recompute_plan.h)
  int64_t memory_budget_mb = 0;        // --recompute=auto: one device's budget; 0: its capacity
  std::string cpu_malloc = "reuse";    // reuse|system: how freed host memory comes back (memory.h)

  // Output.
  std::string out;                 // CSV file to append the row to ("" : none)
  std::string baseline;            // CSV with the single-device row for scaling
  std::string trace;               // Chrome trace JSON to write ("" : none; harness/trace.h)
  std::string export_file;         // --export: trained weights with torchvision's names ("" : none; app/export.h)
  std::string profile;             // PyTorch profiler trace of the timed steps ("" : none; harness/kineto_profile.h)
  std::string memory_snapshot;     // CUDA caching allocator's history, PyTorch's snapshot pickle ("" : none)
  std::string progress = "auto";   // auto|on|off
  std::string run_id;              // the nightly job's id, copied to every row ("" : none)
  std::string entry;               // the nightly matrix entry that made the row
  bool eval = true;                // test accuracy when the dataset is real
  int64_t eval_batches = 0;        // 0: the whole test set

  // Training to an answer: budgets, targets, validation, snapshots.
  std::string time_budget;         // as typed ("90m"); "" : none
  double time_budget_s = -1;       // parsed; -1: none
  double target_accuracy = -1;     // validation top-1 in (0, 1]; -1: none
  int64_t eval_every = 0;          // steps between validations (0: every epoch)
  double val_fraction = -1;        // -1: 0.2 when training to an answer on real data, else 0
  std::string snapshot_dir;        // "" : no snapshots
  std::string snapshot_every;      // "N" steps or "epoch" ("" : epoch)
  int64_t snapshot_keep = 3;       // newest complete snapshots kept
  bool resume = false;             // a snapshot must be there (else: resume when one is)
  std::string epoch_csv;           // per-epoch CSV ("" : beside --out when there is one)

  // Correctness.
  bool verify = false;
  int64_t verify_steps = 3;
  double verify_tolerance = 1e-4;

  // Distributed (ddp, zero1).
  double bucket_cap_mb = 25.0;
  int64_t grad_accum = 1;
  std::string compression = "none";  // none|fp16|bf16
  double timeout_s = 300.0;          // collective timeout
  int64_t flight_recorder = 2000;    // collectives each rank keeps for a hang's record (0: off; harness/flight_recorder.h)
  std::vector<std::string> inject;   // --inject faults (harness/inject.h), as given
  std::string zero_reduce = "reduce-scatter";  // reduce-scatter|all-reduce
  std::string cpu_backend = "auto";  // gloo|shm|auto: CPU collectives (harness/shm_backend.h); auto: shm within a host
  bool overlap_optimizer = false;    // step each bucket as its all-reduce completes (harness/partial_step.h)
  bool gradient_as_bucket_view = false;  // ddp: .grad are views into the Reducer's buckets (torch's DDP option)

  // Model parallel (mp, pmp).
  std::string balance = "time";      // time|params
  std::string split;                 // explicit: unit counts per stage, "4,6"
  std::string units = "auto";        // auto|blocks|half-blocks: what a stage is made of (pipeline_shape.h)
  int64_t chunks = 0;                // 0: pmp picks it (strategies/pipeline/pipeline_shape.h)
  int64_t replicate_degree = 1;      // zero1/2/3, hsdp: the shard group, pmp/mp --stage-ranks: the pipeline, replicated this many times (planning/mesh.h)
  int64_t shape_trials = 3;          // pmp's open shape: the K fastest predicted shapes run before committing (shape_trials.h)
  std::string schedule = "1f1b";     // gpipe|1f1b|interleaved|zero-bubble|interleaved-zero-bubble
  int64_t virtual_stages = 0;        // interleaved[-zero-bubble]: chunks per device (0: 2)
  std::string rebalance = "auto";    // auto|off|warmup: pmp re-splits from the warm-up's chunk times (rebalance.h)
  bool stage_ranks = false;          // mp/pmp: one rank (process) per stage, hand-off by send/recv
  std::string fill_waits = "on";     // on|off: pmp zero-bubble on CPU: pending W's fill waits (pipeline.cpp)

  // Projection (projection/): calibrate a profile, or project one.
  std::string calibrate;           // profile JSON to write instead of training ("" : train)
  std::string project;             // profile JSON to predict from instead of training ("" : train)
  std::string project_csv;         // --project: the what-if table as CSV ("" : printed only)
  std::string strategies;          // --project: comma list ("" : every modelled one each size can run)
  std::string nodes = "1";         // --project: comma list of node counts
  int gpus_per_node = 8;           // --project
  int nics_per_node = 0;           // --project: 0: one per device
  std::string intra;               // --project: link inside a node ("" : measured, else nvlink4)
  std::string inter;               // --project: link between nodes ("" : measured, else ib-ndr400)
  double device_memory_gb = 0;     // --project: for the largest batch that fits (0: not asked)
  double device_img_s = 0;         // --project: one device's img/s to scale the profile's compute to (0: as measured)
  std::string search;              // --search: profile JSON to rank configurations from ("" : no search)
  std::string search_space;        // --search: key=values;... (projection/search.h)
  std::string search_csv;          // --search: the ranked table as CSV ("" : printed only)
  std::string expected = "auto";   // auto|off|PROFILE: multi-device rows' expected_img_s (app/expected.h)

  // The flags given on the command line (name -> value as typed), so that a
  // flag that does not apply to the strategy is an error, not ignored.
  std::map<std::string, std::string> given;

  // The command line as given, shell-quoted, for the CSV's command column.
  std::string command;

  int Depth() const;  // 18 for "resnet18", ...
  // Trains until an answer (epochs, a time budget or a target accuracy)
  // rather than for a number of timed steps: validation per epoch.
  bool TrainsToAnswer() const { return epochs > 0 || time_budget_s > 0 || target_accuracy > 0; }
  // Steps between snapshots; 0: at every epoch's end (--snapshot-every=epoch).
  int64_t SnapshotEverySteps() const;
  bool UsesCuda() const { return device == "cuda"; }  // after resolution
};

// The fewest images one device may train on at once with `image_size` px
// inputs: 2 where batch norm (--norm=batch) would otherwise see one value per
// channel (the last stage's map is the image halved, rounded up, 5 times, or
// 3 with --small-input: 1x1 up to 32 px), else 1.
int64_t FewestTrainingImages(const RunConfig& config, int64_t image_size);

// pmp's --chunks against FewestTrainingImages: a ConfigError naming it when
// its micro-batches (of a --batch-size it divides) hold too few images.
void CheckMicroBatchImages(const RunConfig& config, int64_t image_size);

std::string ShellQuote(const std::string& arg);

// Seconds as whole milliseconds, checked (a timeout handed to c10d, a store):
// a ConfigError naming `flag` where `seconds` is not finite, negative, or past
// what int64 milliseconds hold, never a blind cast.
int64_t CheckedMilliseconds(const std::string& flag, double seconds);

}  // namespace ddpbench
