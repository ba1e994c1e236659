// CudaBackend ops: Matmul, Embed, MoeExperts.
// PLACEHOLDER until the kernels land: every op reports Unimplemented.
#include "engine/backend/cuda/cuda_backend.h"

namespace stepserve {

struct CudaBackend::MatmulState {};

absl::Status CudaBackend::Embed(const WeightView&, std::span<const int32_t>, const TensorView&) {
  return absl::UnimplementedError("cuda backend: Embed is not implemented yet");
}
absl::Status CudaBackend::Matmul(const TensorView&, const WeightView&, const TensorView&) {
  return absl::UnimplementedError("cuda backend: Matmul is not implemented yet");
}
absl::Status CudaBackend::MoeExperts(const TensorView&, const ExpertWeights&,
                                     std::span<const int32_t>, std::span<const float>, int64_t,
                                     const TensorView&) {
  return absl::UnimplementedError("cuda backend: MoeExperts is not implemented yet");
}

}  // namespace stepserve
