// Profiles and topologies made by hand for the projection's and the
// search's tests, and a command line of quoted words for RunDdpbench.
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "projection/links.h"
#include "projection/profile.h"

namespace ddpbench::testing {

inline Link TestLink(double alpha_s, double bandwidth) { return Link{"test", alpha_s, bandwidth, "", {}}; }

// Units of 1 ms forward and 2 ms backward at every batch, each with one
// tensor of `bytes`, 1 KiB of activations and 100 B of output per image.
inline Profile UniformProfile(int units, double bytes, int64_t batch = 8) {
  Profile p;
  p.model = "resnet18", p.width = 16, p.image_size = 32, p.batch_size = batch, p.precision = "float32";
  p.optimizer = "sgd", p.momentum = 0.9, p.machine = "test", p.command = "test", p.device = "cpu";
  for (int u = 0; u < units; ++u) {
    UnitProfile unit;
    unit.name = "u" + std::to_string(u);
    unit.param_bytes = {bytes};
    unit.activation_bytes = 1024, unit.output_bytes = 100;
    for (int64_t b = batch; b >= 1; b /= 2) unit.cost[b] = {1.0 * b / batch, 2.0 * b / batch};
    p.units.push_back(unit);
  }
  return p;
}

inline Topology OneNode(int devices, const Link& link) {
  Topology t;
  t.per_node = devices, t.intra = link, t.inter = link;
  return t;
}

inline std::string Args(const std::vector<std::string>& args) {
  std::string line;
  for (const std::string& a : args) line += (line.empty() ? "" : " ") + ShellQuote(a);
  return line;
}

}  // namespace ddpbench::testing
