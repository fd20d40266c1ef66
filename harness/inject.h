// --inject: faults put into a run on purpose, for testing the harness's
// diagnosis and for users rehearsing their cluster. Off unless asked; a
// row that ran with one names it (`inject`).
//   delay:rank=R,phase=P,ms=M[,every=K]  rank R waits M ms (decimal) inside phase P
//                                        (data, forward, backward, optimizer)
//                                        of every K-th step (once in the
//                                        step, however often P is entered)
//   slow-data:rank=R,ms=M[,every=K]      the same in its data phase
//   hang:rank=R,step=S                   rank R stops at the start of step S
//                                        (the others wait in their collectives
//                                        until --timeout)
//   crash:rank=R,step=S                  rank R's process dies at the start of
//                                        step S, as a kill -9 would end it
// Steps count from 1, warm-up included. A delay is put in where the phase is
// timed (PhaseTimer::Scope), so every strategy's phases take it alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/phase.h"

namespace ddpbench {

struct Injection {
  enum class Kind { kDelay, kHang, kCrash };
  Kind kind = Kind::kDelay;
  int rank = 0;
  Phase phase = Phase::kData;  // kDelay
  double ms = 0;               // kDelay
  int64_t every = 1;           // kDelay: every K-th step
  int64_t step = 0;            // kHang, kCrash
  std::string spec;            // as given
};

// One --inject value; ConfigError naming the bad part and what is accepted.
Injection ParseInjection(const std::string& spec);
std::vector<Injection> ParseInjections(const std::vector<std::string>& specs);

// ConfigError when an injection names a rank outside [0, world).
void CheckInjectionRanks(const std::vector<Injection>& injections, int world);

// Arms this process's injections (those of `rank`); called once the rank is
// known, before the first step.
void ArmInjections(const std::vector<Injection>& injections, int rank);

// The step loop, at the start of step `step` (from 1): hang or crash here.
void InjectAtStep(int64_t step);

// PhaseTimer::Scope, as a phase starts: this rank's delay, if any.
void InjectInPhase(Phase phase);

}  // namespace ddpbench
