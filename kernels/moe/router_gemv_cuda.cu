// The router GEMV and the top-k selection in one launch (router_cuda.h, RouterGemvTopKCuda).
//
// Why: at batch 1 a MoE layer ran the router as two kernels - the F32 GEMV of 288 x 4096 weights
// (GemvGenericKernel, 7.5 us alone under ncu, H100, session 30 call 1, for 4.7 MB: 0.63 TB/s) and
// the warp-per-row selection (6.1 us alone) - and every kernel boundary costs ~2 us even with
// programmatic launch. Here each CTA dots two experts' rows with every token row (four warps per
// expert, each a quarter of K; the first 8 float4 of a lane's weights are loaded before the
// programmatic-launch wait, since no kernel writes them), writes the logits, and the grid's last
// CTA to arrive (release / acquire counter, kernels/common/arrival.cuh) selects every row with
// the warp-per-row kernel's code (router_select.cuh).
#include <cstdint>

#include "kernels/common/arrival.cuh"
#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/router_cuda.h"
#include "kernels/moe/router_select.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;

constexpr int kWarpsPerExpert = 4;
constexpr int kExpertsPerCta = 2;
constexpr int kThreads = kWarpSize * kWarpsPerExpert * kExpertsPerCta;
constexpr int kLaneStride = kWarpSize * kWarpsPerExpert;  // float4s between a lane's steps
constexpr int kEarlySteps = 8;  // a lane's float4s loaded before the wait (all of K = 4096)

__device__ __forceinline__ float Dot4(const float4& w, const float4& x) {
  return w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
}

template <int kPerLane>
__global__ void __launch_bounds__(kThreads)
    RouterGemvSelectKernel(const __grid_constant__ RouterGemvArgs a) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int local = warp / kWarpsPerExpert, quarter = warp % kWarpsPerExpert;
  const int64_t e = int64_t{blockIdx.x} * kExpertsPerCta + local;
  const int64_t n_experts = a.select.n_experts;
  const bool live = e < n_experts;
  const int64_t n4 = a.in / 4;
  const int64_t first = quarter * kWarpSize + lane;
  const float4* w4 = reinterpret_cast<const float4*>(a.w + (live ? e : 0) * a.w_stride);
  float4 early[kEarlySteps];
#pragma unroll
  for (int j = 0; j < kEarlySteps; ++j) {
    const int64_t i = first + int64_t{j} * kLaneStride;
    early[j] = live && i < n4 ? __ldg(w4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  WaitForPrimaryGrid();  // x comes from the kernel before
  AllowDependentLaunch();
  const int rows = static_cast<int>(a.select.rows);
  float acc[kRouterGemvMaxRows] = {};
  const auto accumulate = [&](const float4& w, int64_t i) {
#pragma unroll
    for (int t = 0; t < kRouterGemvMaxRows; ++t) {
      if (t < rows) {
        acc[t] += Dot4(w, __ldg(reinterpret_cast<const float4*>(a.x + t * a.x_stride) + i));
      }
    }
  };
#pragma unroll
  for (int j = 0; j < kEarlySteps; ++j) {
    const int64_t i = first + int64_t{j} * kLaneStride;
    if (live && i < n4) accumulate(early[j], i);
  }
  for (int64_t i = first + int64_t{kEarlySteps} * kLaneStride; live && i < n4; i += kLaneStride) {
    accumulate(__ldg(w4 + i), i);
  }
  __shared__ float partial[kExpertsPerCta][kWarpsPerExpert][kRouterGemvMaxRows];
#pragma unroll
  for (int t = 0; t < kRouterGemvMaxRows; ++t) {
    const float sum = cuda_reduce::WarpSum(acc[t]);
    if (lane == 0) partial[local][quarter][t] = sum;
  }
  __syncthreads();
  if (threadIdx.x < kExpertsPerCta * kRouterGemvMaxRows) {
    const int el = static_cast<int>(threadIdx.x) / kRouterGemvMaxRows;
    const int t = static_cast<int>(threadIdx.x) % kRouterGemvMaxRows;
    const int64_t expert = int64_t{blockIdx.x} * kExpertsPerCta + el;
    if (t < rows && expert < n_experts) {
      float sum = partial[el][0][t];  // the quarters in a fixed order
#pragma unroll
      for (int q = 1; q < kWarpsPerExpert; ++q) sum += partial[el][q][t];
      a.logits[t * a.select.logits_stride + expert] = sum;
    }
  }
  // The barrier orders the logits stores before thread 0's release add (cumulativity).
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    last = ArriveRelease(a.counter) == static_cast<int>(gridDim.x) - 1;
    if (last) *a.counter = 0;  // every launch leaves it zero (the next one is stream-ordered)
  }
  __syncthreads();
  if (!last) return;
  AcquireAfterArrivals();
  if (warp < rows) {
    float bias[kPerLane];
    router_select::LoadBias<kPerLane>(a.select, lane, bias);
    router_select::SelectRow<kPerLane>(a.select, warp, lane, bias);
  }
}

template <int kPerLane>
void Launch(const RouterGemvArgs& a, cudaStream_t stream) {
  const int64_t ctas = (a.select.n_experts + kExpertsPerCta - 1) / kExpertsPerCta;
  LaunchWithPdl(RouterGemvSelectKernel<kPerLane>, static_cast<unsigned>(ctas), kThreads, 0, stream,
                a);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool RouterGemvTopKCudaApplies(const RouterGemvArgs& a) {
  return a.select.rows >= 1 && a.select.rows <= kRouterGemvMaxRows && a.in > 0 && a.in % 4 == 0 &&
         a.x_stride % 4 == 0 && a.w_stride % 4 == 0 && a.x_stride >= a.in && a.w_stride >= a.in &&
         Aligned16(a.x) && Aligned16(a.w) && a.logits != nullptr && a.logits == a.select.logits &&
         a.counter != nullptr && a.select.n_experts <= kRouterCudaMaxExperts &&
         a.select.top_k <= kRouterCudaMaxTopK;
}

KernelStatus RouterGemvTopKCuda(const RouterGemvArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRouter(a.select); s != KernelStatus::kOk) return s;
  if (!RouterGemvTopKCudaApplies(a)) return KernelStatus::kInvalidArgument;
  router_select::WithPerLane(a.select.n_experts,
                             [&](auto per_lane) { Launch<decltype(per_lane)::value>(a, stream); });
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
