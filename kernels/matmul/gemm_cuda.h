// Matmul on a CUDA device for every type dequant_cuda.h supports, the paths the fast GEMV
// (matmul_cuda.h: Q8_0, Q4_K, Q6_K, IQ4_XS, <= 16 rows) does not cover. Same layout contract:
// Y[rows x out] = X[rows x in] * W^T, W `out` rows of GGUF blocks `w_row_bytes` apart, X and Y
// F32 row-major with their own strides, every pointer in device memory, work enqueued on `stream`.
//
//  - GemvGenericCuda: 1..16 rows; one warp per output row dequantizes its weights in registers
//    and dots them with the exact F32 activations. Exact up to F32 accumulation order.
//  - CublasGemm: any number of rows, through cuBLAS with F32 accumulation:
//      F32 weights   cublasSgemm on W as stored (exact F32);
//      F16 weights   cublasGemmEx on W as stored, X rounded to F16 (tensor cores);
//      BF16 weights  W dequantized tile by tile to F32, cublasSgemm (exact F32);
//      quantized     W dequantized tile by tile to F16, X rounded to F16, cublasGemmEx.
//    The F16 paths differ from the exact result by the F16 rounding of W and X (relative 2^-11
//    per value): ~5e-4 relative on random data.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMM_CUDA_H_
#define STEPSERVE_KERNELS_MATMUL_GEMM_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

struct cublasContext;  // cublas_v2.h: cublasHandle_t is cublasContext*

namespace stepserve::kernels {

inline constexpr int64_t kGemvGenericMaxRows = 16;

struct MatmulCudaArgs {
  GgmlType type = GgmlType::kF32;
  const void* w = nullptr;  // device
  // >= RowBytes(type, in); a multiple of the element size for F32 / F16 / BF16.
  int64_t w_row_bytes = 0;
  int64_t in = 0;  // multiple of the type's block size
  int64_t out = 0;
  const float* x = nullptr;  // device
  int64_t x_stride = 0;      // floats between X rows, >= in
  int64_t rows = 0;
  float* y = nullptr;    // device, must not alias X
  int64_t y_stride = 0;  // floats between Y rows, >= out
  // CublasGemm only: device memory, 256-byte aligned, >= CublasGemmScratchBytes(...) bytes, not
  // overlapping W, X or Y (holds the F16 copy of X and the dequantized weight tile).
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
  // CublasGemm only: F32 throughout (F32 weight tiles, X as is, SGEMM) instead of F16 tiles and
  // an F16 copy of X (~5e-4 relative). For BackendOptions::exact_activations.
  bool exact = false;
};

// Host-side checks shared by both paths (type, pointers, sizes, strides, element alignment of
// plain types); rows >= 1. Pointers are not dereferenced.
KernelStatus ValidateMatmulCuda(const MatmulCudaArgs& args);

// Validates (rows 1..kGemvGenericMaxRows), then enqueues one kernel.
KernelStatus GemvGenericCuda(const MatmulCudaArgs& args, cudaStream_t stream);

// y[r][o] = parts[r * row_stride + o] + parts[part_stride + r * row_stride + o] + ... over n_parts
// parts, summed in that order (the fixed-order sum of a K-split's partial products); r < rows,
// o < out, every pointer F32 in device memory, y not overlapping parts. One kernel.
KernelStatus SumPartsCuda(const float* parts, int n_parts, int64_t part_stride, int64_t row_stride,
                          int64_t rows, int64_t out, float* y, int64_t y_stride,
                          cudaStream_t stream);

// Scratch CublasGemm::Run needs for these sizes (0 for F32 weights).
int64_t CublasGemmScratchBytes(GgmlType type, int64_t in, int64_t out, int64_t rows,
                               bool exact = false);

// Owns one cuBLAS handle, created on the current device at the first Run. Not thread-safe: one
// owner drives it (the backend's engine thread).
class CublasGemm {
 public:
  CublasGemm() = default;
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;
  ~CublasGemm();

  // Validates, then enqueues the tile dequantizations and GEMMs on `stream`. kInvalidArgument
  // also when cuBLAS cannot be initialised or rejects a call; kTooLarge when a dimension or
  // stride does not fit cuBLAS's int.
  KernelStatus Run(const MatmulCudaArgs& args, cudaStream_t stream);

 private:
  cublasContext* handle_ = nullptr;
};

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_GEMM_CUDA_H_
