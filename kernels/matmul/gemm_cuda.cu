// CublasGemm (gemm_cuda.h): cuBLAS GEMMs with F32 accumulation over the weights as stored (F32,
// F16) or over tiles dequantized into scratch (BF16 -> F32, quantized -> F16). Tiles bound the
// scratch to a few tens of MiB whatever the matrix size; the tile, X conversion and GEMM calls are
// all ordered on the caller's stream, so one scratch serves every tile.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/alignment.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/cublas_loader.h"
#include "kernels/matmul/dequant_cuda.h"
#include "kernels/matmul/gemm_cuda.h"

namespace stepserve::kernels {
namespace {

// Dequantized tile budget in elements: 2^26 (128 MiB of F16, 256 MiB of F32: the largest
// step35 matrix, the fused q / k / v / gate projection's 59M, in one tile) unless
// STEPSERVE_GEMM_TILE_LOG2 (20-27, read once) says otherwise. Why: each tile is a dequantize
// launch and a GEMM launch in stream order; 2^23 (16 MiB of F16, the first size) cut a 4096 x
// 14432 matrix into 7 pairs. Measured on the H100 (session 26, results-v23.txt calls 3-4; 24
// layers IQ4_XS, alternating, with the IQ4_XS dequantization kernel): 64 streams 31.36 / 31.19
// ms at 2^23, 30.02 / 29.99 / 30.03 / 30.21 at 2^25, 29.82 / 29.93 at 2^26, 29.84 / 29.90 at 2^27;
// prefill 2048 tokens 15923 / 15564 -> 16247 / 16054 / 16267 / 16087 -> 16291 / 16148 tok/s.
int64_t TileElems() {
  static const int64_t elems = [] {
    const char* v = std::getenv("STEPSERVE_GEMM_TILE_LOG2");
    const int log2 = v != nullptr ? std::atoi(v) : 26;
    return int64_t{1} << (log2 >= 20 && log2 <= 27 ? log2 : 26);
  }();
  return elems;
}

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Leading dimension of the F16 X copy and of weight tiles: 8 elements keep rows 16-byte aligned
// (cuBLAS's tensor-core kernels prefer it; the padding is never read since k = in).
int64_t PaddedLd(int64_t in) { return AlignUp(in, 8); }

int64_t TileRows(int64_t in, int64_t out) {
  const int64_t rows = TileElems() / PaddedLd(in);
  if (rows >= out) return out;
  return std::max<int64_t>(16, rows / 16 * 16);
}

bool IsPlainFloat(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16;
}

struct ScratchLayout {
  int64_t x16_bytes = 0;    // F16 copy of X (0 when X is used as F32)
  int64_t tile_bytes = 0;   // dequantized weight tile (0 when W is used as stored)
  int64_t tile_elem = 0;    // 2 (F16) or 4 (F32)
  int split_parts = 1;      // K parts of a split-K SGEMM (SplitKParts)
  int64_t split_bytes = 0;  // their F32 partial products, split_parts x rows x out
  int64_t total() const { return x16_bytes + tile_bytes + split_bytes; }
};

// Weights used as stored by cuBLAS (no tile): F32 always, F16 unless exact.
bool WeightsAsStored(GgmlType type, bool exact) {
  return type == GgmlType::kF32 || (type == GgmlType::kF16 && !exact);
}

// K parts of an F32-weight SGEMM with few output columns and many rows (the MoE router: 288
// experts x 4096 at a prefill of 2048 tokens), 1 = no split. Why: cuBLAS ran that router GEMM as
// 8 x 5 CTAs of 256 x 64 (sm80_xmma ... 256x64x8) on a 132-SM device - 124 us per MoE layer, ~2%
// of the prefill (H100, results-v22.txt call 2). Parts of K as one strided batch, then a fixed-
// order sum (SumPartsCuda): the same F32 products, summed in another order. Off unless
// STEPSERVE_SGEMM_SPLIT_K=1 (read once) until measured on a device.
int SplitKParts(int64_t in, int64_t out, int64_t rows) {
  static const bool on = EnvSwitchSet("STEPSERVE_SGEMM_SPLIT_K");
  if (!on || rows < 256 || out > 1024 || in < 2048 || in % 16 != 0) return 1;
  // cuBLAS's tile for these shapes is about 64 columns x 256 rows: 2 or 4 parts (K stays a
  // multiple of 4) to reach about a wave of 132 SMs.
  const int64_t ctas = (out + 63) / 64 * ((rows + 255) / 256);
  return ctas >= 132 ? 1 : (ctas >= 66 ? 2 : 4);
}

ScratchLayout Layout(GgmlType type, int64_t in, int64_t out, int64_t rows, bool exact) {
  ScratchLayout s;
  const bool x_f16 = !exact && type != GgmlType::kF32 && type != GgmlType::kBF16;
  if (x_f16) s.x16_bytes = AlignUp(rows * PaddedLd(in) * 2, 256);
  if (!WeightsAsStored(type, exact)) {
    s.tile_elem = (exact || type == GgmlType::kBF16) ? 4 : 2;
    s.tile_bytes = TileRows(in, out) * PaddedLd(in) * s.tile_elem;
  }
  if (type == GgmlType::kF32) {
    s.split_parts = SplitKParts(in, out, rows);
    if (s.split_parts > 1) s.split_bytes = AlignUp(s.split_parts * rows * out * 4, 256);
  }
  return s;
}

// y[r][o] = sum over p in order 0, 1, .. of parts[p * part_stride + r * row_stride + o]. Grid x
// tiles a row's columns, grid y strides over the rows.
__global__ void SumPartsKernel(const float* parts, int n_parts, int64_t part_stride,
                               int64_t row_stride, int64_t rows, int64_t out, float* y,
                               int64_t y_stride) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= out) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* part = parts + r * row_stride + o;
    float sum = part[0];
    for (int p = 1; p < n_parts; ++p) sum += part[p * part_stride];
    y[r * y_stride + o] = sum;
  }
}

