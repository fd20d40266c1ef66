// Refuses, before anything is allocated, a run whose model state and
// activations cannot fit its devices: a lower bound of what one device must
// hold (the ZeRO formula for parameters, gradients and optimizer state of its
// strategy; every convolution output of its share of the batch) against the
// device's capacity (a GPU's memory; on CPU --cpu-device-memory-mb, else the
// machine's available memory shared by the run's devices on this host). Only a
// sure overflow is refused: the estimate leaves out norms, buffers and
// workspaces, so a run it passes may still run out, and then fails with the
// allocator's out-of-memory line instead.
#pragma once

#include <cstdint>
#include <string>

namespace ddpbench {

struct ResNetOptions;
struct RunConfig;

struct DeviceDemand {
  double state_bytes = 0;       // parameters, gradients, optimizer state
  double activation_bytes = 0;  // convolution outputs of the device's images
  double total() const { return state_bytes + activation_bytes; }
};

// One device's lower bound. `zero_stage` 0 (full replica) to 3; `model_shards`
// devices the model is cut over (mp/pmp), 1 otherwise; `device_batch` images
// a device's forward holds at once.
DeviceDemand EstimateDeviceDemand(const ResNetOptions& model, int64_t height, int64_t width, int64_t device_batch,
                                  const std::string& optimizer, double momentum, int zero_stage, int world,
                                  int model_shards);

// ConfigError (exit 2) naming the flags, the demand and the capacity when
// `demand` exceeds `capacity_bytes` (<= 0: unknown, never refused).
void CheckDemandFits(const RunConfig& config, const DeviceDemand& demand, double capacity_bytes,
                     const std::string& device);

// The machine's available memory (MemAvailable), 0 if it cannot be read.
double AvailableHostBytes();

}  // namespace ddpbench
