// Element-wise CUDA kernels (elementwise_cuda.h). Launch shape shared by all three: blockIdx.x
// tiles the columns of a row, blockIdx.y strides over the rows (so any number of rows fits the
// 65535 limit of gridDim.y) and every thread handles one column of its rows: coalesced, and no
// integer division per element except the head index of the gate.
#include <algorithm>
#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/elementwise/elementwise_cuda.h"

namespace stepserve::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The same selections as std::min / std::clamp in the CPU kernels (also for signed zeros).
__device__ __forceinline__ float MinLike(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float ClampLike(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

__global__ void HeadGateKernel(HeadGateArgs a) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= a.heads * a.head_dim) return;
  const int64_t head = col / a.head_dim;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    a.o[r * a.o_stride + col] *= Sigmoid(a.gate[r * a.gate_stride + head]);
  }
}

__global__ void SwiGluKernel(SwiGluArgs a, bool clamp) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= a.n) return;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const float g = a.g[r * a.g_stride + col];
    const float u = a.u[r * a.u_stride + col];
    const float silu = g / (1.0f + expf(-g));
    a.z[r * a.z_stride + col] =
        clamp ? MinLike(silu, a.limit) * ClampLike(u, -a.limit, a.limit) : silu * u;
  }
}

__global__ void AddKernel(AddArgs a) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= a.n) return;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    a.y[r * a.y_stride + col] = a.a[r * a.a_stride + col] + a.b[r * a.b_stride + col];
  }
}

// Grid for `rows` rows of `cols` columns; false when the columns do not fit gridDim.x.
bool RowGrid(int64_t cols, int64_t rows, dim3* grid) {
  const int64_t col_blocks = (cols + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (col_blocks > 0x7FFFFFFF) return false;
  *grid = dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(std::min(rows, kMaxGridY)));
  return true;
}

KernelStatus LaunchResult() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace

KernelStatus HeadGateCuda(const HeadGateArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateHeadGate(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  dim3 grid;
  if (!RowGrid(a.heads * a.head_dim, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(HeadGateKernel, grid, kThreadsPerBlock, 0, stream, a);
  return LaunchResult();
}

KernelStatus SwiGluCuda(const SwiGluArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateSwiGlu(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  dim3 grid;
  if (!RowGrid(a.n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(SwiGluKernel, grid, kThreadsPerBlock, 0, stream, a,
                a.limit > kSwiGluClampThreshold);
  return LaunchResult();
}

KernelStatus AddCuda(const AddArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateAdd(a); s != KernelStatus::kOk) return s;
  if (a.rows == 0) return KernelStatus::kOk;
  dim3 grid;
  if (!RowGrid(a.n, a.rows, &grid)) return KernelStatus::kTooLarge;
  LaunchWithPdl(AddKernel, grid, kThreadsPerBlock, 0, stream, a);
  return LaunchResult();
}

}  // namespace stepserve::kernels
