// RunResult: everything one run measured, gathered on rank 0, before it is
// turned into output. The loop fills it; reporters (the CSV row, the console
// line) read it, as google/benchmark's BenchmarkReporter reads its Runs, so a
// new output never needs a change in the loop.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "datasets/load_stages.h"
#include "harness/context.h"
#include "harness/phase.h"
#include "base/results.h"
#include "harness/straggler.h"

namespace ddpbench {

struct RunConfig;

// One rank's own figures (gathered to rank 0 in rank order).
struct RankFigures {
  double throughput = 0;       // images/s of this rank's batches
  std::vector<double> wall_ms;  // each timed section (--repeat), in order
  double final_loss = 0;       // mean of its last (up to) 10 timed losses
  double peak_rss_mb = 0;
  double optimizer_state_mb = -1;
  std::vector<double> mem_allocated_mb, mem_reserved_mb;  // per device it drives
};

struct ParityFigures {
  double max_abs_diff = 0;
  int64_t steps = 0;
  std::string model;
};

// The training data source over the timed steps (rank 0).
struct DataFigures {
  int workers = 0;            // builder threads (imagefolder: --data-workers)
  double wait_ms = 0;         // the loop's wait for its batch, per step
  double bound_frac = 0;      // share of the timed wall time spent waiting
  double loader_img_s = 0;    // what the builders sustain: images / busy time x threads
  double consumed_img_s = 0;  // what the loop took when not waiting: images / (wall - wait)
  int64_t bad_images = 0;     // undecodable images skipped (--skip-bad-images)
  // Image loaders: busy ms per image in each LoadStage (summed over the
  // threads), and the stage with the most: the one that bounds the loader.
  StageSeconds stage_ms{};
  std::string bound_stage;
};

// How the step ran: resolved settings that are not plain flags.
struct RunSettings {
  std::string memory_format;   // channels_last|contiguous
  std::string tf32;            // CUDA only: on|off|all
  bool cudnn_benchmark = false;
  std::string optimizer_impl;  // fused|foreach|per-param
};

// A run that trained to an answer (epochs, budget, target) or kept
// snapshots: where it stopped and what it reached.
struct GoalFigures {
  std::string stop_reason;     // steps|epochs|budget|target
  int64_t steps_done = 0;      // training steps in all (earlier sessions too)
  int64_t resumed_from = -1;   // step this session started at; -1: a fresh run
  int64_t restarts = 0;
  std::string worlds;          // each session's strategy:ranks x per-device batch: "zero2:2x8,ddp:1x16"
  int64_t steps_lost = 0;      // steps trained past a snapshot by sessions that died
  std::string batch_adjusted;  // "16->32": the per-device batch changed to keep the global batch
  double train_time_s = 0;     // training time over every session
  int64_t epochs_completed = 0;
  int64_t steps_per_epoch = 0;
  double mean_epoch_s = -1, best_val_loss = -1, val_accuracy = -1;
  double time_to_target_s = -1;
  int64_t steps_to_target = -1;
  std::string epoch_csv, snapshot;
};

struct RunResult {
  const RunConfig* config = nullptr;
  RunEnvironment env;
  RunSettings settings;
  bool cuda = false;
  bool oversubscribed = false;
  int world = 1;
  int nodes = 1;
  std::string launcher;
  std::string socket_ifname;  // NCCL_SOCKET_IFNAME and its source ("" : one process)
  std::string store_bind;  // where the rendezvous store listened ("" : no store)
  // Steps after the timed ones that failed ("expected", "--export"; the log
  // says why): their columns are empty, the row is written, and the run
  // exits kExitAfterRunFailed.
  std::vector<std::string> after_run_failures;
  std::string comm_backend;  // the collectives' backend per group: shm, gloo, nccl, shm+gloo, gloo(shm: why not)
  std::string device_name;
  int64_t image_size = 0, global_batch = 0, timed_steps = 0;
  double lr = 0;
  double model_flops_per_img = 0;  // forward + backward; 0: unknown
  double hardware_flops_per_img = 0;  // and the recomputed forwards (--recompute)
  std::string recompute = "none";     // the row's recompute column
  double peak_flops = 0;           // of the device for the precision; 0: unknown

  std::vector<double> step_ms;                  // rank 0's timed steps
  std::array<double, kNumPhases> phase_ms{};    // rank 0, per step
  std::vector<RankFigures> ranks;
  double accuracy = -1;                         // test top-1; -1: not evaluated
  double test_loss = -1;
  int64_t eval_images = 0;                      // test images evaluated, over every rank
  std::optional<GoalFigures> goal;
  std::optional<ParityFigures> parity;
  std::optional<DataFigures> data;              // real data only
  std::map<std::string, std::string> extras;    // the strategy's own columns
  std::string trace_file;                       // --trace's file, once written
  StragglerFigures straggler;                   // who made the others wait (harness/straggler.h)
  std::string profile_file;                     // --profile's file, once written

  // Global images/s of each timed section: every rank's images over the
  // slowest rank's wall time of that section.
  std::vector<double> RepeatThroughputs() const;
  // Their median (the row's throughput_img_s).
  double Throughput() const;
};

// The CSV row of `result` (ResultColumns() names; cells that do not apply are
// left out). Scaling efficiency is filled by AddScaling.
Row BuildRow(const RunResult& result);

// Fills baseline_throughput_img_s and scaling_efficiency from the newest
// matching single-device row of `baseline_rows`; false when there is none.
bool AddScaling(const std::vector<Row>& baseline_rows, double gpus, Row* row);

// The newest single-device row of `rows` that matches `row` (same model,
// dataset, per-device batch, device, threads...); false when there is none.
bool FindBaselineThroughput(const std::vector<Row>& rows, const Row& row, double* throughput);

// The nearest-rank percentile (p in [0, 100]) of `values`.
double Percentile(std::vector<double> values, double p);
// The median (mean of the middle two for an even count; 0 for none) and the
// median absolute deviation from it (raw; x1.4826 estimates a sigma).
double Median(std::vector<double> values);
// The mean of `values` without the `trim` share (0 <= trim < 0.5) of the
// lowest and of the highest (0 for none): a cost paid on every call, where a
// mean is what adds up, with rare outliers left out.
double TrimmedMean(std::vector<double> values, double trim);
double MedianAbsoluteDeviation(const std::vector<double>& values);

// The one console line a run ends with.
std::string SummaryLine(const RunResult& result, const Row& row);
// The aligned block a person reads at the end of a run (label, value; one line
// per figure the row has), built from the row's own cells.
std::string SummaryBlock(const Row& row);

}  // namespace ddpbench
