// DequantRowsCuda (dequant_cuda.h): one thread per 8 output elements, grid-stride over
// (row, group); the source row is a range entry or a gathered id. IQ4_XS to F16 (the prefill's
// weight tiles in the IQ4_XS mix) has its own kernel with the same mapping and lean loads.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "kernels/common/env_switch.h"
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

// Output row r's source row: a range entry or a gathered id; -1 for an id outside the table
// (its output row is NaN).
__device__ __forceinline__ int64_t SourceRow(const DequantRowsParams& p, int64_t r) {
  const int64_t src = p.row_ids != nullptr ? p.row_ids[r] : p.first_row + r;
  return src < 0 || src >= p.table_rows ? -1 : src;
}

__device__ __forceinline__ void FillQuietNaN(float (&v)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __int_as_float(0x7fc00000);
}

// Output row r, values e0 .. e0 + 7 (fewer at the row's end) from v, as F32 or F16.
__device__ __forceinline__ void StoreGroup(const DequantRowsParams& p, int64_t r, int64_t e0,
                                           const float (&v)[8]) {
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
    const int64_t src = SourceRow(p, r);
    float v[8];
    if (src < 0) {
      FillQuietNaN(v);
    } else {
      DequantGroup<kType>(p.w + src * p.w_row_bytes, group, p.cols, tables, v);
    }
    StoreGroup(p, r, 8 * group, v);
  }
}

// The quantized types with each CTA's blocks staged in shared memory: a CTA takes kStagedValues
// consecutive values of one row (whole blocks), copies their bytes with coalesced byte loads, and
// its threads decode one 8-value group each from there with the generic kernel's DequantGroup -
// the same code on the same bytes, so the same values. Why: DequantGroup reads its block byte by
// byte (and, per type, scales and grid indices), which from global memory costs a load
// instruction per byte - the generic kernel ran at ~1.2 TB/s for IQ4_XS (see below); staged, the
// bytes cross from global memory once, in 32-byte-per-warp instructions. Off unless
// STEPSERVE_DEQUANT_STAGED=1 (written in session 26 without a device: dequant_cuda_test's types
// run through it with that switch).
constexpr int kStagedValues = 8 * kThreads;
template <GgmlType kType>
__global__ void __launch_bounds__(kThreads)
    DequantStagedKernel(DequantRowsParams p, DequantTables tables) {
  constexpr dequant_device::BlockGeometry kGeo = dequant_device::Geometry(kType);
  static_assert(kGeo.elems > 1 && kStagedValues % kGeo.elems == 0);
  constexpr int kBlocks = kStagedValues / kGeo.elems;
  __shared__ uint8_t staged[kBlocks * kGeo.bytes];  // 1088-2176 bytes
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t chunks_per_row = (p.cols + kStagedValues - 1) / kStagedValues;
  for (int64_t c = blockIdx.x; c < p.rows * chunks_per_row; c += gridDim.x) {
    const int64_t r = c / chunks_per_row;
    const int64_t e0 = (c - r * chunks_per_row) * kStagedValues;
    const int64_t src = SourceRow(p, r);
    const bool bad = src < 0;
    const int blocks =
        static_cast<int>(min(static_cast<int64_t>(kBlocks), (p.cols - e0) / kGeo.elems));
    __syncthreads();  // the previous chunk's readers are done with `staged`
    if (!bad) {
      const uint8_t* from = p.w + src * p.w_row_bytes + (e0 / kGeo.elems) * kGeo.bytes;
      for (int i = static_cast<int>(threadIdx.x); i < blocks * kGeo.bytes; i += kThreads) {
        staged[i] = from[i];
      }
    }
    __syncthreads();
    const int group = static_cast<int>(threadIdx.x);  // within the chunk
    if (8 * group >= blocks * kGeo.elems) continue;
    float v[8];
    if (bad) {
      FillQuietNaN(v);
    } else {
      DequantGroup<kType>(staged, group, blocks * kGeo.elems, tables, v);
    }
    StoreGroup(p, r, e0 + 8 * group, v);
  }
}

bool StagedDequant() {
  static const bool on = EnvSwitchSet("STEPSERVE_DEQUANT_STAGED");
  return on;
}

