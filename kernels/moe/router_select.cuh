// Device pieces of the router's expert selection shared by RouterKernel (router_cuda.cu) and
// the fused decode router (router_fused_cuda.cu), so both rank experts identically: higher score
// first, then lower expert id (std::stable_sort's order in RouterRef); NaN scores rank last.
// Include from .cu files only, inside namespace stepserve::kernels.
#ifndef STEPSERVE_KERNELS_MOE_ROUTER_SELECT_CUH_
#define STEPSERVE_KERNELS_MOE_ROUTER_SELECT_CUH_

#include <cmath>

#include "kernels/common/cuda_reduce.cuh"

namespace stepserve::kernels::router_select {

// The selection order. Scores are never NaN here (see SelectionScore), so this is a total order.
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
  for (int offset = cuda_reduce::kWarpSize / 2; offset > 0; offset >>= 1) {
    Candidate other;
    other.score = __shfl_xor_sync(cuda_reduce::kFullMask, c.score, offset);
    other.id = __shfl_xor_sync(cuda_reduce::kFullMask, c.id, offset);
    other.pi = __shfl_xor_sync(cuda_reduce::kFullMask, c.pi, offset);
    c = Better(c, other);
  }
  return c;
}

}  // namespace stepserve::kernels::router_select

#endif  // STEPSERVE_KERNELS_MOE_ROUTER_SELECT_CUH_
