// Validation shared by the embedding reference and CPU versions.
#ifndef STEPSERVE_KERNELS_EMBED_EMBED_INTERNAL_H_
#define STEPSERVE_KERNELS_EMBED_EMBED_INTERNAL_H_

#include "engine/quant/quant.h"
#include "kernels/embed/embed.h"

namespace stepserve::kernels::internal {

inline KernelStatus ValidateEmbed(const EmbedArgs& a) {
  if (a.table == nullptr || a.ids == nullptr || a.out == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.n_vocab <= 0 || a.dim <= 0 || a.n_ids < 0 || a.out_stride < a.dim) {
    return KernelStatus::kInvalidArgument;
  }
  if (!quant::CanDequantize(a.type)) return KernelStatus::kUnsupportedType;
  const int64_t need = RowBytes(a.type, a.dim);
  if (need < 0 || a.row_bytes < need) return KernelStatus::kInvalidArgument;
  for (int64_t t = 0; t < a.n_ids; ++t) {
    if (a.ids[t] < 0 || a.ids[t] >= a.n_vocab) return KernelStatus::kOutOfRange;
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels::internal

#endif  // STEPSERVE_KERNELS_EMBED_EMBED_INTERNAL_H_
