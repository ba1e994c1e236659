// CudaBackend ops: RmsNorm, QkNormRope, HeadGate, SwiGlu, Add, RouterTopK.
// PLACEHOLDER until the kernels land: every op reports Unimplemented.
#include "engine/backend/cuda/cuda_backend.h"

namespace stepserve {

struct CudaBackend::PointwiseState {};

absl::Status CudaBackend::RmsNorm(const TensorView&, const WeightView&, float, const TensorView&) {
  return absl::UnimplementedError("cuda backend: RmsNorm is not implemented yet");
}
absl::Status CudaBackend::QkNormRope(const TensorView&, const TensorView&, const QkNormRopeParams&,
                                     std::span<const int32_t>) {
  return absl::UnimplementedError("cuda backend: QkNormRope is not implemented yet");
}
absl::Status CudaBackend::HeadGate(const TensorView&, const TensorView&, int64_t) {
  return absl::UnimplementedError("cuda backend: HeadGate is not implemented yet");
}
absl::Status CudaBackend::SwiGlu(const TensorView&, const TensorView&, float, const TensorView&) {
  return absl::UnimplementedError("cuda backend: SwiGlu is not implemented yet");
}
absl::Status CudaBackend::Add(const TensorView&, const TensorView&, const TensorView&) {
  return absl::UnimplementedError("cuda backend: Add is not implemented yet");
}
absl::Status CudaBackend::RouterTopK(const TensorView&, const RouterParams&, std::span<int32_t>,
                                     std::span<float>) {
  return absl::UnimplementedError("cuda backend: RouterTopK is not implemented yet");
}

}  // namespace stepserve
