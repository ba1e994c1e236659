// The block-per-row router kernel (router_cuda.h).
#include <cstdint>
#include <limits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/router_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kFullMask;
using cuda_reduce::kWarpSize;

constexpr int kMaxThreads = static_cast<int>(kRouterCudaMaxExperts);

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

// The best of two candidates (id < 0: none) in the selection order.
struct Candidate {
  float score;
  int id;
  float pi;
};

__device__ __forceinline__ Candidate Better(const Candidate& a, const Candidate& b) {
  if (b.id < 0) return a;
  if (a.id < 0) return b;
  return RanksBefore(b.score, b.id, a.score, a.id) ? b : a;
}

__device__ __forceinline__ Candidate WarpBest(Candidate c) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    Candidate other;
    other.score = __shfl_xor_sync(kFullMask, c.score, offset);
    other.id = __shfl_xor_sync(kFullMask, c.id, offset);
    other.pi = __shfl_xor_sync(kFullMask, c.pi, offset);
    c = Better(c, other);
  }
  return c;
}

// Maximum over the block (the shape of cuda_reduce::BlockSum); `scratch` holds 32 floats.
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = cuda_reduce::WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarpSize) ? scratch[lane] : -INFINITY;
  return cuda_reduce::WarpMax(v);
}

// One block per row, one expert per thread (blockDim.x >= n_experts, a multiple of 32), so a
// lone decode row uses n_experts threads instead of one warp looping. Round k of top_k takes
// the best expert ranked after pick k-1: warp-wide argmax, the per-warp winners through shared
// memory (double-buffered, so one __syncthreads per round), then every warp reduces those.
__global__ void __launch_bounds__(kMaxThreads) RouterKernel(RouterArgs a) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ float reduce_scratch[kWarpSize];
  __shared__ Candidate warp_best[2][kWarpSize];
  __shared__ int picked_id[kRouterCudaMaxTopK];
  __shared__ float picked_pi[kRouterCudaMaxTopK];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = static_cast<int>(blockDim.x / kWarpSize);
  const int64_t row = blockIdx.x;
  const int n = static_cast<int>(a.n_experts);
  const int e = static_cast<int>(threadIdx.x);
  const bool owns = e < n;
  const float logit = owns ? a.logits[row * a.logits_stride + e] : 0.0f;

  float pi = 0.0f;
  if (a.gating == GatingFunc::kSoftmax) {
    const float max = BlockMax(owns ? logit : -INFINITY, reduce_scratch);
    const float shifted_exp = owns ? expf(logit - max) : 0.0f;
    const float inv_sum = 1.0f / cuda_reduce::BlockSum(shifted_exp, reduce_scratch);
    pi = shifted_exp * inv_sum;
  } else {
    pi = 1.0f / (1.0f + expf(-logit));
  }
  const float score = SelectionScore(pi, owns && a.bias != nullptr ? a.bias[e] : 0.0f);

  const int top_k = static_cast<int>(a.top_k);
  float prev_score = INFINITY;
  int prev_id = -1;
  for (int k = 0; k < top_k; ++k) {
    Candidate mine{score, -1, pi};
    if (owns && RanksBefore(prev_score, prev_id, score, e)) mine.id = e;  // not yet picked
    mine = WarpBest(mine);
    Candidate* slots = warp_best[k & 1];
    if (lane == 0) slots[warp] = mine;
    __syncthreads();
    Candidate best = lane < warps ? slots[lane] : Candidate{-INFINITY, -1, 0.0f};
    best = WarpBest(best);
    prev_score = best.score;
    prev_id = best.id;
    if (threadIdx.x == 0) {
      picked_id[k] = best.id;
      picked_pi[k] = best.pi;
    }
  }
  __syncthreads();

  // The selected gates summed in pick order, as the CPU kernel does.
  if (threadIdx.x < static_cast<unsigned>(top_k)) {
    float sum = 0.0f;
    for (int k = 0; k < top_k; ++k) sum += picked_pi[k];
    float factor = 1.0f;
    if (a.normalize) factor = 1.0f / (sum < kRouterNormFloor ? kRouterNormFloor : sum);
    if (a.scale != 0.0f && a.scale != 1.0f) factor *= a.scale;
    a.ids[row * a.top_k + threadIdx.x] = picked_id[threadIdx.x];
    a.weights[row * a.top_k + threadIdx.x] = picked_pi[threadIdx.x] * factor;
  }
}

}  // namespace

KernelStatus RouterCuda(const RouterArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRouter(a); s != KernelStatus::kOk) return s;
  if (a.top_k > kRouterCudaMaxTopK || a.n_experts > kRouterCudaMaxExperts) {
    return KernelStatus::kTooLarge;
  }
  if (a.rows == 0) return KernelStatus::kOk;
  if (a.rows > std::numeric_limits<int32_t>::max()) return KernelStatus::kTooLarge;
  const int threads = static_cast<int>((a.n_experts + kWarpSize - 1) / kWarpSize * kWarpSize);
  LaunchWithPdl(RouterKernel, static_cast<unsigned>(a.rows), threads, 0, stream, a);
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
