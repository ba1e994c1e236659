// Embedding lookup on a CUDA device: out[t] = dequantized row ids[t] of the table (same contract
// as embed.h: ggml ne = [dim, n_vocab], every type dequant_cuda.h supports, no scaling), with the
// table, ids and out in device memory and the work enqueued on `stream`.
#ifndef STEPSERVE_KERNELS_EMBED_EMBED_CUDA_H_
#define STEPSERVE_KERNELS_EMBED_EMBED_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

struct EmbedCudaArgs {
  GgmlType type = GgmlType::kF32;
  const void* table = nullptr;  // device
  int64_t row_bytes = 0;        // bytes between table rows, >= RowBytes(type, dim)
  int64_t n_vocab = 0;
  int64_t dim = 0;  // multiple of the type's block size
  // Device memory. The kernel cannot report a bad id (it runs asynchronously): callers check
  // the ids on their host copy first. An id outside [0, n_vocab) yields a NaN row, never an
  // out-of-bounds read.
  const int32_t* ids = nullptr;
  int64_t n_ids = 0;
  float* out = nullptr;    // device
  int64_t out_stride = 0;  // floats between output rows, >= dim
};

// Validates on the host, then enqueues one gather-dequantize kernel. Bit-exact with EmbedRef.
KernelStatus EmbedCuda(const EmbedCudaArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_EMBED_EMBED_CUDA_H_
