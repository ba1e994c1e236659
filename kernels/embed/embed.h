// Embedding lookup: out[t] = dequantized row ids[t] of the table (ggml ne = [dim, n_vocab], any
// type quant::CanDequantize accepts), spec 4.1. No scaling.
#ifndef STEPSERVE_KERNELS_EMBED_EMBED_H_
#define STEPSERVE_KERNELS_EMBED_EMBED_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

struct EmbedArgs {
  GgmlType type = GgmlType::kF32;
  const void* table = nullptr;
  int64_t row_bytes = 0;  // bytes between table rows, >= RowBytes(type, dim)
  int64_t n_vocab = 0;
  int64_t dim = 0;  // multiple of the type's block size
  const int32_t* ids = nullptr;
  int64_t n_ids = 0;
  float* out = nullptr;
  int64_t out_stride = 0;  // floats between output rows, >= dim
};

// Every id is checked before anything is written: kOutOfRange leaves `out` untouched.
KernelStatus EmbedRef(const EmbedArgs& args);
// Same result (bit for bit), rows spread over `pool` (nullptr: calling thread).
KernelStatus EmbedCpu(const EmbedArgs& args, ThreadPool* pool);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_EMBED_EMBED_H_
