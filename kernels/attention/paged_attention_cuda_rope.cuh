// The decode attention's own q / k norm + RoPE and KV append (PagedAttentionCudaArgs::rope;
// include from paged_attention_cuda.cu only): the pieces PagedAttentionKernel<..., kRope = true>
// runs before its chunk loop. The arithmetic is qk_norm_rope.cuh's, so the rotated heads and the
// cached bytes are those of QkNormRopeAppendCuda followed by the plain kernel.
//
// Why: at decode the rope-and-append kernel sat alone between the q / k / v GEMV and the
// attention (~3 us of a batch-1 step's critical path per layer, H100 timeline, session 33), and
// the attention could not read the cache before its programmatic-launch wait because the newest
// key came from that kernel. Here every key the kernel reads from the cache was written by an
// earlier step, so the first chunk's K / V are loaded before the wait; the row's own key and value
// are computed in the CTA (normalised and rotated from the GEMV's rows), written to the cache by
// the CTAs of pass 0, and put into the chunk in shared memory instead of the stale slot it loaded.
// The host applies it only where each row is its sequence's only new row (plain decode), so no
// CTA reads a key another CTA of the launch writes.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_ROPE_CUH_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_ROPE_CUH_

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/kv_append_store.cuh"
#include "kernels/attention/paged_attention_cuda_params.cuh"
#include "kernels/rope/qk_norm_rope.cuh"

