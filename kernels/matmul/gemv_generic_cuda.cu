// GemvGenericCuda (gemm_cuda.h): one warp per output row. Each lane dequantizes groups of 8
// weights in registers (dequant_cuda.cuh) and dots them with every activation row; the warp then
// reduces. Simple and exact for every type; the fast per-type kernels live in gemv_*_cuda.cu.
#include <algorithm>
#include <cstdint>

#include "kernels/matmul/dequant_cuda.cuh"
#include "kernels/matmul/gemm_cuda.h"

namespace stepserve::kernels {
namespace {

using dequant_device::DequantGroup;

constexpr int kWarpsPerBlock = 4;

struct GemvGenericParams {
  const uint8_t* w;
  int64_t w_row_bytes;
  int64_t in;
  int64_t out;
  const float* x;
  int64_t x_stride;
  int rows;
  float* y;
  int64_t y_stride;
};

template <GgmlType kType>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    GemvGenericKernel(GemvGenericParams p, DequantTables tables) {
  const int64_t o = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (o >= p.out) return;  // whole warps exit together
  const uint8_t* row = p.w + o * p.w_row_bytes;
  float acc[kGemvGenericMaxRows];
#pragma unroll
  for (int t = 0; t < kGemvGenericMaxRows; ++t) acc[t] = 0.0f;
  const int64_t groups = (p.in + 7) / 8;
  for (int64_t g = lane; g < groups; g += 32) {
    float w[8];
    DequantGroup<kType>(row, g, p.in, tables, w);
    const int64_t e0 = 8 * g;
    // Plain types may end mid-group (their w is 0 there, but x must not be read past `in`).
    const int n = static_cast<int>(min(static_cast<int64_t>(8), p.in - e0));
#pragma unroll
    for (int t = 0; t < kGemvGenericMaxRows; ++t) {
      if (t < p.rows) {
        const float* x = p.x + t * p.x_stride + e0;
        float s = 0.0f;
        if (n == 8) {
#pragma unroll
          for (int j = 0; j < 8; ++j) s += w[j] * x[j];
        } else {
          for (int j = 0; j < n; ++j) s += w[j] * x[j];
        }
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kGemvGenericMaxRows; ++t) {
    if (t < p.rows) {
      float v = acc[t];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) p.y[t * p.y_stride + o] = v;
    }
  }
}

}  // namespace

KernelStatus GemvGenericCuda(const MatmulCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateMatmulCuda(a); s != KernelStatus::kOk) return s;
  if (a.rows > kGemvGenericMaxRows) return KernelStatus::kInvalidArgument;
  const int64_t blocks = (a.out + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7FFFFFFF) return KernelStatus::kTooLarge;
  DequantTables tables;
  if (KernelStatus s = DeviceDequantTables(&tables); s != KernelStatus::kOk) return s;
  GemvGenericParams p{};
  p.w = static_cast<const uint8_t*>(a.w);
  p.w_row_bytes = a.w_row_bytes;
  p.in = a.in;
  p.out = a.out;
  p.x = a.x;
  p.x_stride = a.x_stride;
  p.rows = static_cast<int>(a.rows);
  p.y = a.y;
  p.y_stride = a.y_stride;
  dequant_device::DispatchDequantType(a.type, [&](auto tag) {
    GemvGenericKernel<decltype(tag)::value>
        <<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream>>>(p, tables);
  });
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
