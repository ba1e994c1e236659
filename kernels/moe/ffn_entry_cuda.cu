// The fused FFN entry kernel (ffn_entry_cuda.h).
//
// Grid: one CTA per kRouterRowsPerCta router rows (144 CTAs for Step-3.5's 288 experts: one wave),
// each with the norm kernel's thread count for the row length (one float4 per thread: n / 4
// threads rounded up to a warp, 1024 for n_embd = 4096). A CTA
//  1. loads its router rows' float4s and the norm weight's (weights: no kernel writes them)
//     before the programmatic-launch wait, so their DRAM trip overlaps the kernel before;
//  2. after the wait forms every token row's h + add and its norm exactly as
//     RmsNormBlockVec4Kernel<1, true, ...> does (same float4 per thread, same BlockSum), keeping
//     the sum and 1 / rms in registers;
//  3. writes its share of y and of y's int8 forms (the 32-value blocks b with b % grid == CTA), so
//     no CTA writes what another still reads;
//  4. dots its router rows with the normed rows (warp sums, then the warps' partials summed in warp
//     order by one thread each) and writes the logits;
//  5. counts itself done; the last CTA writes h + add back into h (every CTA has read h by then)
//     and selects each row's experts from the logits (router_select.cuh, one warp per row), then
//     resets the counter.
// Ordering: logits are stored, then __threadfence, then the arrival atomic; the last CTA fences
// after seeing the count and reads the logits through L2 (ld.cg).
#include <cstdint>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/q8_quantize.cuh"
#include "kernels/moe/ffn_entry_cuda.h"
#include "kernels/moe/router_cuda.h"
#include "kernels/moe/router_select.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;

constexpr int kRouterRowsPerCta = 2;
constexpr int kMaxThreads = 1024;
constexpr int kMaxRows = static_cast<int>(kFfnEntryMaxRows);
// The selection's registers: up to 16 experts per lane under the 64-register cap of 1024 threads.
constexpr int64_t kFfnEntryMaxExperts = 16 * kWarpSize;

struct FfnEntryParams {
  const float* x;  // h, read; the last CTA writes h + add back
  int64_t x_stride;
  const float* add;
  int64_t add_stride;
  float* y;
  int64_t y_stride;
  const float* norm_weight;
  float eps;
  int rows;
  int n;
  bool has_q8;
  q8_quantize::Q8Rows q8;
  const float* router;
  int64_t router_stride;
  float* logits;
  RouterArgs route;
  int32_t* counter;
};

__device__ __forceinline__ float Dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// kRows: the rows the registers are sized for (run-time p.rows <= kRows); kPerLane: router lanes'
// experts (router_select.cuh).
template <int kRows, int kPerLane>
__global__ void __launch_bounds__(kMaxThreads)
    FfnEntryKernel(const __grid_constant__ FfnEntryParams p) {
  __shared__ float scratch[kWarpSize];
  __shared__ float partial[kWarpSize][kRouterRowsPerCta * kRows];
  __shared__ bool is_last;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  const int n4 = p.n / 4;
  const bool mine = tid < n4;  // whole 8-thread groups (n % 32 == 0)
  const int e0 = static_cast<int>(blockIdx.x) * kRouterRowsPerCta;
  const int n_experts = static_cast<int>(p.route.n_experts);
  // 1. Weights before the wait.
  float4 w[kRouterRowsPerCta];
#pragma unroll
  for (int r = 0; r < kRouterRowsPerCta; ++r) {
    w[r] = mine && e0 + r < n_experts
               ? reinterpret_cast<const float4*>(p.router + (e0 + r) * p.router_stride)[tid]
               : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const float4 gamma =
      mine ? reinterpret_cast<const float4*>(p.norm_weight)[tid] : make_float4(0.f, 0.f, 0.f, 0.f);
  WaitForPrimaryGrid();  // h's pending add (the attention output) comes from the kernel before
  AllowDependentLaunch();
  // 2. The rows' sums and norms, as RmsNormBlockVec4Kernel<1, true, ...>.
  float4 sum[kRows];
  float inv[kRows];
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    sum[t] = make_float4(0.f, 0.f, 0.f, 0.f);
    inv[t] = 0.f;
    if (t < p.rows) {  // uniform over the block
      if (mine) {
        sum[t] = reinterpret_cast<const float4*>(p.x + t * p.x_stride)[tid];
        if (p.add != nullptr) {
          const float4 d = reinterpret_cast<const float4*>(p.add + t * p.add_stride)[tid];
          sum[t] = make_float4(sum[t].x + d.x, sum[t].y + d.y, sum[t].z + d.z, sum[t].w + d.w);
        }
      }
      const float4 c = sum[t];
      float sq = 0.0f;  // as the norm kernel: 0 + SquaredNorm4, then the block sum
      sq += cuda_reduce::SquaredNorm4(c);
      sq = cuda_reduce::BlockSum(sq, scratch);
      inv[t] = 1.0f / sqrtf(sq / static_cast<float>(p.n) + p.eps);
    }
  }
  auto normed = [&](int t) {
    const float4 c = sum[t];
    return make_float4(c.x * inv[t] * gamma.x, c.y * inv[t] * gamma.y, c.z * inv[t] * gamma.z,
                       c.w * inv[t] * gamma.w);
  };
  // 3. This CTA's share of y and its int8 forms.
  const bool writer =
      mine && (tid / 8) % static_cast<int>(gridDim.x) == static_cast<int>(blockIdx.x);
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    if (t < p.rows && writer) {
      const float4 out = normed(t);
      reinterpret_cast<float4*>(p.y + t * p.y_stride)[tid] = out;
      if (p.has_q8) q8_quantize::StoreQ8Both(p.q8, t, 4 * tid, out);
    }
  }
  // 4. Router dots: warp sums, then per (router row, token row) the warps in order.
