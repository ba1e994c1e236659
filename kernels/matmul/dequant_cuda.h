// Dequantization of GGUF weight rows on a CUDA device: a row range or a gather of row ids, to F32
// or F16, for every block type the published step35 files use. The GEMM path (gemm_cuda.h)
// dequantizes weight tiles with it, Embed gathers token rows with it.
//
// Values are bit-exact with engine/quant's DequantizeRow (same float32 rounding order, no FMA
// contraction); the F16 output is that value rounded to nearest even.
//
// The IQ grids and sign tables live in a small device buffer per device, copied once from the
// host tables (engine/quant/quant_tables.h, generated from shared/ref/ggml-tables) on first use
// and kept for the life of the process (17 KB).
#ifndef STEPSERVE_KERNELS_MATMUL_DEQUANT_CUDA_H_
#define STEPSERVE_KERNELS_MATMUL_DEQUANT_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Device pointers to the lookup tables the i-quants need (passed to kernels by value).
struct DequantTables {
  const uint64_t* iq2xxs_grid = nullptr;  // 256
  const uint64_t* iq2xs_grid = nullptr;   // 512
  const uint64_t* iq2s_grid = nullptr;    // 1024
  const uint32_t* iq3xxs_grid = nullptr;  // 256
  const uint32_t* iq3s_grid = nullptr;    // 512
  const uint8_t* ksigns = nullptr;        // 128 (ksigns_iq2xs)
  const int8_t* iq4nl_values = nullptr;   // 16 (kvalues_iq4nl)
};

// The tables on the current device (cudaGetDevice), uploaded on the first call for that device
// (thread-safe; the first call synchronizes the device once). kInvalidArgument when the upload
// fails.
KernelStatus DeviceDequantTables(DequantTables* tables);

// F32, F16, BF16, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ4_NL, IQ4_XS.
bool DequantCudaSupports(GgmlType type);

enum class DequantOutput : int { kF32 = 0, kF16 = 1 };

struct DequantRowsArgs {
  GgmlType type = GgmlType::kF32;
  const void* w = nullptr;  // device: `table_rows` rows of `cols` elements, `w_row_bytes` apart
  int64_t w_row_bytes = 0;  // >= RowBytes(type, cols)
  int64_t cols = 0;         // multiple of the type's block size
  int64_t table_rows = 0;   // rows in `w` (bounds for row ids)
  // Output row r is source row first_row + r, or row_ids[r] when row_ids (device) is set. A
  // gathered id outside [0, table_rows) yields a row of NaN (callers validate ids on the host;
  // this only keeps a bad id from reading out of bounds).
  int64_t first_row = 0;
  const int32_t* row_ids = nullptr;
  int64_t rows = 0;
  DequantOutput output = DequantOutput::kF32;
  void* out = nullptr;     // device, F32 or F16 elements
  int64_t out_stride = 0;  // elements between output rows, >= cols
};

// Validates on the host, then enqueues one kernel on `stream`.
KernelStatus DequantRowsCuda(const DequantRowsArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_DEQUANT_CUDA_H_