// IQ4_XS rows -> F16, one thread per 8 values (as the generic kernel, so a warp's 16-byte stores
// are one contiguous 512 bytes): the block header and the 8 nibble bytes as two 8-byte loads, the
// 16 table values as floats in shared memory (16 words in 16 banks: any lanes' lookups are
// conflict-free). Why: the generic kernel above (per 8 values: ~20 byte and table loads from
// global memory, a 64-bit division) dequantized the prefill's weight tiles at ~1.2 TB/s (ncu,
// H100: 18 us per 2048 x 4096 tile, ~17 tiles per MoE layer, also at 64 decode streams). A first
// form with one thread per 32-value sub-block (four 16-byte stores 64 bytes apart per lane) was
// slower than the generic kernel (session 26, H100: 64 streams 34.1 -> 37.0 ms). Bitwise the
// generic kernel's output: d * (ls - 32) * value is exact in float (11 + 12 significant bits), so
// either kernel's single rounding to F16 agrees. Needs: F16 output, 16-byte aligned out /
// out_stride * 2, 8-byte aligned w / w_row_bytes.
__global__ void __launch_bounds__(kThreads)
    DequantIq4XsF16Kernel(DequantRowsParams p, const int8_t* values) {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = static_cast<float>(values[threadIdx.x]);
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  __syncthreads();
  const int64_t groups_per_row = p.cols / 8;
  const int64_t total = p.rows * groups_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups_per_row;
    const int64_t group = i - r * groups_per_row;
    const int64_t src = SourceRow(p, r);
    uint4* o = reinterpret_cast<uint4*>(static_cast<__half*>(p.out) + r * p.out_stride + 8 * group);
    if (src < 0) {
      // Quiet NaN, converted as the generic kernel converts it (the same bits).
      const __half2 nan2 =
          __floats2half2_rn(__int_as_float(0x7fc00000), __int_as_float(0x7fc00000));
      const uint32_t nan_bits = *reinterpret_cast<const uint32_t*>(&nan2);
      *o = make_uint4(nan_bits, nan_bits, nan_bits, nan_bits);
      continue;
    }
    // Group g of a block: sub-block ib = g / 4; values 8l..8l+7 of it (l = g % 4) are the low
    // (l < 2) or high nibbles of qs bytes 8 (l % 2) .. + 7 of the sub-block's 16.
    const int g = static_cast<int>(group % 32), ib = g / 4, l = g % 4;
    const uint8_t* b = p.w + src * p.w_row_bytes + (group / 32) * 136;
    const uint2 head = *reinterpret_cast<const uint2*>(b);  // d, scales_h, scales_l[0..3]
    const uint2 q = *reinterpret_cast<const uint2*>(b + 8 + 16 * ib + 8 * (l & 1));
    const uint32_t scales_l = (head.y >> (8 * (ib / 2))) & 0xFF;
    const int ls = ((scales_l >> (4 * (ib % 2))) & 15) | (((head.x >> (16 + 2 * ib)) & 3) << 4);
    const float dl = __half2float(__ushort_as_half(static_cast<unsigned short>(head.x & 0xFFFF))) *
                     static_cast<float>(ls - 32);
    const int shift = 4 * (l >> 1);
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t word = k < 2 ? q.x : q.y;
      const uint32_t b0 = word >> (16 * (k & 1) + shift), b1 = word >> (16 * (k & 1) + 8 + shift);
      const __half2 v = __floats2half2_rn(dl * table[b0 & 15], dl * table[b1 & 15]);
      h[k] = *reinterpret_cast<const uint32_t*>(&v);
    }
    *o = make_uint4(h[0], h[1], h[2], h[3]);
  }
}

// The IQ4_XS kernel above where its alignment holds, on unless STEPSERVE_DEQUANT_IQ4XS_FAST=0.
// Measured on the H100 (session 26, results-v23.txt call 3; 24 layers, alternating): 64 streams
// 34.29 / 34.09 -> 31.36 / 31.19 ms (their attention projections dequantize every step), prefill
// 2048 / 4096 tokens 15692 / 15345 and 15629 / 15334 -> 15923 / 15678 and 15564 / 15653 tok/s.
bool FastIq4Xs(const DequantRowsParams& p) {
  static const bool on = EnvSwitchOn("STEPSERVE_DEQUANT_IQ4XS_FAST");
  return on && p.f16_out && p.vector_store && reinterpret_cast<uintptr_t>(p.w) % 8 == 0 &&
         p.w_row_bytes % 8 == 0;
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
  if (a.type == GgmlType::kIQ4_XS && FastIq4Xs(p)) {
    const int64_t groups = a.rows * (a.cols / 8);
    const int blocks = static_cast<int>(std::min(kMaxBlocks, (groups + kThreads - 1) / kThreads));
    LaunchWithPdl(DequantIq4XsF16Kernel, blocks, kThreads, 0, stream, p, tables.iq4nl_values);
    return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
  }
  if (geo.elems > 1 && StagedDequant()) {
    const int64_t chunks = a.rows * ((a.cols + kStagedValues - 1) / kStagedValues);
    const int blocks = static_cast<int>(std::min(kMaxBlocks, chunks));
    dequant_device::DispatchDequantType(a.type, [&](auto tag) {
      if constexpr (dequant_device::Geometry(decltype(tag)::value).elems > 1) {
        LaunchWithPdl(DequantStagedKernel<decltype(tag)::value>, blocks, kThreads, 0, stream, p,
                      tables);
      }
    });
    return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
  }
  const int64_t total = a.rows * groups_per_row;
  const int blocks = static_cast<int>(std::min(kMaxBlocks, (total + kThreads - 1) / kThreads));
  dequant_device::DispatchDequantType(a.type, [&](auto tag) {
    LaunchWithPdl(DequantRowsKernel<decltype(tag)::value>, blocks, kThreads, 0, stream, p, tables);
  });
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
