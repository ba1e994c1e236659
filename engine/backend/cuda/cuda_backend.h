// The CUDA Backend: every op of backend.h on one device, all work enqueued on one stream.
//
// The class is split by op group so each file stays small and owns its kernels' state:
//   cuda_backend.cc            device, stream, memory (Allocate/Upload/.../PlaceWeight), registry
//   cuda_backend_pointwise.cc  RmsNorm, QkNormRope, HeadGate, SwiGlu, Add, RouterTopK
//   cuda_backend_attention.cc  AppendKv, Attention
//   cuda_backend_matmul.cc     Matmul, Embed, MoeExperts
// Each group keeps its device scratch in its own state struct (declared here, defined in its
// file, created on first use) so groups never share mutable state.
//
// Ops are asynchronous: they validate on the host, upload the small host-side batch description
// (positions, block tables, token ids) and enqueue kernels. Launch errors come back from the op;
// faults inside a kernel surface at the next Download / Synchronize.
#ifndef STEPSERVE_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
#define STEPSERVE_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "kernels/common/kernel_status.h"

namespace stepserve {

// Registered as "cuda" by the backend registry when the build has CUDA. Creating it without a
// visible device gives FailedPrecondition, never a crash.
class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }

  bool host_visible() const override { return false; }
  absl::StatusOr<BackendBuffer> Allocate(size_t bytes) override;
  absl::Status Upload(const void* host, void* dst, size_t bytes) override;
  absl::Status Download(const void* src, void* host, size_t bytes) override;
  absl::Status Copy(const void* src, void* dst, size_t bytes) override;
  absl::Status Zero(void* dst, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::StatusOr<WeightView> PlaceWeight(const WeightView& host, std::string_view name) override;
  BackendMemoryInfo memory_info() const override;

  absl::Status Embed(const WeightView& table, std::span<const int32_t> ids,
                     const TensorView& out) override;
  absl::Status RmsNorm(const TensorView& x, const WeightView& weight, float eps,
                       const TensorView& out) override;
  absl::Status Matmul(const TensorView& x, const WeightView& w, const TensorView& y) override;
  absl::Status QkNormRope(const TensorView& q, const TensorView& k, const QkNormRopeParams& params,
                          std::span<const int32_t> positions) override;
  absl::Status AppendKv(const TensorView& k, const TensorView& v, const AttentionBatch& batch,
                        const KvCacheView& cache) override;
  absl::Status Attention(const TensorView& q, const AttentionBatch& batch,
                         const KvCacheView& cache, const AttentionParams& params,
                         const TensorView& out) override;
  absl::Status HeadGate(const TensorView& o, const TensorView& gate_logits,
                        int64_t head_dim) override;
  absl::Status SwiGlu(const TensorView& g, const TensorView& u, float limit,
                      const TensorView& z) override;
  absl::Status Add(const TensorView& a, const TensorView& b, const TensorView& y) override;
  absl::Status RouterTopK(const TensorView& logits, const RouterParams& params,
                          std::span<int32_t> ids, std::span<float> weights) override;
  absl::Status MoeExperts(const TensorView& x, const ExpertWeights& experts,
                          std::span<const int32_t> ids, std::span<const float> weights,
                          int64_t top_k, const TensorView& y) override;

  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

  // Shared helpers for the op files.
  // A grow-only device scratch area, freed (cudaFree) when destroyed.
  // StageToDevice also keeps a pinned host copy (so the upload is truly asynchronous: a pageable
  // source makes the driver wait for the stream) and the bytes last staged (so an unchanged
  // batch description, e.g. the positions every layer of a step passes, is uploaded once).
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
    void* pinned = nullptr;
    size_t pinned_bytes = 0;
    cudaEvent_t copied = nullptr;  // recorded after the last copy out of `pinned`
    std::vector<uint8_t> staged;   // what `data` holds after the last StageToDevice
    bool staged_valid = false;
    Scratch() = default;
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() {
      if (copied != nullptr) cudaEventSynchronize(copied);
      if (data != nullptr) cudaFree(data);
      if (pinned != nullptr) cudaFreeHost(pinned);
      if (copied != nullptr) cudaEventDestroy(copied);
    }
  };
  // Makes `scratch` at least `bytes` large (synchronises the stream before freeing a smaller one).
  absl::StatusOr<void*> EnsureScratch(Scratch& scratch, size_t bytes, const char* what);
  // Copies host bytes into `scratch` (grown as needed), ordered on the stream; the host memory may
  // be reused as soon as this returns.
  absl::StatusOr<void*> StageToDevice(Scratch& scratch, const void* host, size_t bytes,
                                      const char* what);
  // Turns a kernel's return code into a status naming the op; then checks cudaGetLastError
  // (launch failures) and clears it.
  absl::Status KernelResult(kernels::KernelStatus status, const char* op);
  absl::Status CudaResult(cudaError_t err, const char* what);

  struct PointwiseState;   // cuda_backend_pointwise.cc
  struct AttentionState;   // cuda_backend_attention.cc
  struct MatmulState;      // cuda_backend_matmul.cc

 private:
  CudaBackend() = default;
  // MoeExperts at decode sizes without a host round trip (cuda_backend_matmul.cc).
  absl::Status MoeExpertsOnDevice(const TensorView& x, const ExpertWeights& e,
                                  std::span<const int32_t> ids, std::span<const float> weights,
                                  int64_t top_k, const TensorView& y);

  int device_ = 0;
  bool exact_activations_ = false;  // BackendOptions::exact_activations
  cudaStream_t stream_ = nullptr;
  std::mutex placed_mu_;
  std::vector<void*> placed_;  // PlaceWeight copies, freed in the destructor
  std::atomic<uint64_t> weight_bytes_{0};
  std::shared_ptr<std::atomic<uint64_t>> buffer_bytes_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<PointwiseState> pointwise_;
  std::shared_ptr<AttentionState> attention_;
  std::shared_ptr<MatmulState> matmul_;
};

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