// x (rows x cols F32, row stride x_stride) -> out (F16, row stride out_ld). Grid x tiles a row's
// columns, grid y strides over the rows (no division per element: the grid-stride form with a
// 64-bit i / cols per element measured 42-90 us for a 2048-token prefill's inputs in the session-9
// profile, ~30% of bandwidth). kVec = 4: a float4 in, 4 halves out as one 8-byte store (cols,
// x_stride % 4 == 0, 16-byte aligned x; out_ld % 4 == 0 and 8-byte aligned out).
template <int kVec>
__global__ void ConvertToF16Kernel(const float* x, int64_t x_stride, int64_t rows, int64_t cols,
                                   __half* out, int64_t out_ld) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t c = kVec * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if constexpr (kVec == 4) {
      const float4 v = *reinterpret_cast<const float4*>(x + r * x_stride + c);
      const __half2 lo = __halves2half2(__float2half_rn(v.x), __float2half_rn(v.y));
      const __half2 hi = __halves2half2(__float2half_rn(v.z), __float2half_rn(v.w));
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(out + r * out_ld + c) = packed;
    } else {
      out[r * out_ld + c] = __float2half_rn(x[r * x_stride + c]);
    }
  }
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

KernelStatus SumPartsCuda(const float* parts, int n_parts, int64_t part_stride, int64_t row_stride,
                          int64_t rows, int64_t out, float* y, int64_t y_stride,
                          cudaStream_t stream) {
  if (parts == nullptr || y == nullptr || n_parts < 1 || rows < 1 || out < 1 || y_stride < out) {
    return KernelStatus::kInvalidArgument;
  }
  const unsigned col_blocks = static_cast<unsigned>((out + 255) / 256);
  const unsigned row_blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
  LaunchWithPdl(SumPartsKernel, dim3(col_blocks, row_blocks), dim3(256), 0, stream, parts, n_parts,
                part_stride, row_stride, rows, out, y, y_stride);
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

KernelStatus ValidateMatmulCuda(const MatmulCudaArgs& a) {
  if (!DequantCudaSupports(a.type)) return KernelStatus::kUnsupportedType;
  if (a.w == nullptr || a.x == nullptr || a.y == nullptr) return KernelStatus::kInvalidArgument;
  if (a.in <= 0 || a.out <= 0 || a.rows < 1) return KernelStatus::kInvalidArgument;
  const GgmlTypeInfo& info = TypeInfo(a.type);
  if (a.in % info.block_elems != 0 || a.w_row_bytes < RowBytes(a.type, a.in)) {
    return KernelStatus::kInvalidArgument;
  }
  if (info.block_elems == 1 && (a.w_row_bytes % info.block_bytes != 0 ||
                                reinterpret_cast<uintptr_t>(a.w) % info.block_bytes != 0)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.x_stride < a.in || a.y_stride < a.out) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

int64_t CublasGemmScratchBytes(GgmlType type, int64_t in, int64_t out, int64_t rows, bool exact) {
  if (in <= 0 || out <= 0 || rows <= 0) return 0;
  return Layout(type, in, out, rows, exact).total();
}

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) LoadCublas()->destroy(handle_);
}

