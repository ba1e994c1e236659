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
#include "kernels/moe/router_select.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;

constexpr int kWarpsPerBlock = 4;

// kPerLane = ceil(n_experts / 32) rounded up to the instantiated sizes; lanes hold experts
// lane + 32 i, i < kPerLane (those >= n_experts are never candidates).
template <int kPerLane>
__global__ void __launch_bounds__(kWarpSize* kWarpsPerBlock) RouterWarpKernel(RouterArgs a) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  float bias[kPerLane];
  router_select::LoadBias<kPerLane>(a, lane, bias);
  WaitForPrimaryGrid();  // the logits come from the kernel before
  AllowDependentLaunch();
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= a.rows) return;  // whole warps leave together; no block-wide barrier below
  router_select::SelectRow<kPerLane>(a, row, lane, bias);
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
  router_select::WithPerLane(
      a.n_experts, [&](auto per_lane) { LaunchRouter<decltype(per_lane)::value>(a, stream); });
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
