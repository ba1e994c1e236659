// The fused q/k norm + partial NeoX RoPE kernel (rope_cuda.h).
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/rope/qk_norm_rope.cuh"
#include "kernels/rope/rope_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;

constexpr int kWarpsPerBlock = 8;

struct QkNormRopeParams {
  QkNormRopeCudaArgs a;
  float tau;  // powf(base, -2 / n_rot), evaluated on the host exactly as the CPU kernel does
};

// Grid: x = token, y = a chunk of kWarpsPerBlock heads (q heads first, then k heads), so a lone
// decode token of 96 + 8 heads still spreads over 13 blocks instead of one block looping over
// them. Each block builds its token's cos/sin table (cheap: n_rot/2 entries), then each warp
// normalises and rotates one head (qk_norm_rope.cuh).
__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize)
    QkNormRopeKernel(QkNormRopeParams params) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __shared__ qk_norm_rope::SharedTables<kWarpsPerBlock> shared;
  const QkNormRopeCudaArgs& a = params.a;
  const int64_t t = blockIdx.x;
  const int64_t dh = a.head_dim;
  qk_norm_rope::BuildAngles(a, params.tau, t, shared.cos, shared.sin);
  __syncthreads();

  const int warp = threadIdx.x / kWarpSize;
  const int64_t heads = a.q_heads + a.k_heads;
  for (int64_t h = int64_t{blockIdx.y} * kWarpsPerBlock + warp; h < heads;
       h += int64_t{gridDim.y} * kWarpsPerBlock) {
    const bool is_q = h < a.q_heads;
    float* x = is_q ? a.q + t * a.q_stride + h * dh : a.k + t * a.k_stride + (h - a.q_heads) * dh;
    float rotated[qk_norm_rope::kPerLane];
    qk_norm_rope::NormRopeHead(a, x, is_q ? a.q_norm : a.k_norm, shared.cos, shared.sin,
                               shared.staged[warp], rotated);
  }
}

}  // namespace

KernelStatus ValidateQkNormRopeCuda(const QkNormRopeCudaArgs& a) {
  if (a.q == nullptr || a.q_norm == nullptr || (a.positions == nullptr && a.tokens > 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.tokens < 0 || a.head_dim <= 0 || a.q_heads <= 0 || a.q_stride < a.q_heads * a.head_dim) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.k == nullptr
          ? a.k_heads != 0
          : (a.k_norm == nullptr || a.k_heads <= 0 || a.k_stride < a.k_heads * a.head_dim)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.n_rot < 2 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim) {
    return KernelStatus::kInvalidArgument;
  }
  if (!(a.eps >= 0.0f) || !(a.base > 0.0f)) return KernelStatus::kInvalidArgument;
  if (a.head_dim > kQkNormRopeCudaMaxHeadDim) return KernelStatus::kTooLarge;
  if (a.tokens > std::numeric_limits<int32_t>::max()) return KernelStatus::kTooLarge;
  return KernelStatus::kOk;
}

KernelStatus QkNormRopeCuda(const QkNormRopeCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateQkNormRopeCuda(a); s != KernelStatus::kOk) return s;
  if (a.tokens == 0) return KernelStatus::kOk;
  QkNormRopeParams params;
  params.a = a;
  params.tau = std::pow(a.base, -2.0f / static_cast<float>(a.n_rot));  // float overload: powf
  constexpr int64_t kMaxGridY = 65535;  // further head chunks are looped over in the kernel
  const int64_t head_chunks = (a.q_heads + a.k_heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const dim3 grid(static_cast<unsigned>(a.tokens),
                  static_cast<unsigned>(head_chunks < kMaxGridY ? head_chunks : kMaxGridY));
  LaunchWithPdl(QkNormRopeKernel, grid, kWarpsPerBlock * kWarpSize, 0, stream, params);
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
