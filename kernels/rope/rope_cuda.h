// Fused per-head q/k RMSNorm + partial NeoX RoPE on a CUDA device (spec 4.4 steps 2-3): for every
// token and every head of q (and of k when given), in place,
//   x <- RMSNorm(x; norm_weight)      (rms_norm.h: float sum of squares, x * inv_rms * weight)
//   then the first n_rot dims rotated as in rope.h,
// with exactly the CPU path's angle arithmetic (RopeNeoxCpu): tau = powf(base, -2/n_rot) in F32,
// phi_j = (p * tau^j as a running F32 product) / ff_j, then F32 cosf/sinf. The device cosf/sinf
// are within 2 ulp of the host's, so the result matches the CPU backend to float rounding.
//
// One block per (token, chunk of 8 heads): its threads build the token's cos/sin table in shared
// memory, then each warp takes one head (norm reduced across the warp, normalised head staged in
// shared memory so the rotation can pair dims j and j + n_rot/2).
#ifndef STEPSERVE_KERNELS_ROPE_ROPE_CUDA_H_
#define STEPSERVE_KERNELS_ROPE_ROPE_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Largest head_dim (and so n_rot) the fused kernel takes: one head lives in shared memory.
inline constexpr int64_t kQkNormRopeCudaMaxHeadDim = 256;

// Every pointer is device memory.
struct QkNormRopeCudaArgs {
  float* q = nullptr;  // [tokens][q_stride], q_heads heads of head_dim
  int64_t q_stride = 0;
  int64_t q_heads = 0;
  const float* q_norm = nullptr;  // [head_dim]
  float* k = nullptr;             // optional: nullptr (then k_heads must be 0)
  int64_t k_stride = 0;
  int64_t k_heads = 0;
  const float* k_norm = nullptr;  // [head_dim], needed when k is given
  int64_t tokens = 0;
  int64_t head_dim = 0;                 // 1 .. kQkNormRopeCudaMaxHeadDim
  float eps = 1e-5f;                    // >= 0
  const int32_t* positions = nullptr;   // [tokens], null when 0; the caller checks >= 0
  int64_t n_rot = 0;                    // even, 2 <= n_rot <= head_dim
  float base = 10000.0f;                // > 0
  const float* freq_factors = nullptr;  // [n_rot/2] or nullptr (all 1)
};

// Host-side checks only (no pointer is dereferenced). kTooLarge for head_dim beyond the limit.
KernelStatus ValidateQkNormRopeCuda(const QkNormRopeCudaArgs& args);

// Validates, then enqueues on `stream`; kInvalidArgument also when the launch fails (the CUDA
// error is cleared).
KernelStatus QkNormRopeCuda(const QkNormRopeCudaArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ROPE_ROPE_CUDA_H_
