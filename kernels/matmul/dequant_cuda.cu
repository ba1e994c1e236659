// DequantRowsCuda (dequant_cuda.h): one thread per 8 output elements, grid-stride over
// (row, group); the source row is a range entry or a gathered id.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/dequant_cuda.cuh"
#include "kernels/matmul/dequant_cuda.h"

namespace stepserve::kernels {
namespace {

using dequant_device::DequantGroup;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride beyond this

struct DequantRowsParams {
  const uint8_t* w;
  int64_t w_row_bytes;
  int64_t cols;
  int64_t table_rows;
  int64_t first_row;
  const int32_t* row_ids;
  int64_t rows;
  bool f16_out;
  bool vector_store;  // out and out_stride allow 16-byte stores of whole groups
  void* out;
  int64_t out_stride;
};

template <GgmlType kType>
__global__ void DequantRowsKernel(DequantRowsParams p, DequantTables tables) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t groups_per_row = (p.cols + 7) / 8;
  const int64_t total = p.rows * groups_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups_per_row;
    const int64_t group = i - r * groups_per_row;
    const int64_t src = p.row_ids != nullptr ? p.row_ids[r] : p.first_row + r;
    float v[8];
    if (src < 0 || src >= p.table_rows) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = __int_as_float(0x7fc00000);  // quiet NaN
    } else {
      DequantGroup<kType>(p.w + src * p.w_row_bytes, group, p.cols, tables, v);
    }
    const int64_t e0 = 8 * group;
    const int n = static_cast<int>(min(static_cast<int64_t>(8), p.cols - e0));
    if (!p.f16_out) {
      float* o = static_cast<float*>(p.out) + r * p.out_stride + e0;
      if (p.vector_store && n == 8) {
        reinterpret_cast<float4*>(o)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(o)[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        for (int j = 0; j < n; ++j) o[j] = v[j];
      }
    } else {
      __half* o = static_cast<__half*>(p.out) + r * p.out_stride + e0;
      if (p.vector_store && n == 8) {
        __half2 h[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
        *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(h);
      } else {
        for (int j = 0; j < n; ++j) o[j] = __float2half_rn(v[j]);
      }
    }
  }
}

}  // namespace

bool DequantCudaSupports(GgmlType type) {
  return dequant_device::DispatchDequantType(type, [](auto) {});
}

KernelStatus DequantRowsCuda(const DequantRowsArgs& a, cudaStream_t stream) {
  if (!DequantCudaSupports(a.type)) return KernelStatus::kUnsupportedType;
  if (a.w == nullptr || a.out == nullptr || a.cols <= 0 || a.rows < 0 || a.table_rows < 0) {
    return KernelStatus::kInvalidArgument;
  }
  const dequant_device::BlockGeometry geo = dequant_device::Geometry(a.type);
  if (a.cols % geo.elems != 0 || a.w_row_bytes < RowBytes(a.type, a.cols) ||
      a.out_stride < a.cols) {
    return KernelStatus::kInvalidArgument;
  }
  // Plain types are read element-wise through typed pointers.
  if (geo.elems == 1 &&
      (a.w_row_bytes % geo.bytes != 0 || reinterpret_cast<uintptr_t>(a.w) % geo.bytes != 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.row_ids == nullptr && (a.first_row < 0 || a.first_row + a.rows > a.table_rows)) {
    return KernelStatus::kOutOfRange;
  }
  if (a.rows == 0) return KernelStatus::kOk;
  const int64_t groups_per_row = (a.cols + 7) / 8;
  if (a.rows > std::numeric_limits<int64_t>::max() / groups_per_row) return KernelStatus::kTooLarge;
  DequantTables tables;
  if (KernelStatus s = DeviceDequantTables(&tables); s != KernelStatus::kOk) return s;

  DequantRowsParams p{};
  p.w = static_cast<const uint8_t*>(a.w);
  p.w_row_bytes = a.w_row_bytes;
  p.cols = a.cols;
  p.table_rows = a.table_rows;
  p.first_row = a.first_row;
  p.row_ids = a.row_ids;
  p.rows = a.rows;
  p.f16_out = a.output == DequantOutput::kF16;
  const int64_t elem_bytes = p.f16_out ? 2 : 4;
  p.vector_store =
      reinterpret_cast<uintptr_t>(a.out) % 16 == 0 && (a.out_stride * elem_bytes) % 16 == 0;
  p.out = a.out;
  p.out_stride = a.out_stride;
  const int64_t total = a.rows * groups_per_row;
  const int blocks = static_cast<int>(std::min(kMaxBlocks, (total + kThreads - 1) / kThreads));
  dequant_device::DispatchDequantType(a.type, [&](auto tag) {
    LaunchWithPdl(DequantRowsKernel<decltype(tag)::value>, blocks, kThreads, 0, stream, p, tables);
  });
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
