// GemvGenericCuda (gemm_cuda.h): split-K GEMV. Each output row gets kSplit warps (1, 2, 4 or 8,
// chosen from `in`) that take interleaved 8-weight groups of the row, dequantize them in registers
// (dequant_cuda.cuh) and dot them with every activation row; each warp reduces by shuffles and the
// kSplit partial sums are added in shared memory in a fixed order (deterministic). Splitting K
// matters at decode: a 288-row matrix with one warp per row would keep most SMs idle, with 8 warps
// per row it launches thousands. F32 weights with 16-byte aligned rows are read as float4 pairs.
// Simple and exact for every type; the fast per-type kernels live in gemv_*_cuda.cu.
#include <algorithm>
#include <cstdint>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/dequant_cuda.cuh"
#include "kernels/matmul/gemm_cuda.h"
#include "kernels/matmul/gemv_f32_rows_cuda.h"

namespace stepserve::kernels {
namespace {

using dequant_device::DequantGroup;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreadsPerBlock = 32 * kWarpsPerBlock;

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
  int split;  // warps per output row: 1, 2, 4 or 8 (divides kWarpsPerBlock)
};

// Weights 8 * g .. 8 * g + 7 of `row`. kVec16: F32 rows that start 16-byte aligned, so a whole
// group is two float4 loads (a partial last group goes through the bounds-checked path).
template <GgmlType kType, bool kVec16>
__device__ __forceinline__ void LoadGroup(const uint8_t* row, int64_t g, int64_t in,
                                          const DequantTables& tables, float* w) {
  if constexpr (kVec16) {
    if (8 * g + 8 <= in) {
      const float4* p = reinterpret_cast<const float4*>(row) + 2 * g;
      const float4 a = p[0];
      const float4 b = p[1];
      w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
      w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
      return;
    }
  }
  DequantGroup<kType>(row, g, in, tables, w);
}

// Groups of F32 rows (kVec16) loaded before the programmatic-launch wait: at decode the router's
// 288 x 4096 F32 matrix gives each lane exactly two groups, and loading them while the kernel
// before is still running hides their DRAM round trip (weights are never written by a kernel).
constexpr int kPrefetchGroups = 2;

template <GgmlType kType, bool kVec16>
__global__ void __launch_bounds__(kThreadsPerBlock)
    GemvGenericKernel(GemvGenericParams p, DequantTables tables) {
  __shared__ float partial[kWarpsPerBlock][kGemvGenericMaxRows];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int rows_per_block = kWarpsPerBlock / p.split;
  const int64_t o = blockIdx.x * static_cast<int64_t>(rows_per_block) + warp / p.split;
  const int slice = warp % p.split;
  const uint8_t* row = p.w + o * p.w_row_bytes;
  const int64_t groups = o < p.out ? (p.in + 7) / 8 : 0;
  const int64_t step = 32 * static_cast<int64_t>(p.split);
  const int64_t first = slice * 32 + lane;
  float pre[kVec16 ? kPrefetchGroups : 1][8];
  if constexpr (kVec16) {
#pragma unroll
    for (int j = 0; j < kPrefetchGroups; ++j) {
      const int64_t g = first + j * step;
      if (g < groups) LoadGroup<kType, kVec16>(row, g, p.in, tables, pre[j]);
    }
  }
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  float acc[kGemvGenericMaxRows];
#pragma unroll
  for (int t = 0; t < kGemvGenericMaxRows; ++t) acc[t] = 0.0f;
  // acc[t] += group g's weights w . x[t]; no early return: every thread must reach __syncthreads.
  auto dot_group = [&](int64_t g, const float(&w)[8]) {
    const int64_t e0 = 8 * g;
    // Plain types may end mid-group (their w is 0 there, but x must not be read past `in`).
    const int n = static_cast<int>(min(static_cast<int64_t>(8), p.in - e0));
#pragma unroll
    for (int t = 0; t < kGemvGenericMaxRows; ++t) {
      if (t < p.rows) {
        const float* x = p.x + t * p.x_stride + e0;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (j < n) s += w[j] * x[j];  // unrolled with a predicate: w stays in registers
        }
        acc[t] += s;
      }
    }
  };
  int64_t g = first;
  if constexpr (kVec16) {
#pragma unroll
    for (int j = 0; j < kPrefetchGroups; ++j, g += step) {
      if (g < groups) dot_group(g, pre[j]);
    }
  }
  for (; g < groups; g += step) {
    float w[8];
    LoadGroup<kType, kVec16>(row, g, p.in, tables, w);
    dot_group(g, w);
  }
#pragma unroll
  for (int t = 0; t < kGemvGenericMaxRows; ++t) {
    if (t < p.rows) {
      float v = acc[t];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][t] = v;
    }
  }
  __syncthreads();
  // Thread (r, t) adds the split partials of the block's output row r for activation row t.
  const int r = threadIdx.x / kGemvGenericMaxRows;
  const int t = threadIdx.x % kGemvGenericMaxRows;
  const int64_t out_row = blockIdx.x * static_cast<int64_t>(rows_per_block) + r;
  if (r < rows_per_block && t < p.rows && out_row < p.out) {
    float v = 0.0f;
    for (int s = 0; s < p.split; ++s) v += partial[r * p.split + s][t];
    p.y[t * p.y_stride + out_row] = v;
  }
}

// Warps per output row: enough that each lane has about two groups of 8 weights, at most a block.
int SplitFor(int64_t in) {
  const int64_t groups = (in + 7) / 8;
  int split = 1;
  while (split < kWarpsPerBlock && 64 * static_cast<int64_t>(split) < groups) split *= 2;
  return split;
}

}  // namespace

static_assert(kThreadsPerBlock >= kWarpsPerBlock * kGemvGenericMaxRows,
              "the final reduction gives one thread to each (output row, activation row)");

KernelStatus GemvGenericCuda(const MatmulCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateMatmulCuda(a); s != KernelStatus::kOk) return s;
  if (a.rows > kGemvGenericMaxRows) return KernelStatus::kInvalidArgument;
  // 2-16 rows of an F32 matrix (the MoE router): the activation rows read once per K slice.
  if (GemvF32RowsEnabled() && GemvF32RowsTakes(a)) return GemvF32RowsCuda(a, stream);
  GemvGenericParams p{};
  p.split = SplitFor(a.in);
  const int rows_per_block = kWarpsPerBlock / p.split;
  const int64_t blocks = (a.out + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7FFFFFFF) return KernelStatus::kTooLarge;
  DequantTables tables;
  if (KernelStatus s = DeviceDequantTables(&tables); s != KernelStatus::kOk) return s;
  p.w = static_cast<const uint8_t*>(a.w);
  p.w_row_bytes = a.w_row_bytes;
  p.in = a.in;
  p.out = a.out;
  p.x = a.x;
  p.x_stride = a.x_stride;
  p.rows = static_cast<int>(a.rows);
  p.y = a.y;
  p.y_stride = a.y_stride;
  const bool f32_vec16 = a.type == GgmlType::kF32 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 &&
                         a.w_row_bytes % 16 == 0;
  if (f32_vec16) {
    LaunchWithPdl(GemvGenericKernel<GgmlType::kF32, true>, static_cast<unsigned>(blocks),
                  kThreadsPerBlock, 0, stream, p, tables);
  } else {
    dequant_device::DispatchDequantType(a.type, [&](auto tag) {
      LaunchWithPdl(GemvGenericKernel<decltype(tag)::value, false>, static_cast<unsigned>(blocks),
                    kThreadsPerBlock, 0, stream, p, tables);
    });
  }
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
