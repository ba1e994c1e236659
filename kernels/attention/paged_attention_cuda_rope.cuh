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

using qk_norm_rope::kPerLane;

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

// Value x as the cache holds it and the chunk loader would read it back.
template <typename KvT>
__device__ __forceinline__ float AsCached(float x) {
  if constexpr (std::is_same_v<KvT, __half>) {
    return __half2float(__float2half_rn(x));
  } else {
    return x;
  }
}

// One warp: the row's K head g normalised and rotated, and its V head, into new_k / new_v (as
// the cache will hold them, zeros past head_dim up to dims_padded) and, with `write` (the CTA of
// pass 0; `base`: the slot's offset, KeyBase), into the cache.
template <typename KvT>
__device__ __forceinline__ void NewKeyValue(const RopeParams& r, int64_t q_row, int g, int head_dim,
                                            int dims_padded, const float (&k_weight)[kPerLane],
                                            const float* cos_s, const float* sin_s, float* staged,
                                            KvT* k_cache, KvT* v_cache, int64_t base, bool write,
                                            float* new_k, float* new_v) {
  const int lane = threadIdx.x & 31;
  float k[kPerLane];
  qk_norm_rope::NormRopeValues(r.k + q_row * r.k_stride + static_cast<int64_t>(g) * head_dim,
                               head_dim, r.n_rot / 2, r.eps, k_weight, cos_s, sin_s, staged, k);
  const float* v_row = r.v + q_row * r.v_stride + static_cast<int64_t>(g) * head_dim;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * 32;
    if (i >= dims_padded) continue;
    const float v = i < head_dim ? v_row[i] : 0.0f;
    new_k[i] = i < head_dim ? AsCached<KvT>(k[m]) : 0.0f;
    new_v[i] = i < head_dim ? AsCached<KvT>(v) : 0.0f;
    if (write && i < head_dim) {
      kv_append::Store(k_cache + base + i, k[m]);
      kv_append::Store(v_cache + base + i, v);
    }
  }
}

// One warp: query head `head` of the row normalised and rotated into q_s_head (dims_padded
// floats, zeros past head_dim).
__device__ __forceinline__ void NewQueryHead(const RopeParams& r, const float* q_row, int head,
                                             int head_dim, int dims_padded,
                                             const float (&q_weight)[kPerLane], const float* cos_s,
                                             const float* sin_s, float* staged, float* q_s_head) {
  const int lane = threadIdx.x & 31;
  float q[kPerLane];
  qk_norm_rope::NormRopeValues(q_row + static_cast<int64_t>(head) * head_dim, head_dim, r.n_rot / 2,
                               r.eps, q_weight, cos_s, sin_s, staged, q);
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * 32;
    if (i < dims_padded) q_s_head[i] = i < head_dim ? q[m] : 0.0f;
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
