// The warp-per-row router kernel (router_cuda.h).
#include <cstdint>
#include <limits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/moe/router_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kFullMask;
using cuda_reduce::kWarpSize;

constexpr int kWarpsPerBlock = 4;

// The selection order: higher score first, then lower expert id (std::stable_sort's order in
// RouterRef). Scores are never NaN here (see SelectionScore), so this is a total order.
__device__ __forceinline__ bool RanksBefore(float score_a, int id_a, float score_b, int id_b) {
  return score_a > score_b || (score_a == score_b && id_a < id_b);
}

// A NaN score (from NaN logits) ranks last instead of breaking the order; its weight stays NaN.
__device__ __forceinline__ float SelectionScore(float pi, float bias) {
  const float score = pi + bias;
  return isnan(score) ? -INFINITY : score;
}

__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize) RouterKernel(RouterArgs a) {
  extern __shared__ float row_state[];  // per warp: pi[n_experts], then score[n_experts]
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + warp;
  if (row >= a.rows) return;  // whole warps leave together
  const int n = static_cast<int>(a.n_experts);
  float* pi = row_state + warp * 2 * n;
  float* score = pi + n;
  const float* logits = a.logits + row * a.logits_stride;

  float softmax_max = 0.0f;
  float softmax_inv_sum = 1.0f;
  if (a.gating == GatingFunc::kSoftmax) {
    float max = -INFINITY;
    for (int e = lane; e < n; e += kWarpSize) max = fmaxf(max, logits[e]);
    softmax_max = cuda_reduce::WarpMax(max);
    float sum = 0.0f;
    for (int e = lane; e < n; e += kWarpSize) sum += expf(logits[e] - softmax_max);
    softmax_inv_sum = 1.0f / cuda_reduce::WarpSum(sum);
  }
  for (int e = lane; e < n; e += kWarpSize) {
    const float p = a.gating == GatingFunc::kSigmoid
                        ? 1.0f / (1.0f + expf(-logits[e]))
                        : expf(logits[e] - softmax_max) * softmax_inv_sum;
    pi[e] = p;
    score[e] = SelectionScore(p, a.bias != nullptr ? a.bias[e] : 0.0f);
  }
  __syncwarp();

  // Round k picks the best expert ranked after pick k-1; lane k keeps pick k.
  const int top_k = static_cast<int>(a.top_k);
  float prev_score = INFINITY;
  int prev_id = -1;
  int my_id = 0;
  float my_pi = 0.0f;
  for (int k = 0; k < top_k; ++k) {
    float best_score = -INFINITY;
    int best_id = -1;  // none yet
    for (int e = lane; e < n; e += kWarpSize) {
      const float s = score[e];
      if (!RanksBefore(prev_score, prev_id, s, e)) continue;  // already picked
      if (best_id < 0 || RanksBefore(s, e, best_score, best_id)) {
        best_score = s;
        best_id = e;
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      const float other_score = __shfl_xor_sync(kFullMask, best_score, offset);
      const int other_id = __shfl_xor_sync(kFullMask, best_id, offset);
      if (other_id >= 0 &&
          (best_id < 0 || RanksBefore(other_score, other_id, best_score, best_id))) {
        best_score = other_score;
        best_id = other_id;
      }
    }
    prev_score = best_score;
    prev_id = best_id;
    if (lane == k) {
      my_id = best_id;
      my_pi = pi[best_id];
    }
  }

  // The selected gates summed in pick order, as the CPU kernel does.
  float sum = 0.0f;
  for (int k = 0; k < top_k; ++k) sum += __shfl_sync(kFullMask, my_pi, k);
  float factor = 1.0f;
  if (a.normalize) factor = 1.0f / (sum < kRouterNormFloor ? kRouterNormFloor : sum);
  if (a.scale != 0.0f && a.scale != 1.0f) factor *= a.scale;
  if (lane < top_k) {
    a.ids[row * a.top_k + lane] = my_id;
    a.weights[row * a.top_k + lane] = my_pi * factor;
  }
}

}  // namespace

KernelStatus RouterCuda(const RouterArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRouter(a); s != KernelStatus::kOk) return s;
  if (a.top_k > kRouterCudaMaxTopK || a.n_experts > kRouterCudaMaxExperts) {
    return KernelStatus::kTooLarge;
  }
  if (a.rows == 0) return KernelStatus::kOk;
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > std::numeric_limits<int32_t>::max()) return KernelStatus::kTooLarge;
  const size_t shared_bytes = size_t{kWarpsPerBlock} * 2 * a.n_experts * sizeof(float);
  RouterKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarpSize, shared_bytes, stream>>>(
      a);
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
