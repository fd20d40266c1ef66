// See memory_fit.h.
#include "app/memory_fit.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "base/config.h"
#include "harness/memory.h"
#include "models/resnet.h"
#include "planning/zero_memory.h"

namespace ddpbench {

DeviceDemand EstimateDeviceDemand(const ResNetOptions& model, int64_t height, int64_t width, int64_t device_batch,
                                  const std::string& optimizer, double momentum, int zero_stage, int world,
                                  int model_shards) {
  const ResNetFootprint fp = ResNetFootprintOf(model, height, width);
  const int64_t element = c10::elementSize(model.dtype);
  const ModelStateBytes per_param = BytesPerParameter(optimizer, momentum, element);
  // The formula works in whole parameters; a weight count past int64 is
  // refused anyway, so clamp rather than overflow.
  const double weights = std::min(fp.weights, 9.0e18);
  DeviceDemand d;
  d.state_bytes = ZeroExpectedMb(zero_stage, static_cast<int64_t>(weights), world, per_param) * 1024.0 * 1024.0 /
                  std::max(1, model_shards);
  d.activation_bytes =
      fp.activations_per_image * static_cast<double>(device_batch) * element / std::max(1, model_shards);
  return d;
}

void CheckDemandFits(const RunConfig& config, const DeviceDemand& demand, double capacity_bytes,
                     const std::string& device) {
  if (capacity_bytes <= 0 || demand.total() <= capacity_bytes) return;
  auto bytes = [](double b) { return FormatBytes(static_cast<int64_t>(std::min(b, 9.0e18))); };
  throw ConfigError(fmt::format(
      "--model={} --width={} --batch-size={}: a device needs at least {} ({} of parameters, gradients and "
      "optimizer state, {} of activations), more than the {} of {}{}",
      config.model, config.width, config.batch_size, bytes(demand.total()), bytes(demand.state_bytes),
      bytes(demand.activation_bytes), bytes(capacity_bytes), device, OutOfMemoryAdvice()));
}

double AvailableHostBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

}  // namespace ddpbench
