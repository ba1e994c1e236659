// The fused decode router (router_cuda.h RouterFusedCuda): router GEMV + expert selection in one
// launch.
//
// Why: at batch 1 the router was two kernels per MoE layer - the generic split-K GEMV over the
// 288 x 4096 F32 router matrix (4.7 MB) and the block-per-row selection - measured at ~10 us each
// (ncu, bench/gpu/results-h200-decode-kernels-v4.txt), ~20 us of a ~170 us layer. The GEMV ran at
// ~0.45 TB/s: each warp walked its 512 weights in dependent rounds, so the kernel was a few DRAM
// round trips plus its launch. Here:
//  - one CTA per expert loads its whole weight row into registers (one float4 per 512 weights per
//    thread) before WaitForPrimaryGrid: the weights are never written by a kernel, so with
//    programmatic dependent launch their DRAM round trip overlaps the kernel before (pdl.cuh);
//  - each CTA then dots the row with the (at most kRouterFusedMaxRows) activation rows, read from
//    L2, reduces in a fixed order (reproducible) and writes its logits;
//  - the last CTA to finish (atomicInc ticket: the counter wraps back to 0 on that CTA, so it is
//    ready for the next launch without a reset) runs the selection, one warp per row over the
//    row's scores staged in shared memory: top_k rounds of warp-wide argmax over the experts
//    ranked after the previous pick, the same order and formulas as RouterKernel.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/router_cuda.h"
#include "kernels/moe/router_select.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;
using router_select::Candidate;
using router_select::RanksBefore;
using router_select::SelectionScore;
using router_select::WarpBest;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxRows = static_cast<int>(kRouterFusedMaxRows);
constexpr int kMaxExperts = static_cast<int>(kRouterFusedMaxExperts);
constexpr int kMaxTopK = static_cast<int>(kRouterCudaMaxTopK);
constexpr int kMaxVec = static_cast<int>(kRouterFusedMaxIn) / (4 * kThreads);  // float4s a thread
static_assert(kMaxRows <= kWarps, "the selection takes one warp per row");

__device__ __forceinline__ float Dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// One warp selects the top_k experts of `row` from the scores and gates staged in shared memory
// and writes its ids and weights.
__device__ void SelectRow(const RouterArgs& a, int64_t row, const float* score, const float* pi,
                          int* picked_id, float* picked_pi) {
  const int lane = threadIdx.x % kWarpSize;
  const int n = static_cast<int>(a.n_experts);
  const int top_k = static_cast<int>(a.top_k);
  float prev_score = INFINITY;
  int prev_id = -1;
  for (int k = 0; k < top_k; ++k) {
    Candidate best{-INFINITY, -1, 0.0f};
    for (int e = lane; e < n; e += kWarpSize) {
      if (RanksBefore(prev_score, prev_id, score[e], e)) {
        const Candidate c{score[e], e, pi[e]};
        best = router_select::Better(best, c);
      }
    }
    best = WarpBest(best);
    prev_score = best.score;
    prev_id = best.id;
    if (lane == 0) {
      picked_id[k] = best.id;
      picked_pi[k] = best.pi;
    }
  }
  __syncwarp();
  // The selected gates summed in pick order, as the CPU kernel does.
  if (lane < top_k) {
    float sum = 0.0f;
    for (int k = 0; k < top_k; ++k) sum += picked_pi[k];
    float factor = 1.0f;
    if (a.normalize) factor = 1.0f / (sum < kRouterNormFloor ? kRouterNormFloor : sum);
    if (a.scale != 0.0f && a.scale != 1.0f) factor *= a.scale;
    a.ids[row * a.top_k + lane] = picked_id[lane];
    a.weights[row * a.top_k + lane] = picked_pi[lane] * factor;
  }
}

// Gates and selection scores of one row of logits into shared memory (one warp).
__device__ void StageRow(const RouterArgs& a, const float* logits, float* score, float* pi) {
  const int lane = threadIdx.x % kWarpSize;
  const int n = static_cast<int>(a.n_experts);
  float inv_sum = 1.0f, max = 0.0f;
  if (a.gating == GatingFunc::kSoftmax) {
    float m = -INFINITY;
    for (int e = lane; e < n; e += kWarpSize) m = fmaxf(m, __ldcg(logits + e));
    max = cuda_reduce::WarpMax(m);
    float s = 0.0f;
    for (int e = lane; e < n; e += kWarpSize) s += expf(__ldcg(logits + e) - max);
    inv_sum = 1.0f / cuda_reduce::WarpSum(s);
  }
  for (int e = lane; e < n; e += kWarpSize) {
    const float logit = __ldcg(logits + e);
    const float p = a.gating == GatingFunc::kSoftmax ? expf(logit - max) * inv_sum
                                                     : 1.0f / (1.0f + expf(-logit));
    pi[e] = p;
    score[e] = SelectionScore(p, a.bias != nullptr ? a.bias[e] : 0.0f);
  }
  __syncwarp();
}

