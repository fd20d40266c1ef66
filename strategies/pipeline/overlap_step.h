// --overlap-optimizer for the pipelines: each parameter of a device is
// stepped as soon as its gradient of the step is final (its last micro-batch's
// gradient accumulated: a post-accumulate-grad hook counts them), not after
// the device's whole row. Where the stages are CPU devices of one process, a
// device whose row is done steps the parameters the others finish while they
// are still in their last backward or W: the last stage's optimizer runs in
// the first stage's drain instead of after the schedule. The update is
// PartialStepper's (harness/partial_step.h): each parameter's own step, so
// float64 parity is unchanged.
#pragma once

#include <torch/types.h>

#include <memory>

namespace ddpbench::pipeline {

struct Engine;

class OptimizerOverlap {
 public:
  explicit OptimizerOverlap(Engine& e);
  ~OptimizerOverlap();  // removes the hooks
  OptimizerOverlap(const OptimizerOverlap&) = delete;
  OptimizerOverlap& operator=(const OptimizerOverlap&) = delete;

  // In the thread that starts the step, before any device's row.
  void StartStep();
  // A device failed: the others stop waiting in FinishStep (PipelineAborted).
  void Abort();
  // In device d's worker, before its row: its parameters start counting
  // this step's gradients.
  void BeginStep(int d);
  // In device d's worker, after its row: steps what the local devices
  // finished until every local row is done and nothing is left to step,
  // then d's parameters no gradient made final. Returns the milliseconds
  // spent stepping d's parameters (by any worker) this step.
  double FinishStep(int d);

 struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace ddpbench::pipeline