namespace stepserve::kernels::paged_attention_cuda {

// The kernel's second parameter block (unused, zeros, without kRope): a separate block so the
// plain kernels' KernelParams layout, and with it their register allocation, stays as it was.
struct RopeParams {
  const float* k = nullptr;  // [rows][k_stride]: each row's KV heads, raw (GEMV output)
  int64_t k_stride = 0;
  const float* v = nullptr;  // [rows][v_stride]
  int64_t v_stride = 0;
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;  // [head_dim]
  const float* freq_factors = nullptr;
  float eps = 0.0f;
  float tau = 0.0f;  // powf(base, -2 / n_rot), as QkNormRopeAppendCuda computes it on the host
  int n_rot = 0;
};

// Shared floats the rope pieces add after the plain kernel's layout: the angle table (n_rot / 2
// cos, n_rot / 2 sin: at most head_dim), one staged head per warp, the new key and value.
__host__ __device__ constexpr int RopeSharedFloats(int dims_padded) {
  return dims_padded + kWarps * dims_padded + 2 * dims_padded;
}

// That area's parts, from its start (`area`: just past the plain kernel's layout).
struct RopeShared {
  float* cos;     // [n_rot / 2]
  float* sin;     // [n_rot / 2]
  float* staged;  // [kWarps][dims_padded]
  float* new_k;   // [dims_padded]
  float* new_v;   // [dims_padded]
  __device__ __forceinline__ RopeShared(float* area, int n_rot, int dims_padded)
      : cos(area),
        sin(area + n_rot / 2),
        staged(area + dims_padded),
        new_k(area + dims_padded + kWarps * dims_padded),
        new_v(area + dims_padded + kWarps * dims_padded + dims_padded) {}
};

// Value x as the cache holds it and the chunk loader would read it back.
template <typename KvT>
__device__ __forceinline__ float AsCached(float x) {
  if constexpr (std::is_same_v<KvT, __half>) {
    return __half2float(__float2half_rn(x));
  } else {
    return x;
  }
}

// One warp's raw rows after the wait: its query heads i = warp, warp + kWarps, ... (< nh) of the
// row (zeros past nh) and, on the key-value warp, the row's K and V heads g; element lane + 32 m
// of each in [m].
template <int kDim, int kHeadsW>
struct RopeRaw {
  float q[kHeadsW][kDim / 32];
  float k[kDim / 32];
  float v[kDim / 32];
};

// Issues every load of RopeRaw at once - one L2 round trip for the warp, not one per head (the
// first form, which loaded and computed the heads in turn, measured slower than the rope kernel it
// replaced) - so the caller can issue the first chunk's K / V loads beside them before using any.
template <int kDim, int kHeadsW>
__device__ __forceinline__ RopeRaw<kDim, kHeadsW> LoadRopeRows(const RopeParams& r,
                                                               const float* q_row, int64_t row,
                                                               int head0, int nh, int g,
                                                               bool kv_warp) {
  static_assert(kDim % 32 == 0);
  constexpr int kN = kDim / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  RopeRaw<kDim, kHeadsW> raw;
#pragma unroll
  for (int t = 0; t < kHeadsW; ++t) {
    const int i = warp + t * kWarps;
    const float* x = q_row + static_cast<int64_t>(head0 + i) * kDim;
#pragma unroll
    for (int m = 0; m < kN; ++m) raw.q[t][m] = i < nh ? x[lane + m * 32] : 0.0f;
  }
  if (kv_warp) {
    const float* kx = r.k + row * r.k_stride + static_cast<int64_t>(g) * kDim;
    const float* vx = r.v + row * r.v_stride + static_cast<int64_t>(g) * kDim;
#pragma unroll
    for (int m = 0; m < kN; ++m) {
      raw.k[m] = kx[lane + m * 32];
      raw.v[m] = vx[lane + m * 32];
    }
  }
  return raw;
}

// One warp: the query heads of `raw` normalised and rotated into q_s (rows of kDim floats) and, on
// `kv_warp`, the K head normalised and rotated and the V head into new_k / new_v (as the cache
// will hold them) and, with `write` (the CTA of pass 0; `base`: the slot's offset, KeyBase), into
// the cache.
template <typename KvT, int kDim, int kHeadsW>
__device__ __forceinline__ void RopeRows(const RopeParams& r, const RopeRaw<kDim, kHeadsW>& raw,
                                         int nh, bool kv_warp, const float (&q_weight)[kDim / 32],
                                         const float (&k_weight)[kDim / 32], const float* cos_s,
                                         const float* sin_s, float* staged, float* q_s,
                                         KvT* k_cache, KvT* v_cache, int64_t base, bool write,
                                         float* new_k, float* new_v) {
  constexpr int kN = kDim / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int half = r.n_rot / 2;
#pragma unroll
  for (int t = 0; t < kHeadsW; ++t) {
    const int i = warp + t * kWarps;
    if (i >= nh) break;  // warp-uniform
    float out[kN];
    qk_norm_rope::NormRopeLoaded<kN>(raw.q[t], kDim, half, r.eps, q_weight, cos_s, sin_s, staged,
                                     out);
#pragma unroll
    for (int m = 0; m < kN; ++m) q_s[i * kDim + lane + m * 32] = out[m];
  }
  if (kv_warp) {
    float out[kN];
    qk_norm_rope::NormRopeLoaded<kN>(raw.k, kDim, half, r.eps, k_weight, cos_s, sin_s, staged, out);
#pragma unroll
    for (int m = 0; m < kN; ++m) {
      const int i = lane + m * 32;
      new_k[i] = AsCached<KvT>(out[m]);
      new_v[i] = AsCached<KvT>(raw.v[m]);
      if (write) {
        kv_append::Store(k_cache + base + i, out[m]);
        kv_append::Store(v_cache + base + i, raw.v[m]);
      }
    }
  }
}

// The whole CTA: the new key and value (new_k / new_v) into row j of the chunk in shared memory,
// over whatever the loader read from the slot before it was written.
__device__ __forceinline__ void PutNewKeyValue(int j, int dims_padded, int k_stride,
                                               const float* new_k, const float* new_v, float* k_s,
                                               float* v_s) {
  for (int d = threadIdx.x; d < dims_padded; d += kThreads) {
    k_s[j * k_stride + d] = new_k[d];
    v_s[j * dims_padded + d] = new_v[d];
  }
}

}  // namespace stepserve::kernels::paged_attention_cuda

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_ROPE_CUH_
