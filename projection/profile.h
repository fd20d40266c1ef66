// What ddpbench --calibrate measured on one machine, the input of every
// projection: per model unit the forward and backward times at the batch
// sizes the strategies run, its parameter tensors' bytes and the activation
// bytes it holds from forward to backward; the optimizer's time per
// parameter byte; the link between ranks fitted from measured collectives.
// Kept as one JSON file (device, model, batch, precision, versions, command)
// so that scripts/project.py and a later run read the same numbers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "projection/links.h"

namespace ddpbench {

struct UnitCost {
  double forward_ms = 0, backward_ms = 0;
};

struct UnitProfile {
  std::string name;
  std::vector<double> param_bytes;   // each trainable tensor, in model order
  double activation_bytes = 0;       // per sample: held from its forward to its backward
  double output_bytes = 0;           // per sample: what the unit hands to the next
  // The most its backward allocates at once above what it holds when it
  // starts (the gradients of its inner tensors and of its input, the
  // kernels' workspace, its weights' new gradients before they are added to
  // .grad): backward_bytes per sample plus backward_fixed_bytes; both 0 in
  // profiles made before they were measured.
  double backward_bytes = 0, backward_fixed_bytes = 0;
  double BackwardBytes(double images) const { return images * backward_bytes + backward_fixed_bytes; }
  std::map<int64_t, UnitCost> cost;  // by batch size
  double ParamBytes() const;
};

// UnitProfile's backward bytes as a line, fitted to the unit's backward peak
// at two batches (`large` images, the run's, and `small`): through both where
// that gives a slope and a fixed part of at least 0; else through the peak at
// `large` and zero (a workspace that appears only above some batch), or flat
// at it (one that shrinks); all per image with one point (large == small).
// Exact at `large` in every case.
struct BackwardLine {
  double per_image = 0, fixed = 0;
};
BackwardLine FitBackwardLine(int64_t large, double at_large, int64_t small, double at_small);

struct LinkMeasurement {
  std::string collective;  // "all-reduce"
  int ranks = 0;
  std::vector<std::pair<double, double>> points;  // (bytes, seconds)
};

struct Profile {
  int version = 1;
  std::string model, precision, device, machine, command, torch_version, git_sha, optimizer, created;
  int64_t width = 0, image_size = 0, batch_size = 0, element_bytes = 4;
  double momentum = 0;
  int concurrent = 1;             // unit times measured on this many devices at once
  std::vector<UnitProfile> units;
  double optimizer_ms_per_mb = 0;  // one device's optimizer step per MiB of parameters
  // A whole training step (loss, zeroing gradients, autograd's own work)
  // minus its units and optimizer, measured at the profile's batch.
  double step_overhead_ms = 0;
  // What a collective running beside the computation costs the computation
  // (CPU devices: the cores that compute also move and sum the bytes, and
  // wake for every message; GPUs: 0): compute ms per call and per MiB,
  // measured by timing a step's computation alone and with collectives
  // running at the same time on every rank.
  double comm_compute_ms_per_call = 0, comm_compute_ms_per_mb = 0;
  // And what the computation costs a collective: how much longer each call
  // takes while the cores compute than on idle ones (its thread waits for a
  // core, and sums on a shared one), per call and per MiB, measured with the
  // same all-reduces beside a forward and backward.
  double comm_loaded_ms_per_call = 0, comm_loaded_ms_per_mb = 0;
  // The four terms above are the all-reduce's (and any collective's without
  // its own). These are the same four measured with the calls zero1/2/3
  // issue instead, all-gathers and reduce-scatters in turn, and price those
  // two collectives; absent (profiles written before them, a ddp run's own
  // expectation) the four above price every collective.
  struct CommTerms {
    double compute_ms_per_call = 0, compute_ms_per_mb = 0, loaded_ms_per_call = 0, loaded_ms_per_mb = 0;
  };
  std::optional<CommTerms> sharded_comm;
  CommTerms CommTermsOf(Collective c) const;
  // Where the ranks compute on the cores that run their calls (CPU devices):
  // how long after a stretch of computation a call that would have ended
  // during it ends, and how long after its due end the scheduler lets it
  // onto a core anyway (timeline.h's CoreWait). None, as --calibrate writes
  // them (measured values predicted worse, research/projection-record.md): calls do not
  // wait for the core.
  std::optional<double> comm_wake_ms, comm_core_latency_ms;
  // The model's buffers (batch norm's running statistics and step counts)
  // as the data-parallel strategies broadcast them from rank 0 before every
  // forward: bytes of each flat tensor c10d::broadcast_coalesced makes, one
  // per dtype. Empty in profiles written before it (no broadcast priced).
  std::vector<double> buffer_broadcast_bytes;
  std::optional<Link> link;        // fitted over the calibration's own ranks
  int link_ranks = 0;
  std::vector<LinkMeasurement> link_points;

  int64_t Parameters() const;  // elements
  std::vector<int64_t> Batches() const;
  // Each unit's cost at `batch`: measured, or scaled linearly from the
  // nearest measured size (`scaled` says so).
  std::vector<UnitCost> CostAt(int64_t batch, bool* scaled = nullptr) const;
};

// The profile's precision for --amp: "float32" (off) or "amp-bf16", "amp-fp16".
std::string PrecisionName(const std::string& amp);

// JSON in and out. ReadProfile: DataError naming the file and the field on a
// missing or malformed one.
void WriteProfile(const Profile& profile, const std::string& path);
Profile ReadProfile(const std::string& path);

// The profile must describe what is asked: ConfigError naming both values
// when model, width, image size or precision differ (batch: only a note,
// since unit times scale; it is checked by the caller where it matters).
void CheckProfileMatches(const Profile& profile, const std::string& model, int64_t width, int64_t image_size,
                         const std::string& precision, const std::string& path);

}  // namespace ddpbench
