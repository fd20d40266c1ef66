// The sharded strategies' parameter gathers. Stages 1 and 2 all-gather the
// updated slices bucket by bucket, asynchronously, as the next forward
// starts; the model runs unit by unit, each unit waiting only for the
// buckets holding its own parameters (the stem's are started first). Stage 3
// keeps only its slices at rest: before a unit's forward its bucket is
// all-gathered into newly allocated memory (the next unit's gather started
// right after, so it overlaps this unit's compute) and the memory given back
// after; a hook on the unit's output gathers it again before its backward
// (prefetching the previous unit's) and the memory goes once the unit's
// gradients are all in (reductions.h). The autograd graph's saved views of a
// unit's weights stay valid meanwhile: their storage object is kept and only
// its bytes go and come back, as FSDP resizes storage. The last unit is kept
// from its forward to its backward, which follows at once. So at most two
// units are held in full at a time in a training step. Evaluation gathers
// the whole model once and keeps it until the next step.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "strategies/sharded/layout.h"

namespace ddpbench {

struct DistContext;
class PhaseTimer;

namespace sharded {

class ParameterGathers {
 public:
  ParameterGathers(Layout& layout, DistContext* dist, PhaseTimer& timer);
  // All-gathers still under way write into buffers about to go: waited for.
  ~ParameterGathers();
  ParameterGathers(const ParameterGathers&) = delete;
  ParameterGathers& operator=(const ParameterGathers&) = delete;

  // The model run unit by unit, each unit's parameters gathered first.
  torch::Tensor RunUnits(torch::Tensor x, bool training);

  // Stages 1, 2: after an optimizer step (or a restored snapshot) every
  // rank's updated slices are due to every rank; StartDue starts them, in
  // the order the next forward needs them (the stem's parameters are laid
  // out last), when the parameters are next needed.
  void SetDue() { due_ = layout_.stage < 3 && layout_.comm; }
  void StartDue();
  // Every bucket gathered (stages 1, 2: the due gathers, completed).
  void GatherAll();
  // Waits for the gathers under way without starting any.
  void WaitUnderWay();

  // Stage 3, evaluation and the parity check: the whole model gathered once
  // and kept until the next step, so that ranks whose test shares differ by
  // a batch still issue the same collectives (as FSDP's summon_full_params).
  // Not counted in HeldMost, which is about training steps.
  void GatherForEvaluation();
  void ReleaseEvaluation();

  // Stage 3: bucket b's full parameters give their memory back.
  void Release(size_t b);
  // Stage 3: the most buckets held at once since the last ResetHeldMost.
  int64_t HeldMost() const { return held_max_; }
  void ResetHeldMost() { held_max_ = 0; }

 private:
  void BeforeForward(size_t u);
  void AfterForward(size_t u, torch::Tensor& out, bool training);
  void BeforeBackward(size_t u);
  void StartGather(int64_t b);
  void Gather(int64_t b);
  void Materialize(size_t b);

  Layout& layout_;
  DistContext* dist_;
  PhaseTimer& timer_;
  const char* label_;
  std::vector<bool> held_;                               // stage 3: bucket_params has memory
  bool due_ = false;                                     // stages 1, 2: updated slices not yet sent
  int64_t held_max_ = 0;                                 // stage 3: most buckets held at once
  bool evaluation_held_ = false;                         // stage 3: all held for evaluation
  std::vector<c10::intrusive_ptr<c10d::Work>> gathers_;  // per bucket: its all-gather under way
};

}  // namespace sharded
}  // namespace ddpbench