KernelStatus CublasGemm::Run(const MatmulCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateMatmulCuda(a); s != KernelStatus::kOk) return s;
  const ScratchLayout layout = Layout(a.type, a.in, a.out, a.rows, a.exact);
  if (layout.total() > 0 &&
      (a.scratch == nullptr || reinterpret_cast<uintptr_t>(a.scratch) % 256 != 0 ||
       a.scratch_bytes < layout.total())) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t ld = PaddedLd(a.in);
  const int64_t w_ld = a.w_row_bytes / (a.type == GgmlType::kF32 ? 4 : 2);
  if (!FitsInt(a.in) || !FitsInt(a.out) || !FitsInt(a.rows) || !FitsInt(ld) ||
      !FitsInt(a.x_stride) || !FitsInt(a.y_stride) || (IsPlainFloat(a.type) && !FitsInt(w_ld))) {
    return KernelStatus::kTooLarge;
  }
  const CublasApi* cublas = LoadCublas();
  if (cublas == nullptr) return KernelStatus::kUnsupportedType;  // no cuBLAS: no GEMM path
  if (handle_ == nullptr && cublas->create(&handle_) != CUBLAS_STATUS_SUCCESS) {
    handle_ = nullptr;
    return KernelStatus::kInvalidArgument;
  }
  if (cublas->set_stream(handle_, stream) != CUBLAS_STATUS_SUCCESS) {
    return KernelStatus::kInvalidArgument;
  }
  auto* scratch = static_cast<uint8_t*>(a.scratch);
  auto* x16 = reinterpret_cast<__half*>(scratch);
  void* tile = scratch + layout.x16_bytes;
  if (layout.x16_bytes > 0) {
    // x16 is the scratch start, 256-byte aligned (checked above).
    const bool vec = a.in % 4 == 0 && a.x_stride % 4 == 0 && ld % 4 == 0 && Aligned16(a.x);
    const int64_t per_row = vec ? a.in / 4 : a.in;
    const dim3 grid(static_cast<unsigned>((per_row + 255) / 256),
                    static_cast<unsigned>(std::min<int64_t>(a.rows, 65535)));
    LaunchWithPdl(vec ? ConvertToF16Kernel<4> : ConvertToF16Kernel<1>, grid, dim3(256), 0, stream,
                  a.x, a.x_stride, a.rows, a.in, x16, ld);
    if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const int n = static_cast<int>(a.rows), k = static_cast<int>(a.in);
  // Column-major view: Y^T (out x rows, ld y_stride) = W (in x out, ld w_ld)^T * X^T (in x rows).
  auto gemm = [&](const void* w, int w_ldi, bool w_f32, int64_t o0, int m) {
    float* y = a.y + o0;
    if (w_f32) {
      return cublas->sgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                           static_cast<const float*>(w), w_ldi, a.x, static_cast<int>(a.x_stride),
                           &beta, y, static_cast<int>(a.y_stride));
    }
    return cublas->gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16F, w_ldi,
                           x16, CUDA_R_16F, static_cast<int>(ld), &beta, y, CUDA_R_32F,
                           static_cast<int>(a.y_stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  if (layout.split_parts > 1) {
    // Part p: columns [p kc, (p + 1) kc) of W's rows and X's rows, into partial product p.
    const int parts = layout.split_parts;
    const int kc = k / parts;
    auto* partial = reinterpret_cast<float*>(scratch + layout.x16_bytes + layout.tile_bytes);
    const int m = static_cast<int>(a.out);
    if (cublas->sgemm_strided_batched(
            handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kc, &alpha, static_cast<const float*>(a.w),
            static_cast<int>(w_ld), kc, a.x, static_cast<int>(a.x_stride), kc, &beta, partial, m,
            static_cast<long long>(m) * n, parts) != CUBLAS_STATUS_SUCCESS) {
      return KernelStatus::kInvalidArgument;
    }
    return SumPartsCuda(partial, parts, a.out * a.rows, a.out, a.rows, a.out, a.y, a.y_stride,
                        stream);
  }
  if (WeightsAsStored(a.type, a.exact)) {
    const bool ok = gemm(a.w, static_cast<int>(w_ld), a.type == GgmlType::kF32, 0,
                         static_cast<int>(a.out)) == CUBLAS_STATUS_SUCCESS;
    return ok ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
  }
  const int64_t tile_rows = TileRows(a.in, a.out);
  for (int64_t o0 = 0; o0 < a.out; o0 += tile_rows) {
    const int64_t m = std::min(tile_rows, a.out - o0);
    DequantRowsArgs d;
    d.type = a.type;
    d.w = a.w;
    d.w_row_bytes = a.w_row_bytes;
    d.cols = a.in;
    d.table_rows = a.out;
    d.first_row = o0;
    d.rows = m;
    d.output = layout.tile_elem == 4 ? DequantOutput::kF32 : DequantOutput::kF16;
    d.out = tile;
    d.out_stride = ld;
    if (KernelStatus s = DequantRowsCuda(d, stream); s != KernelStatus::kOk) return s;
    if (gemm(tile, static_cast<int>(ld), layout.tile_elem == 4, o0, static_cast<int>(m)) !=
        CUBLAS_STATUS_SUCCESS) {
      return KernelStatus::kInvalidArgument;
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
