// CudaBackend ops: AppendKv, Attention.
// PLACEHOLDER until the kernels land: every op reports Unimplemented.
#include "engine/backend/cuda/cuda_backend.h"

namespace stepserve {

struct CudaBackend::AttentionState {};

absl::Status CudaBackend::AppendKv(const TensorView&, const TensorView&, const AttentionBatch&,
                                   const KvCacheView&) {
  return absl::UnimplementedError("cuda backend: AppendKv is not implemented yet");
}
absl::Status CudaBackend::Attention(const TensorView&, const AttentionBatch&, const KvCacheView&,
                                    const AttentionParams&, const TensorView&) {
  return absl::UnimplementedError("cuda backend: Attention is not implemented yet");
}

}  // namespace stepserve
