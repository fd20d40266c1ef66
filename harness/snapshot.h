// Snapshots that let a long run survive a killed rank or a preempted job:
// every rank writes its own tensors (model, optimizer state or
// its shard, loss scaler, RNG) atomically, and rank 0 then writes a manifest
// naming every rank's file, its size and SHA-1, the loop's state (step,
// elapsed time, per-epoch history) and the configuration it belongs to. A
// snapshot without its manifest is incomplete and never used, so ranks that
// die half-way leave nothing half-written behind.
//
// Files in DIR, for a configuration whose identity hashes to H:
//   H-step000000120.json          manifest (written last, by rank 0)
//   H-step000000120.rank0.pt      rank 0's tensors (torch.load()-able dict)
// Snapshots of other configurations can share the directory; they are named
// and left alone.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "harness/state_layout.h"

namespace ddpbench {

struct RunConfig;
struct DistContext;

// One epoch's figures, as the per-epoch CSV and the row report them.
struct EpochRecord {
  int64_t epoch = 0;         // 1-based
  int64_t steps = 0;         // training steps done at its end
  double train_loss = 0;     // mean over the epoch's steps
  double val_loss = -1;      // -1: no validation set
  double val_accuracy = -1;
  double epoch_s = 0;        // wall time of the epoch (validation included)
  double elapsed_s = 0;      // training time since the run began, at its end
};

// What the harness carries across a restart besides the tensors.
struct LoopState {
  int64_t step = 0;            // training steps done
  double elapsed_s = 0;        // training time, summed over every session
  std::vector<EpochRecord> history;
  double time_to_target_s = -1;
  int64_t steps_to_target = -1;
  std::string epoch_csv;       // the run's per-epoch file, kept across restarts
  // The current epoch's train losses before `step` (a snapshot taken
  // mid-epoch carries them so the resumed epoch's mean covers every step).
  double epoch_loss_sum = 0;
  int64_t epoch_loss_steps = 0;
  int64_t restarts = 0;        // sessions resumed from a snapshot
  // Each session's strategy, ranks and per-device batch ("zero2:2x8,ddp:1x16"), and the steps the
  // interrupted sessions trained past their last snapshot (redone).
  std::string worlds;
  int64_t steps_lost = 0;
};

// The flags that decide what a run computes, by flag name, as resolved for
// this process (world included). The store hashes those that decide the
// training (model, data, optimizer ...); the layout flags (strategy, world,
// per-device batch ...) are recorded in the manifest, and a snapshot of
// another layout is resharded (harness/state_layout.h) on resume.
std::map<std::string, std::string> RunIdentity(const RunConfig& config, int world);
// Is `flag` a layout flag, which a resume may change?
bool IsLayoutFlag(const std::string& flag);

class SnapshotStore {
 public:
  // dir is created when missing. keep: newest complete snapshots kept.
  SnapshotStore(std::string dir, const std::map<std::string, std::string>& identity, int64_t keep);

  struct Loaded {
    LoopState loop;
    std::map<std::string, torch::Tensor> tensors;  // this rank's, on the CPU (empty when resharded)
    std::string name;                              // manifest file, for messages
    // Written by another layout: its manifest's layout and state, for Reshard().
    bool reshard = false;
    std::string layout_json, state_json;
    std::string from;  // "zero2x2": the layout it was written by
  };
  // The newest snapshot of this configuration whose every rank file is
  // present and intact, loaded for this rank. Collective (ranks agree on the
  // same one). Logs one line for each snapshot skipped and why. A snapshot
  // of another layout is taken when `can_reshard` and it describes its state.
  std::optional<Loaded> LoadNewest(DistContext& dist, bool can_reshard = false);
  // This rank's SaveState() map under `layout` from a snapshot of another
  // layout: `fresh` is the new strategy's SaveState() before its first step.
  // Reads only the rank files holding this rank's slices.
  TensorMap Reshard(const Loaded& loaded, const TensorMap& fresh, const StateLayout& layout, DistContext& dist) const;
  // Manifest entries beside the layout flags (the global batch, the learning rate).
  void AddLayout(const std::string& key, const std::string& value) { layout_[key] = value; }
  // The newest manifest's layout entries of this configuration (any, intact or not); empty if none.
  std::map<std::string, std::string> NewestLayout() const;
  // How the newest manifest's model is cut into units, by its tensors'
  // names: "half-blocks", "blocks", or "" (none, or no described state). A
  // model's tensors are named by its units, so a run reads another layout's
  // snapshot only with the same cut (--units).
  std::string NewestCut() const;
  // Why no snapshot of this configuration can be read by this run's layout
  // (each of another layout that WhyNotResharded refuses), naming the
  // newest; "" when one can (or there is none: RefuseResume says that).
  std::string WhyNoLayoutFits(bool can_reshard) const;
  // Rank 0 after each step: the step reached, so that a resume knows the steps lost.
  void MarkProgress(int64_t step) const;
  int64_t Progress() const;  // -1: none marked
  // Why there is nothing to resume from, for --resume's error: "is empty",
  // or the other configurations found and the first flag that differs.
  std::string WhyNothing() const;
  // Throws the ConfigError of --resume with nothing to resume from.
  [[noreturn]] void RefuseResume() const;
  // The steps of this configuration's manifests, ascending.
  std::vector<int64_t> CompleteSteps() const;

  // Writes this rank's tensors and (rank 0) the manifest, then prunes old
  // snapshots. Collective. Returns the manifest's path.
  // `state`: how the tensors hold the logical state (null: not reshardable).
  std::string Write(const LoopState& loop, const std::map<std::string, torch::Tensor>& tensors, DistContext& dist,
                    const StateDescription* state = nullptr);

  const std::string& dir() const { return dir_; }
  const std::string& hash() const { return hash_; }

 private:
  // Why this run cannot reshard the snapshot of another layout whose manifest
  // is `manifest`: no described state, a run that cannot reshard
  // (`can_reshard` false), or a model cut otherwise than this run's explicit
  // --units; "" when it can.
  std::string WhyNotResharded(const nlohmann::json& manifest, bool can_reshard) const;
  void Prune(int world, int rank, int64_t newest);

  std::string dir_;
  std::string identity_json_;
  std::map<std::string, std::string> identity_;
  std::map<std::string, std::string> layout_;
  std::string hash_;
  int64_t keep_;
};

// Checks --resume before any rank starts: the directory must hold a
// snapshot manifest of this configuration. Throws ConfigError otherwise.
void CheckResumable(const RunConfig& config, int world);

// The torch generator states of this process (CPU, and every CUDA device),
// as "rng.*" tensors, and their restoration.
void SaveRngStates(std::map<std::string, torch::Tensor>* tensors);
void LoadRngStates(const std::map<std::string, torch::Tensor>& tensors);

}  // namespace ddpbench
