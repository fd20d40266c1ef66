#include "planning/zero_memory.h"

#include <fmt/format.h>

#include <stdexcept>

namespace ddpbench {

ModelStateBytes BytesPerParameter(const std::string& optimizer, double momentum, int64_t element_bytes,
                                  bool master_copy) {
  if (optimizer != "sgd" && optimizer != "adam")
    throw std::invalid_argument(fmt::format("optimizer '{}' (accepted: sgd|adam)", optimizer));
  if (element_bytes < 1) throw std::invalid_argument(fmt::format("element size {} bytes", element_bytes));
  const double states = optimizer == "adam" ? 2 : (momentum > 0 ? 1 : 0);
  if (master_copy) return {2, 2, 4 + 4 * states};
  const double b = static_cast<double>(element_bytes);
  return {b, b, b * states};
}

double ZeroExpectedMb(int stage, int64_t parameters, int world, const ModelStateBytes& bytes) {
  if (stage < 0 || stage > 3)
    throw std::invalid_argument(fmt::format("ZeRO stage {} (accepted: 0..3)", stage));
  if (world < 1) throw std::invalid_argument(fmt::format("world size {} (must be >= 1)", world));
  const double n = world;
  double per_param = 0;
  switch (stage) {
    case 0:
      per_param = bytes.param + bytes.grad + bytes.optimizer;
      break;
    case 1:
      per_param = bytes.param + bytes.grad + bytes.optimizer / n;
      break;
    case 2:
      per_param = bytes.param + (bytes.grad + bytes.optimizer) / n;
      break;
    default:
      per_param = (bytes.param + bytes.grad + bytes.optimizer) / n;
      break;
  }
  return per_param * static_cast<double>(parameters) / (1024.0 * 1024.0);
}

std::map<std::string, std::string> ModelStateColumns(double param_bytes, double grad_bytes, int stage,
                                                     int64_t parameters, int world,
                                                     const ModelStateBytes& per_parameter) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return {
      {"param_mb", fmt::format("{:.2f}", param_bytes / kMiB)},
      {"grad_mb", fmt::format("{:.2f}", grad_bytes / kMiB)},
      {"zero_expected_mb", fmt::format("{:.2f}", ZeroExpectedMb(stage, parameters, world, per_parameter))}};
}

}  // namespace ddpbench
