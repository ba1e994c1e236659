// Partial NeoX (rotate-half) RoPE, spec 4.4 step 3, in place on the first `n_rot` dims of every
// head of every token; dims n_rot .. head_dim-1 are left untouched. For j < n_rot/2:
//   phi_j = p * base^(-2j/n_rot) / ff_j
//   y_j = x_j cos phi_j - x_{j+n/2} sin phi_j,   y_{j+n/2} = x_j sin phi_j + x_{j+n/2} cos phi_j
// `freq_factors` (ff, n_rot/2 entries) is given on full-attention layers only; nullptr = all 1.
#ifndef STEPSERVE_KERNELS_ROPE_ROPE_H_
#define STEPSERVE_KERNELS_ROPE_ROPE_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Largest supported n_rot: the angle table lives on the stack.
inline constexpr int64_t kMaxRopeDims = 1024;

struct RopeArgs {
  float* x = nullptr;
  int64_t x_stride = 0;  // floats between tokens, >= heads * head_dim
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  const int32_t* positions = nullptr;   // [tokens], >= 0
  int64_t n_rot = 0;                    // even, 2 <= n_rot <= head_dim
  float base = 10000.0f;                // rope_base(l), > 0
  const float* freq_factors = nullptr;  // [n_rot/2] or nullptr
};

KernelStatus ValidateRope(const RopeArgs& args);

// The formula with the angle evaluated in double (exact-arithmetic meaning of the spec).
KernelStatus RopeNeoxRef(const RopeArgs& args);

// llama.cpp's F32 angle evaluation (spec 4.4 step 3): tau = powf(base, -2/n_rot) in F32,
// phi_j = p * tau^j / ff_j with tau^j as a running F32 product, F32 cosf/sinf. The angle table is
// built once per token and applied to all heads.
KernelStatus RopeNeoxCpu(const RopeArgs& args, ThreadPool* pool);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ROPE_ROPE_H_
