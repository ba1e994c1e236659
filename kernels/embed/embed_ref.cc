// Scalar reference: one DequantizeRow per token.
#include "kernels/embed/embed.h"
#include "kernels/embed/embed_internal.h"

namespace stepserve::kernels {

KernelStatus EmbedRef(const EmbedArgs& a) {
  if (KernelStatus s = internal::ValidateEmbed(a); s != KernelStatus::kOk) return s;
  const auto* table = static_cast<const uint8_t*>(a.table);
  for (int64_t t = 0; t < a.n_ids; ++t) {
    if (!quant::DequantizeRow(a.type, table + a.ids[t] * a.row_bytes, a.out + t * a.out_stride,
                              a.dim)
             .ok()) {
      return KernelStatus::kUnsupportedType;
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
