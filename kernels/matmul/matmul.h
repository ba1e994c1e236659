// Quantized matmul: Y[rows x out] = X[rows x in] * W^T, with W stored as GGUF stores it: `out`
// rows of blocks (ggml ne = [in, out]), each row `w_row_bytes` apart. Any type
// quant::CanDequantize accepts. X and Y are F32, row-major with their own row strides (floats).
// Y must not alias X.
#ifndef STEPSERVE_KERNELS_MATMUL_MATMUL_H_
#define STEPSERVE_KERNELS_MATMUL_MATMUL_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

struct MatmulArgs {
  GgmlType type = GgmlType::kF32;
  const void* w = nullptr;
  int64_t w_row_bytes = 0;  // >= RowBytes(type, in)
  int64_t in = 0;           // multiple of the type's block size
  int64_t out = 0;
  const float* x = nullptr;
  int64_t x_stride = 0;  // floats between X rows, >= in
  int64_t rows = 0;
  float* y = nullptr;
  int64_t y_stride = 0;  // floats between Y rows, >= out
};

// Checks pointers, sizes, strides and the type; kOk when the arguments are usable.
KernelStatus ValidateMatmul(const MatmulArgs& args);

// Scalar reference: dequantizes each weight row and accumulates in double.
KernelStatus MatmulRef(const MatmulArgs& args);

// Optimised: works on the blocks directly (quant::DotRow) for one X row; for several X rows,
// dequantizes each weight row chunk once into a stack buffer and dots it against every X row.
// Multi-threaded over output rows when `pool` is given (nullptr: the calling thread only).
KernelStatus MatmulCpu(const MatmulArgs& args, ThreadPool* pool);

// The single-threaded body of MatmulCpu for output rows [out_begin, out_end); for callers that
// schedule their own parallelism (the grouped MoE kernel). Arguments must be validated.
void MatmulCpuRange(const MatmulArgs& args, int64_t out_begin, int64_t out_end);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_MATMUL_H_
