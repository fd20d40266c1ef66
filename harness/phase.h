// Phase timing and NVTX ranges in one RAII scope, so every timed phase is also
// visible in Nsight under the "ddpbench" domain with the same name. CPU phases
// use the wall clock; CUDA phases use events on the current stream and are
// read only after the last timed step (no host synchronisation per step, so
// the CPU can run ahead of the GPU as it does in plain PyTorch). Pipeline stages time their phases
// from several threads: a phase's figure is then the busy time summed over
// devices.
#pragma once

#include <torch/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace ddpbench {

enum class Phase { kStep = 0, kData, kForward, kBackward, kOptimizer, kCommunication };
constexpr int kNumPhases = 6;
const char* PhaseName(Phase phase);

// An NVTX push/pop range in the "ddpbench" domain (free when no tool listens),
// and the same range in --trace's timeline when it is on (harness/trace.h).
// `name` must be a literal (the trace keeps the pointer).
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool traced_;
};

class CudaEventPair;

class PhaseTimer {
 public:
  explicit PhaseTimer(torch::Device device);
  ~PhaseTimer();

  class Scope {
   public:
    Scope(PhaseTimer* timer, Phase phase, torch::Device device);
    ~Scope();
    Scope(Scope&& other) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseTimer* timer_;
    Phase phase_;
    std::chrono::steady_clock::time_point start_;
    int64_t flight_start_ = 0;  // the flight recorder's record of the phase
    std::shared_ptr<CudaEventPair> events_;
    std::unique_ptr<NvtxRange> range_;
  };

  // Times `phase` on the timer's device (or `device`, for stages on others).
  Scope Measure(Phase phase) { return Scope(this, phase, device_); }
  Scope Measure(Phase phase, torch::Device device) { return Scope(this, phase, device); }
  // Measure(phase) when `on`; nothing when off (a step being captured as a
  // CUDA graph, which cannot hold the timer's events).
  std::optional<Scope> MeasureIf(bool on, Phase phase) {
    return on ? std::optional<Scope>(Measure(phase)) : std::nullopt;
  }
  // Adds `ms` of CPU-timed work to `phase` (e.g. communication measured by a
  // strategy from its own timestamps).
  void Add(Phase phase, double ms) { AddCpu(phase, ms); }
  // Adds to `phase` a figure that can only be read once the device is done
  // (e.g. communication timed by CUDA events on another stream); `ms` is
  // called by Totals(), after the timed loop, and only for counted steps.
  void AddDeferred(Phase phase, std::function<double()> ms);
  void StartStep();
  // Ends the step begun by StartStep; its phases count in Totals() only when
  // `counted` (timed steps, not warm-up). Never waits for the device.
  void EndStep(bool counted);
  // Milliseconds spent in each phase over all counted steps (CUDA: waits for
  // the recorded events, so call it after the timed loop).
  std::array<double, kNumPhases> Totals();

 private:
  void AddCpu(Phase phase, double ms);
  void AddCuda(Phase phase, std::shared_ptr<CudaEventPair> events);

  torch::Device device_;
  std::mutex mutex_;
  std::array<double, kNumPhases> cpu_ms_{};  // this step
  std::vector<std::pair<Phase, std::shared_ptr<CudaEventPair>>> cuda_events_;  // this step
  std::array<double, kNumPhases> totals_{};  // counted steps, resolved
  std::vector<std::pair<Phase, std::shared_ptr<CudaEventPair>>> pending_;  // counted, unread
  std::vector<std::pair<Phase, std::function<double()>>> deferred_, deferred_pending_;  // this step; counted
};

}  // namespace ddpbench
