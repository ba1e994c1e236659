// Device pieces of the fused q/k norm + RoPE (rope_cuda.h), shared by its own kernel and the one
// that also appends K and V to the cache (kernels/attention/kv_append_rope_cuda.cu), so both do
// the same float operations in the same order.
#ifndef STEPSERVE_KERNELS_ROPE_QK_NORM_ROPE_CUH_
#define STEPSERVE_KERNELS_ROPE_QK_NORM_ROPE_CUH_

#include <cstdint>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/rope/rope_cuda.h"

namespace stepserve::kernels::qk_norm_rope {

inline constexpr int kMaxHeadDim = static_cast<int>(kQkNormRopeCudaMaxHeadDim);
inline constexpr int kPerLane = kMaxHeadDim / cuda_reduce::kWarpSize;  // head elements per lane

// A block's shared memory: the token's angle table and one staged head per warp.
template <int kWarps>
struct SharedTables {
  float cos[kMaxHeadDim / 2];
  float sin[kMaxHeadDim / 2];
  float staged[kWarps][kMaxHeadDim];
};

// The cos / sin table of `position` (n_rot / 2 entries), built by the whole block; the caller
// synchronises before reading it. theta_j = p * tau^j is the running product the CPU kernel forms
// (j multiplications in order), so the angle is bit-identical before cos/sin.
__device__ __forceinline__ void BuildAnglesAt(int32_t position, int64_t n_rot, float tau,
                                              const float* freq_factors, float* cos_table,
                                              float* sin_table) {
  const int half = static_cast<int>(n_rot / 2);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float theta = static_cast<float>(position);
    for (int i = 0; i < j; ++i) theta *= tau;
    const float phi = freq_factors != nullptr ? theta / freq_factors[j] : theta;
    cos_table[j] = cosf(phi);
    sin_table[j] = sinf(phi);
  }
}

// BuildAnglesAt for token t of `a`.
__device__ __forceinline__ void BuildAngles(const QkNormRopeCudaArgs& a, float tau, int64_t t,
                                            float* cos_table, float* sin_table) {
  BuildAnglesAt(a.positions[t], a.n_rot, tau, a.freq_factors, cos_table, sin_table);
}

// A head's norm weight as this lane holds it: element lane + 32 m in w[m], 0 past head_dim. The
// weight is never written by a kernel, so a kernel may load it before its programmatic-launch wait.
__device__ __forceinline__ void LoadHeadWeight(const float* weight, int64_t dh,
                                               float (&w)[kPerLane]) {
  const int lane = threadIdx.x % cuda_reduce::kWarpSize;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * cuda_reduce::kWarpSize;
    w[m] = i < dh ? weight[i] : 0.0f;
  }
}
__device__ __forceinline__ void LoadHeadWeight(const QkNormRopeCudaArgs& a, const float* weight,
                                               float (&w)[kPerLane]) {
  LoadHeadWeight(weight, a.head_dim, w);
}

// One warp: head x of `a` (head_dim floats) <- RMSNorm(x; weight, given per lane as LoadHeadWeight
// holds it), then its first n_rot dims rotated, written back to x in place; out[m] is element
// lane + 32 m of the result (elements past head_dim 0). `staged` (head_dim floats of shared
// memory, the warp's own) holds the normalised head so the rotation can pair dims j and j + half.
// The arithmetic is spelled out (fused multiply-adds in the sum, in element order, rounded
// products elsewhere) so every kernel that inlines this gives the same bits whatever the compiler
// would contract.
__device__ __forceinline__ void NormRopeHead(const QkNormRopeCudaArgs& a, float* x,
                                             const float (&weight)[kPerLane],
                                             const float* cos_table, const float* sin_table,
                                             float* staged, float (&out)[kPerLane]) {
  constexpr int kWarp = cuda_reduce::kWarpSize;
  const int dh = static_cast<int>(a.head_dim);
  const int half = static_cast<int>(a.n_rot / 2);
  const int lane = threadIdx.x % kWarp;
  float values[kPerLane];
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * kWarp;
    values[m] = i < dh ? x[i] : 0.0f;
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) sum_sq = fmaf(values[m], values[m], sum_sq);
  sum_sq = cuda_reduce::WarpSum(sum_sq);
  const float inv = 1.0f / sqrtf(sum_sq / static_cast<float>(dh) + a.eps);
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * kWarp;
    if (i < dh) staged[i] = __fmul_rn(__fmul_rn(values[m], inv), weight[m]);
  }
  __syncwarp();
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * kWarp;
    out[m] = 0.0f;
    if (i >= dh) continue;
    float r = staged[i];
    if (i < half) {
      r = __fsub_rn(__fmul_rn(staged[i], cos_table[i]), __fmul_rn(staged[i + half], sin_table[i]));
    } else if (i < 2 * half) {
      const int j = i - half;
      r = __fadd_rn(__fmul_rn(staged[j], sin_table[j]), __fmul_rn(staged[i], cos_table[j]));
    }
    out[m] = r;
  }
  __syncwarp();  // every lane has read `staged` before the warp's next head overwrites it
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * kWarp;
    if (i < dh) x[i] = out[m];
  }
}

// NormRopeHead with the weight read from memory.
__device__ __forceinline__ void NormRopeHead(const QkNormRopeCudaArgs& a, float* x,
                                             const float* weight, const float* cos_table,
                                             const float* sin_table, float* staged,
                                             float (&out)[kPerLane]) {
  float w[kPerLane];
  LoadHeadWeight(a, weight, w);
  NormRopeHead(a, x, w, cos_table, sin_table, staged, out);
}

}  // namespace stepserve::kernels::qk_norm_rope

#endif  // STEPSERVE_KERNELS_ROPE_QK_NORM_ROPE_CUH_
