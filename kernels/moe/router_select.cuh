// The top-k selection of one router row by one warp, shared by the warp-per-row router kernel
// (router_cuda.cu) and the fused router GEMV + selection (router_gemv_cuda.cu, whose last CTA runs
// it on logits the other CTAs wrote: they are read through L2, __ldcg).
#ifndef STEPSERVE_KERNELS_MOE_ROUTER_SELECT_CUH_
#define STEPSERVE_KERNELS_MOE_ROUTER_SELECT_CUH_

#include <cstdint>
#include <type_traits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/moe/moe.h"
#include "kernels/moe/router_cuda.h"

namespace stepserve::kernels::router_select {

using cuda_reduce::kFullMask;
using cuda_reduce::kWarpSize;
static_assert(kRouterCudaMaxTopK <= kWarpSize, "pick k is kept by lane k");

// A NaN score (from NaN logits) ranks last instead of breaking the order; its weight stays NaN.
// Adding +0 turns a -0 score into +0, so the key order below equals the float order (where -0 and
// +0 tie and the lower id wins).
inline __device__ float SelectionScore(float pi, float bias) {
  const float score = pi + bias + 0.0f;
  return isnan(score) ? -INFINITY : score;
}

// An unsigned key that orders like the (non-NaN) float: the sign bit flipped for positives, all
// bits for negatives. -INFINITY maps to 0x007FFFFF, so 0 is below every score: "none / picked".
inline __device__ uint32_t OrderedKey(float score) {
  const uint32_t bits = __float_as_uint(score);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The lane's selection biases (a weight: no kernel writes it, so it may be loaded before the
// programmatic-launch wait): experts lane + 32 i, 0 past n_experts or without a bias.
template <int kPerLane>
__device__ __forceinline__ void LoadBias(const RouterArgs& a, int lane, float (&bias)[kPerLane]) {
  const int n = static_cast<int>(a.n_experts);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + kWarpSize * i;
    bias[i] = e < n && a.bias != nullptr ? a.bias[e] : 0.0f;
  }
}

// Row `row` of a.logits -> its top_k ids and weights; kPerLane = ceil(n_experts / 32) rounded up
// to the instantiated sizes, lanes holding experts lane + 32 i, i < kPerLane (those >= n_experts
// are never candidates). The whole warp calls it.
template <int kPerLane>
__device__ __forceinline__ void SelectRow(const RouterArgs& a, int64_t row, int lane,
                                          const float (&bias)[kPerLane]) {
  const int n = static_cast<int>(a.n_experts);
  const float* logits = a.logits + row * a.logits_stride;
  float pi[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + kWarpSize * i;
    pi[i] = e < n ? __ldcg(&logits[e]) : -INFINITY;
  }
  if (a.gating == GatingFunc::kSoftmax) {
    float max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) max = fmaxf(max, pi[i]);
    max = cuda_reduce::WarpMax(max);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      pi[i] = lane + kWarpSize * i < n ? expf(pi[i] - max) : 0.0f;
      sum += pi[i];
    }
    const float inv_sum = 1.0f / cuda_reduce::WarpSum(sum);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) pi[i] *= inv_sum;
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) pi[i] = 1.0f / (1.0f + expf(-pi[i]));
  }
  uint32_t key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    key[i] = lane + kWarpSize * i < n ? OrderedKey(SelectionScore(pi[i], bias[i])) : 0u;
  }

  const int top_k = static_cast<int>(a.top_k);
  int my_id = 0;  // lane k: pick k
  float my_pi = 0.0f;
  float sum = 0.0f;  // the selected gates summed in pick order, as the CPU kernel does
  for (int k = 0; k < top_k; ++k) {
    // The lane's best remaining candidate (strict >: the lower index, i.e. lower id, on ties).
    uint32_t best_key = 0;
    int best_i = 0;
    float best_pi = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (key[i] > best_key) {
        best_key = key[i];
        best_i = i;
        best_pi = pi[i];
      }
    }
    // Warp argmax of (score, then lower id): the id's complement in the low half.
    uint64_t packed = best_key == 0 ? 0
                                    : (uint64_t{best_key} << 32) |
                                          (0xFFFFFFFFu - static_cast<uint32_t>(lane + 32 * best_i));
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      const uint64_t other = __shfl_xor_sync(kFullMask, packed, offset);
      packed = other > packed ? other : packed;
    }
    const int id = static_cast<int>(0xFFFFFFFFu - static_cast<uint32_t>(packed));
    const int owner = id % kWarpSize;
    const float picked_pi = __shfl_sync(kFullMask, best_pi, owner);
    if (lane == owner) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (i == id / kWarpSize) key[i] = 0;
      }
    }
    if (lane == k) {
      my_id = id;
      my_pi = picked_pi;
    }
    sum += picked_pi;
  }
  if (lane < top_k) {
    float factor = 1.0f;
    if (a.normalize) factor = 1.0f / (sum < kRouterNormFloor ? kRouterNormFloor : sum);
    if (a.scale != 0.0f && a.scale != 1.0f) factor *= a.scale;
    a.ids[row * a.top_k + lane] = my_id;
    a.weights[row * a.top_k + lane] = my_pi * factor;
  }
}

// f(std::integral_constant<int, kPerLane>{}) with kPerLane the smallest instantiated size (4, 9,
// 16, 32: 288 experts, Step-3.5's, take 9) holding ceil(n_experts / 32) experts per lane.
template <class F>
void WithPerLane(int64_t n_experts, F&& f) {
  const int64_t per_lane = (n_experts + kWarpSize - 1) / kWarpSize;
  if (per_lane <= 4) {
    f(std::integral_constant<int, 4>{});
  } else if (per_lane <= 9) {
    f(std::integral_constant<int, 9>{});
  } else if (per_lane <= 16) {
    f(std::integral_constant<int, 16>{});
  } else {
    f(std::integral_constant<int, 32>{});
  }
}

}  // namespace stepserve::kernels::router_select

#endif  // STEPSERVE_KERNELS_MOE_ROUTER_SELECT_CUH_
