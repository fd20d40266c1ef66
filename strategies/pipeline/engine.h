// The state every part of the pipeline engine (pipeline.h) shares: the
// schedule table, the model cut into chunks, the devices that run them, and
// which of them this process runs. The strategy (pipeline.cpp) sets it up;
// the schedule walk (walk.h), the hand-offs between chunks (transport.h),
// the placement of units on devices (placement.h) and the row's figures
// (figures.h) each work on it.
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/cuda_support.h"
#include "harness/phase.h"
#include "harness/training.h"
#include "models/resnet.h"
#include "planning/schedules.h"
#include "strategies/device_workers.h"
#include "strategies/pipeline/split_backward.h"
#include "strategies/pipeline/stages.h"

namespace ddpbench {

struct RunConfig;
struct DistContext;

namespace pipeline {

class OptimizerOverlap;
using Clock = std::chrono::steady_clock;

// Busy time of one stage: the sum of its operations' durations, waits for
// other stages excluded. CUDA: events on the stage's stream, read once the
// stream is idle; CPU: the wall clock.
class BusyClock {
 public:
  explicit BusyClock(torch::Device device) : device_(device) {}
  void Start();
  void Stop();
  // Busy milliseconds since the last call (CUDA: waits for the events).
  double Take();

 private:
  torch::Device device_;
  Clock::time_point start_;
  double cpu_ms_ = 0;
  std::vector<std::unique_ptr<CudaEventPair>> events_;
};

// One operation of a stage: busy time and the phase figure together.
class StageWork {
 public:
  StageWork(BusyClock& clock, PhaseTimer& timer, Phase phase, torch::Device device)
      : clock_(clock), scope_(timer.Measure(phase, device)) {
    clock_.Start();
  }
  ~StageWork() { clock_.Stop(); }
  StageWork(const StageWork&) = delete;
  StageWork& operator=(const StageWork&) = delete;

 private:
  BusyClock& clock_;
  PhaseTimer::Scope scope_;
};

// One model chunk (a contiguous run of units) and its micro-batches' state.
struct Chunk {
  Chunk(torch::Device d, int micro_batches)
      : device(d), clock{BusyClock(d), BusyClock(d), BusyClock(d)}, inputs(micro_batches),
        outputs(micro_batches), weight_work(micro_batches), w_done(micro_batches, 0) {}
  torch::Device device;
  std::vector<torch::nn::AnyModule> units;
  std::vector<torch::Tensor> params;
  Mailbox<int, Handoff> from_prev;  // activations from the chunk before, by micro-batch
  Mailbox<int, Handoff> from_next;  // input gradients from the chunk after
  BusyClock clock[3];               // forward, backward (or B), W
  double op_ms[3] = {0, 0, 0};      // timed steps' totals of each
  double warmup_ms[3] = {0, 0, 0};  // warm-up steps' after the first (Rebalance)
  std::vector<torch::Tensor> inputs, outputs;                // per micro-batch, until its backward
  std::vector<std::shared_ptr<WeightGradWork>> weight_work;  // per micro-batch, from B until W
  std::vector<char> w_done;                                  // per micro-batch: this step's W complete

  torch::Tensor Forward(torch::Tensor x);
  void Train(bool on);
};

struct Device {
  Device(torch::Device d, int i) : device(d), index(i), clock(d) {}
  torch::Device device;
  int index;                           // logical device number
  std::vector<torch::Tensor> params;   // of all its chunks
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;
  BusyClock clock;                     // optimizer work
  double optimizer_ms = 0;             // this step's
  double busy_ms = 0;                  // timed steps' total
  double fill_ms = 0;                  // timed steps' W run while an input was missing (busy_ms has it too)
  double activation_peak_bytes = 0;    // timed steps: above the step's starting allocation
  std::vector<double> step_busy_ms;    // each timed step's busy ms
  torch::Tensor found_inf;             // fp16: this step's overflow flag
};

// One step's batch cut into micro-batches, and its loss.
struct StepState {
  std::vector<Handoff> images, labels;  // per micro-batch, from the data loader
  std::vector<int64_t> rows;            // per micro-batch: its images
  std::vector<double> weights;          // micro-batch size / batch size
  torch::Tensor loss;                   // on the last chunk: the batch's mean loss
  bool timed = false;                   // past --warmup
};

struct Engine {
  bool pipelined = false;
  PipelineSchedule schedule = PipelineSchedule::kGPipe;  // the table run (mp: one micro-batch of GPipe)
  const RunConfig* config = nullptr;
  PhaseTimer* timer = nullptr;
  PipelineTable table;
  ResNet model{nullptr};
  StagePlan plan;
  std::vector<int> setup_counts;  // the split chosen at set-up (the row's split_setup)
  std::vector<int> unit_device;   // the device holding each unit's weights (-1: not placed yet)
  bool rebalance = false;         // RebalanceApplies: Rebalance after the warm-up
  bool fill_waits = false;        // --fill-waits=on applies (FillWhileWaiting)
  double lr = 0;
  std::vector<std::unique_ptr<Chunk>> chunks;
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<DeviceWorkers> workers;
  std::unique_ptr<OptimizerOverlap> overlap;  // --overlap-optimizer (overlap_step.h); made last, gone first
  // Timed steps only (the first --warmup steps are excluded).
  int64_t steps = 0, timed_steps = 0;
  double wall_ms = 0;
  // --stage-ranks: device d is rank d, and this process runs its own.
  DistContext* dist = nullptr;
  bool ranks = false;
  int rank = 0;
  std::vector<int> local;  // the devices this process runs, by worker

  // Where the devices run: this process runs the devices in `local` (all of
  // them, or with --stage-ranks its rank's), each on worker WorkerOf(d).
  bool Local(int d) const { return !ranks || d == rank; }
  int WorkerOf(int d) const { return ranks ? 0 : d; }
  Device& Mine() { return *devices[local.front()]; }
  void RunLocal(const std::function<void(int)>& job) {
    workers->RunAll([&](int i) { job(local[i]); });
  }
};

// Which micro-batch, model chunk and schedule action the open trace range is.
void TraceMicroBatch(int chunk, int micro_batch, const char* op);

// "1.0/2.5": values joined for a row column.
std::string Joined(const std::vector<double>& values, const char* format = "{:.1f}");

}  // namespace pipeline
}  // namespace ddpbench
