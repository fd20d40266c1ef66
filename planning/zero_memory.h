// Model-state memory per rank (parameters, gradients, optimizer state) as the
// ZeRO paper counts it, so that every data-parallel row can set what it holds
// at rest beside what the formula expects for its stage.
//
// The paper (Rajbhandari et al., 2020, section 3.1 and figure 1) counts, per
// parameter, P bytes of parameters, G of gradients and K of optimizer state,
// and per rank (N ranks, Psi parameters):
//   DDP (stage 0)  (P + G + K) Psi
//   stage 1        (P + G) Psi + K Psi / N        optimizer state sharded
//   stage 2        P Psi + (G + K) Psi / N        gradients too
//   stage 3        (P + G + K) Psi / N            parameters too
// Its example is mixed-precision Adam: fp16 parameters and gradients (P = G =
// 2) and an fp32 master copy with two moments (K = 12): 16 B per parameter for
// DDP, 4 + 12/N for stage 1, 2 + 14/N for stage 2, 16/N for stage 3.
//
// ddpbench's strategies keep the weights and gradients in the model's dtype
// (--amp autocasts the computation and keeps float32 weights, so there is no
// separate master copy); so here, with b the bytes of the model's dtype:
//   P = G = b; K = 2b for Adam (two moments), b for SGD with momentum (one
//   buffer), 0 for SGD without momentum (torch keeps no state).
// float32 Adam: 4 + 4 + 8 = 16 B per parameter for DDP (the paper's total, in
// another split), 8 + 8/N for stage 1, 4 + 12/N for stage 2, 16/N for stage 3;
// float32 SGD with momentum: 4 + 4 + 4 = 12 B, 8 + 4/N, 4 + 8/N, 12/N.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ddpbench {

// Bytes per parameter of each model state.
struct ModelStateBytes {
  double param = 0, grad = 0, optimizer = 0;
};

// For --optimizer (sgd|adam), --momentum and the weights' element size;
// the paper's mixed-precision figures when `master_copy` (P = G = 2, K = 4 +
// the optimizer's state in float32).
ModelStateBytes BytesPerParameter(const std::string& optimizer, double momentum, int64_t element_bytes,
                                  bool master_copy = false);

// The formula above in MiB per rank: stage 0 (ddp) to 3.
double ZeroExpectedMb(int stage, int64_t parameters, int world, const ModelStateBytes& bytes);

}  // namespace ddpbench

namespace ddpbench {

// The row's param_mb, grad_mb (what this rank holds between steps, padding
// and communication buffers included) and zero_expected_mb (the formula).
std::map<std::string, std::string> ModelStateColumns(double param_bytes, double grad_bytes, int stage,
                                                     int64_t parameters, int world,
                                                     const ModelStateBytes& per_parameter);

}  // namespace ddpbench
