// The warp-per-row router kernel (router_cuda.h).
//
// Why a warp per row: the block-per-row kernel (one expert per thread, top_k rounds of a
// block-wide argmax with two warp reductions and a __syncthreads each) took ~10 us per MoE layer at
// batch 1 on the H200 (ncu, bench/gpu/results-h200-decode-kernels-v4.txt) for 288 experts and
// top_k 8: the rounds are a serial chain of shuffles and barriers. Here a warp owns a row and each
// lane keeps its experts (e = lane + 32 i) in registers: a round is a scan over the lane's
// candidates plus one warp argmax of a packed 64-bit key (score, then lower id), no barriers, and
// the bias (a weight: no kernel writes it) is loaded before the programmatic-launch wait.
#include <cstdint>
#include <limits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/router_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kFullMask;
using cuda_reduce::kWarpSize;

constexpr int kWarpsPerBlock = 4;
static_assert(kRouterCudaMaxTopK <= kWarpSize, "pick k is kept by lane k");

// A NaN score (from NaN logits) ranks last instead of breaking the order; its weight stays NaN.
// Adding +0 turns a -0 score into +0, so the key order below equals the float order (where -0 and
// +0 tie and the lower id wins).
__device__ __forceinline__ float SelectionScore(float pi, float bias) {
  const float score = pi + bias + 0.0f;
  return isnan(score) ? -INFINITY : score;
}

// An unsigned key that orders like the (non-NaN) float: the sign bit flipped for positives, all
// bits for negatives. -INFINITY maps to 0x007FFFFF, so 0 is below every score: "none / picked".
__device__ __forceinline__ uint32_t OrderedKey(float score) {
  const uint32_t bits = __float_as_uint(score);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// kPerLane = ceil(n_experts / 32) rounded up to the instantiated sizes; lanes hold experts
// lane + 32 i, i < kPerLane (those >= n_experts are never candidates).
template <int kPerLane>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock) RouterWarpKernel(RouterArgs a) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int n = static_cast<int>(a.n_experts);
  float bias[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + kWarpSize * i;
    bias[i] = e < n && a.bias != nullptr ? a.bias[e] : 0.0f;
  }
  WaitForPrimaryGrid();  // the logits come from the kernel before
  AllowDependentLaunch();
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= a.rows) return;  // whole warps leave together; no block-wide barrier below
  const float* logits = a.logits + row * a.logits_stride;
  float pi[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + kWarpSize * i;
    pi[i] = e < n ? logits[e] : -INFINITY;
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

template <int kPerLane>
void LaunchRouter(const RouterArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LaunchWithPdl(RouterWarpKernel<kPerLane>, static_cast<unsigned>(blocks),
                kWarpSize * kWarpsPerBlock, 0, stream, a);
}

}  // namespace

KernelStatus RouterCuda(const RouterArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRouter(a); s != KernelStatus::kOk) return s;
  if (a.top_k > kRouterCudaMaxTopK || a.n_experts > kRouterCudaMaxExperts) {
    return KernelStatus::kTooLarge;
  }
  if (a.rows == 0) return KernelStatus::kOk;
  if (a.rows > std::numeric_limits<int32_t>::max()) return KernelStatus::kTooLarge;
  // Register arrays sized for the common expert counts: 288 (Step-3.5) takes 9 per lane.
  const int64_t per_lane = (a.n_experts + kWarpSize - 1) / kWarpSize;
  if (per_lane <= 4) {
    LaunchRouter<4>(a, stream);
  } else if (per_lane <= 9) {
    LaunchRouter<9>(a, stream);
  } else if (per_lane <= 16) {
    LaunchRouter<16>(a, stream);
  } else {
    LaunchRouter<32>(a, stream);
  }
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