#pragma unroll
  for (int r = 0; r < kRouterRowsPerCta; ++r) {
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      if (t < p.rows) {
        const float v = cuda_reduce::WarpSum(mine ? Dot4(normed(t), w[r]) : 0.f);
        if (lane == 0) partial[warp][r * kRows + t] = v;
      }
    }
  }
  __syncthreads();
  if (tid < kRouterRowsPerCta * kRows) {
    const int r = tid / kRows, t = tid % kRows;
    if (t < p.rows && e0 + r < n_experts) {
      float logit = 0.f;
      for (int k = 0; k < warps; ++k) logit += partial[k][tid];
      p.logits[t * p.route.logits_stride + e0 + r] = logit;
    }
  }
  // 5. Arrival; the last CTA finishes.
  __threadfence();
  __syncthreads();
  if (tid == 0) is_last = atomicAdd(p.counter, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  float* h = const_cast<float*>(p.x);
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    if (t < p.rows && mine && p.add != nullptr) {
      reinterpret_cast<float4*>(h + t * p.x_stride)[tid] = sum[t];
    }
  }
  if (warp < p.rows) {
    float bias[kPerLane];
    router_select::LoadBias(p.route, lane, bias);
    router_select::SelectRow<kPerLane, true>(p.route, warp, lane, bias);
  }
  if (tid == 0) *p.counter = 0;  // the next launch starts from zero (kernel boundary orders it)
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <int kRows, int kPerLane>
void Launch(const FfnEntryParams& p, unsigned blocks, int threads, cudaStream_t stream) {
  LaunchWithPdl(FfnEntryKernel<kRows, kPerLane>, blocks, threads, 0, stream, p);
}

template <int kPerLane>
void LaunchRows(const FfnEntryParams& p, unsigned blocks, int threads, cudaStream_t stream) {
  if (p.rows == 1) {
    Launch<1, kPerLane>(p, blocks, threads, stream);
  } else if (p.rows == 2) {
    Launch<2, kPerLane>(p, blocks, threads, stream);
  } else {
    Launch<kMaxRows, kPerLane>(p, blocks, threads, stream);
  }
}

}  // namespace

bool FfnEntryCudaSupports(const FfnEntryCudaArgs& a) {
  const RmsNormArgs& m = a.norm;
  RouterArgs route = a.route;
  route.logits = a.logits;
  if (ValidateRmsNorm(m) != KernelStatus::kOk || ValidateRouter(route) != KernelStatus::kOk) {
    return false;
  }
  const bool q8_ok = (a.q8.natural == nullptr && a.q8.pair == nullptr) ||
                     (a.q8.natural != nullptr && a.q8.pair != nullptr && Aligned16(a.q8.natural) &&
                      Aligned16(a.q8.pair));
  const bool add_ok =
      a.add == nullptr || (a.add_stride >= m.n && a.add_stride % 4 == 0 && Aligned16(a.add));
  return m.rows >= 1 && m.rows <= kFfnEntryMaxRows && m.heads == 1 && m.n > 1024 &&
         m.n <= 4 * kMaxThreads && m.n % 32 == 0 && m.x_stride % 4 == 0 && m.y_stride % 4 == 0 &&
         Aligned16(m.x) && Aligned16(m.y) && Aligned16(m.weight) && q8_ok && add_ok &&
         a.router != nullptr && Aligned16(a.router) && a.router_stride >= m.n &&
         a.router_stride % 4 == 0 && a.route.rows == m.rows && a.route.logits_stride >= 1 &&
         a.route.n_experts <= kFfnEntryMaxExperts && a.route.top_k <= kRouterCudaMaxTopK;
}

KernelStatus FfnEntryCuda(const FfnEntryCudaArgs& a, cudaStream_t stream) {
  if (!FfnEntryCudaSupports(a) || a.counter == nullptr) return KernelStatus::kInvalidArgument;
  FfnEntryParams p{};
  p.x = a.norm.x;
  p.x_stride = a.norm.x_stride;
  p.add = a.add;
  p.add_stride = a.add_stride;
  p.y = a.norm.y;
  p.y_stride = a.norm.y_stride;
  p.norm_weight = a.norm.weight;
  p.eps = a.norm.eps;
  p.rows = static_cast<int>(a.norm.rows);
  p.n = static_cast<int>(a.norm.n);
  p.has_q8 = a.q8.natural != nullptr;
  if (p.has_q8) p.q8 = q8_quantize::MakeQ8Rows(a.q8.natural, a.q8.pair, a.norm.n, a.norm.rows);
  p.router = a.router;
  p.router_stride = a.router_stride;
  p.logits = a.logits;
  p.route = a.route;
  p.route.logits = a.logits;
  p.counter = a.counter;
  // The norm kernel's thread count (LaunchBlockVec4): one float4 each, whole warps.
  const int n4 = p.n / 4;
  const int threads =
      n4 >= kMaxThreads ? kMaxThreads : (n4 + kWarpSize - 1) / kWarpSize * kWarpSize;
  const unsigned blocks =
      static_cast<unsigned>((a.route.n_experts + kRouterRowsPerCta - 1) / kRouterRowsPerCta);
  // 288 experts (Step-3.5) take 9 per lane, 352 (Step-5) 16.
  if ((a.route.n_experts + kWarpSize - 1) / kWarpSize <= 9) {
    LaunchRows<9>(p, blocks, threads, stream);
  } else {
    LaunchRows<16>(p, blocks, threads, stream);
  }
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
