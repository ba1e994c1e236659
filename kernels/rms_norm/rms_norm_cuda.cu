// RMSNorm kernels (rms_norm_cuda.h): a warp per vector for short vectors, a block per vector for
// long ones. Each thread strides over its vector with coalesced loads, the sum of squares is
// reduced in float, and a second pass (served from L1/L2) writes x * inv_rms * weight.
#include <cstdint>
#include <limits>

#include "kernels/common/cuda_reduce.cuh"
#include "kernels/rms_norm/rms_norm_cuda.h"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;

// Vectors up to this many elements get one warp each (the per-head q/k norms, Dh <= 256).
constexpr int64_t kWarpPerVectorMaxN = 1024;
constexpr int kThreadsPerBlock = 256;
constexpr int kVectorsPerWarpBlock = kThreadsPerBlock / kWarpSize;

struct RmsNormParams {
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int64_t vectors;  // rows * heads
  int64_t heads;
  int64_t n;
  const float* weight;
  float eps;
};

// Start of vector `v` (row v / heads, head v % heads) in a tensor with the given row stride.
template <typename T>
__device__ __forceinline__ T* VectorStart(T* base, int64_t stride, int64_t v, int64_t heads,
                                          int64_t n) {
  return base + (v / heads) * stride + (v % heads) * n;
}

// Normalises one vector with `threads` cooperating threads, this one being `tid`; `sum_sq` is the
// group's total, already reduced.
__device__ __forceinline__ void WriteNormalized(const float* x, float* y, const float* weight,
                                                int64_t n, float sum_sq, float eps, int tid,
                                                int threads) {
  const float mean = sum_sq / static_cast<float>(n);
  const float inv = 1.0f / sqrtf(mean + eps);
  for (int64_t i = tid; i < n; i += threads) y[i] = x[i] * inv * weight[i];
}

__global__ void RmsNormWarpKernel(RmsNormParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t v = int64_t{blockIdx.x} * kVectorsPerWarpBlock + threadIdx.x / kWarpSize;
  if (v >= p.vectors) return;  // whole warps leave together
  const float* x = VectorStart(p.x, p.x_stride, v, p.heads, p.n);
  float* y = VectorStart(p.y, p.y_stride, v, p.heads, p.n);
  float sum_sq = 0.0f;
  for (int64_t i = lane; i < p.n; i += kWarpSize) sum_sq += x[i] * x[i];
  sum_sq = cuda_reduce::WarpSum(sum_sq);
  WriteNormalized(x, y, p.weight, p.n, sum_sq, p.eps, lane, kWarpSize);
}

__global__ void RmsNormBlockKernel(RmsNormParams p) {
  __shared__ float scratch[kWarpSize];
  const int64_t v = blockIdx.x;
  const float* x = VectorStart(p.x, p.x_stride, v, p.heads, p.n);
  float* y = VectorStart(p.y, p.y_stride, v, p.heads, p.n);
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) sum_sq += x[i] * x[i];
  sum_sq = cuda_reduce::BlockSum(sum_sq, scratch);
  WriteNormalized(x, y, p.weight, p.n, sum_sq, p.eps, threadIdx.x, blockDim.x);
}

}  // namespace

KernelStatus RmsNormCuda(const RmsNormArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateRmsNorm(a); s != KernelStatus::kOk) return s;
  const int64_t vectors = a.rows * a.heads;
  if (vectors == 0) return KernelStatus::kOk;
  const RmsNormParams p{a.x, a.x_stride, a.y, a.y_stride, vectors, a.heads, a.n, a.weight, a.eps};
  constexpr int64_t kMaxGrid = std::numeric_limits<int32_t>::max();
  if (a.n <= kWarpPerVectorMaxN) {
    const int64_t blocks = (vectors + kVectorsPerWarpBlock - 1) / kVectorsPerWarpBlock;
    if (blocks > kMaxGrid) return KernelStatus::kTooLarge;
    RmsNormWarpKernel<<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(p);
  } else {
    if (vectors > kMaxGrid) return KernelStatus::kTooLarge;
    // About 16 elements per thread: 256 threads for n_embd = 4096, 1024 from 16384 on.
    const int threads = a.n <= 4096 ? 256 : (a.n <= 8192 ? 512 : 1024);
    RmsNormBlockKernel<<<static_cast<unsigned>(vectors), threads, 0, stream>>>(p);
  }
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