__global__ void __launch_bounds__(kThreads)
    RouterFusedKernel(const __grid_constant__ RouterFusedArgs a) {
  __shared__ float partial[kWarps][kMaxRows];
  __shared__ bool is_last;
  __shared__ float score[kMaxRows][kMaxExperts];
  __shared__ float pi[kMaxRows][kMaxExperts];
  __shared__ int picked_id[kMaxRows][kMaxTopK];
  __shared__ float picked_pi[kMaxRows][kMaxTopK];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t e = blockIdx.x;
  const int nvec = static_cast<int>(a.in / 4);
  const int rows = static_cast<int>(a.select.rows);

  // The expert's weight row, before the wait: nothing in this stream writes the weights.
  const float4* wrow = reinterpret_cast<const float4*>(a.w + e * a.w_stride);
  float4 wv[kMaxVec];
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int v = static_cast<int>(threadIdx.x) + i * kThreads;
    wv[i] = v < nvec ? __ldcs(wrow + v) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  WaitForPrimaryGrid();
  AllowDependentLaunch();

  for (int r = 0; r < rows; ++r) {
    const float4* xrow = reinterpret_cast<const float4*>(a.x + r * a.x_stride);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * kThreads;
      if (v < nvec) acc = Dot4(wv[i], xrow[v], acc);
    }
    acc = cuda_reduce::WarpSum(acc);
    if (lane == 0) partial[warp][r] = acc;
  }
  __syncthreads();
  if (threadIdx.x < static_cast<unsigned>(rows)) {
    float logit = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) logit += partial[w][threadIdx.x];
    a.logits[threadIdx.x * a.select.logits_stride + e] = logit;
    __threadfence();  // the logit is visible device-wide before this CTA's ticket is taken
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    is_last = atomicInc(a.ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // every other CTA's logits (fenced before their tickets) are visible here
  if (warp < rows) {
    const float* row_logits = a.logits + warp * a.select.logits_stride;
    StageRow(a.select, row_logits, score[warp], pi[warp]);
    SelectRow(a.select, warp, score[warp], pi[warp], picked_id[warp], picked_pi[warp]);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::atomic<bool>& FusedSetting() {
  static std::atomic<bool> enabled{[] {
    const char* v = std::getenv("STEPSERVE_FUSED_ROUTER");
    return v != nullptr && v[0] == '1';
  }()};
  return enabled;
}

}  // namespace

bool RouterFusedCudaEnabled() { return FusedSetting().load(std::memory_order_relaxed); }

bool SetRouterFusedCuda(bool enabled) { return FusedSetting().exchange(enabled); }

bool RouterFusedCudaSupports(const RouterFusedArgs& a) {
  const RouterArgs& s = a.select;
  return s.rows >= 1 && s.rows <= kRouterFusedMaxRows && a.in >= 4 && a.in % 4 == 0 &&
         a.in <= kRouterFusedMaxIn && s.n_experts >= 1 && s.n_experts <= kRouterFusedMaxExperts &&
         s.top_k >= 1 && s.top_k <= kRouterCudaMaxTopK && Aligned16(a.x) && Aligned16(a.w) &&
         a.x_stride % 4 == 0 && a.w_stride % 4 == 0;
}

KernelStatus RouterFusedCuda(const RouterFusedArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRouter(a.select); s != KernelStatus::kOk) return s;
  if (a.x == nullptr || a.w == nullptr || a.logits == nullptr || a.ticket == nullptr ||
      a.select.logits != a.logits || a.x_stride < a.in || a.w_stride < a.in) {
    return KernelStatus::kInvalidArgument;
  }
  if (!RouterFusedCudaSupports(a)) {
    return a.select.rows > kRouterFusedMaxRows || a.in > kRouterFusedMaxIn ||
                   a.select.n_experts > kRouterFusedMaxExperts ||
                   a.select.top_k > kRouterCudaMaxTopK
               ? KernelStatus::kTooLarge
               : KernelStatus::kInvalidArgument;
  }
  const cudaError_t err = LaunchWithPdl(
      RouterFusedKernel, static_cast<unsigned>(a.select.n_experts), kThreads, 0, stream, a);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
