// Split-K combine of the CUDA paged attention (paged_attention_cuda.cu; include from .cu files
// only): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s, over the
// (acc, max, sum) partials of one (row, head). The combine kernel and the last-arriving CTA of
// the fused path both run this code, so they compute the same floats in the same order.
//
// Partials are read with ld.global.cg (L2, never the non-coherent L1 path): in the fused path
// other CTAs of the same grid wrote them. The fused path reads every partial of its heads at once
// (all (max, sum) pairs in one round of loads, then float4 batches of 8 splits) - one CTA
// combines up to 16 heads there, against one head per CTA in the combine kernel.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_COMBINE_CUH_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_COMBINE_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/paged_attention_cuda_params.cuh"
#include "kernels/common/cuda_reduce.cuh"

namespace stepserve::kernels::paged_attention_cuda {

// One warp: the weights e^(m_s - M) of `splits` partials with maxima maxes[s] and sums sums[s]
// into weight_s (lane l writes splits l, l + 32, ...) and 1 / sum_s l_s e^(m_s - M), valid in lane
// 0. The combine kernel passes the scratch, the fused combine a copy in shared memory.
__device__ __forceinline__ float SplitWeights(const float* maxes, const float* sums, int splits,
                                              float* weight_s) {
  const int lane = threadIdx.x & 31;
  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, maxes[s]);
  m = cuda_reduce::WarpMax(m);  // finite: split 0 always holds the first key
  float total = 0.0f;
  for (int s = lane; s < splits; s += 32) {
    const float weight = expf(maxes[s] - m);
    weight_s[s] = weight;
    total += weight * sums[s];
  }
  total = cuda_reduce::WarpSum(total);
  return 1.0f / total;
}

// Dims kVec * v .. kVec * v + kVec - 1 of one (row, head) into o: its partials start at `acc`
// (splits of head_dim floats), their weights at `weight`, 1 / total is `inv`. kBatch splits are
// loaded before they are summed, in order 0, 1, ... (the same float operations for every kVec).
template <int kVec>
__device__ __forceinline__ void CombineDims(const KernelParams& p, const float* acc,
                                            const float* weight, float inv, int v,
                                            float (&o)[kVec]) {
  using Vec = std::conditional_t<kVec == 4, float4, float>;
  constexpr int kBatch = 4;
  const int per_head = p.head_dim / kVec;
  const Vec* acc_v = reinterpret_cast<const Vec*>(acc);
#pragma unroll
  for (int c = 0; c < kVec; ++c) o[c] = 0.0f;
  for (int s0 = 0; s0 < p.splits; s0 += kBatch) {
    Vec a[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (s0 + j < p.splits) a[j] = __ldcg(acc_v + static_cast<int64_t>(s0 + j) * per_head + v);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (s0 + j < p.splits) {
        const float* x = reinterpret_cast<const float*>(&a[j]);
#pragma unroll
        for (int c = 0; c < kVec; ++c) o[c] += weight[s0 + j] * x[c];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kVec; ++c) o[c] *= inv;
}

// Output of `nh` consecutive heads of one row: the partials of head i start at part0 + i * splits,
// their weights at weight_s + i * splits, 1 / total at inv_s[i], the output at out + i * head_dim.
// Threads `first`, first + step, ... take the outputs kVec dims at a time (kVec 4: float4 loads,
// head_dim % 4 == 0).
template <int kVec>
__device__ __forceinline__ void CombineHeads(const KernelParams& p, int64_t part0, int nh,
                                             const float* weight_s, const float* inv_s, float* out,
                                             int first, int step) {
  const int per_head = p.head_dim / kVec;
  for (int item = first; item < nh * per_head; item += step) {
    const int i = item / per_head;
    const int v = item - i * per_head;
    float o[kVec];
    CombineDims<kVec>(p, p.part_acc + (part0 + i * p.splits) * p.head_dim, weight_s + i * p.splits,
                      inv_s[i], v, o);
    float* dst = out + static_cast<int64_t>(i) * p.head_dim + v * kVec;
#pragma unroll
    for (int c = 0; c < kVec; ++c) dst[c] = o[c];
  }
}

}  // namespace stepserve::kernels::paged_attention_cuda

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_COMBINE_CUH_
