// Optimised embedding: the work is one row dequantize per token, so the only gain is spreading
// tokens over threads (prefill batches); F32 tables are a plain copy.
#include <cstring>

#include "kernels/embed/embed.h"
#include "kernels/embed/embed_internal.h"

namespace stepserve::kernels {

KernelStatus EmbedCpu(const EmbedArgs& a, ThreadPool* pool) {
  if (KernelStatus s = internal::ValidateEmbed(a); s != KernelStatus::kOk) return s;
  const auto* table = static_cast<const uint8_t*>(a.table);
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const uint8_t* row = table + a.ids[t] * a.row_bytes;
      float* out = a.out + t * a.out_stride;
      if (a.type == GgmlType::kF32) {
        std::memcpy(out, row, a.dim * sizeof(float));
      } else {
        // Validated type and size: DequantizeRow cannot fail here.
        (void)quant::DequantizeRow(a.type, row, out, a.dim);
      }
    }
  };
  if (pool == nullptr) {
    body(0, a.n_ids);
  } else {
    pool->ParallelFor(a.n_ids, 4, body);
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
