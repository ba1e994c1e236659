// The CUDA Backend: every op of backend.h on one device, all work enqueued on one stream.
//
// The class is split by op group so each file stays small and owns its kernels' state:
//   cuda_backend.cc            device, stream, memory (Allocate/Upload/.../PlaceWeight), registry
//   cuda_backend_pointwise.cc  RmsNorm, AddRmsNorm, QkNormRope, HeadGate, SwiGlu, Add, RouterTopK
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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/graph_kernel_profile.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/kernel_status.h"
#include "kernels/rms_norm/rms_norm_cuda.h"
#include "kernels/rope/rope_cuda.h"

namespace stepserve {

// Registered as "cuda" by the backend registry when the build has CUDA. Creating it without a
// visible device gives FailedPrecondition, never a crash.
// Process-wide switch of the fused quantization (CudaBackend::PrequantizedX):
// on by default since session 11 (H200 batch 1: 6.14 -> 5.87 ms); STEPSERVE_FUSED_QUANT=0 at the
// first use turns it off.
// Returns the previous setting.
bool SetCudaFusedQuantization(bool enabled);
bool CudaFusedQuantization();

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  // F32, F16 and Q8_0 pages: the kernels in kernels/attention/paged_attention_cuda.h.
  bool SupportsKvDtype(KvDtype dtype) const override {
    return dtype == KvDtype::kF32 || dtype == KvDtype::kF16 || dtype == KvDtype::kQ8_0;
  }

  bool host_visible() const override { return false; }
  absl::StatusOr<BackendBuffer> Allocate(size_t bytes) override;
  absl::Status Upload(const void* host, void* dst, size_t bytes) override;
  absl::Status Download(const void* src, void* host, size_t bytes) override;
  absl::Status Copy(const void* src, void* dst, size_t bytes) override;
  absl::Status Zero(void* dst, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::StatusOr<WeightView> PlaceWeight(const WeightView& host, std::string_view name) override;
  BackendMemoryInfo memory_info() const override;

  // Step graphs (cuda_backend_graph.cc): a decode step is run eagerly the first time its key is
  // seen, recorded as a CUDA graph the second time and replayed after that; its batch inputs go
  // up in one copy before the graph. STEPSERVE_CUDA_GRAPHS=0 in the environment turns this off.
  absl::StatusOr<StepMode> BeginStep(const StepDescription& step) override;
  absl::Status EndStep(bool enqueued_all) override;

  absl::Status Embed(const WeightView& table, std::span<const int32_t> ids,
                     const TensorView& out) override;
  absl::Status RmsNorm(const TensorView& x, const WeightView& weight, float eps,
                       const TensorView& out) override;
  absl::Status Matmul(const TensorView& x, const WeightView& w, const TensorView& y) override;
  // With concurrent_matmuls() and every job a one-launch fast GEMV (fast mode, a type GemvCuda
  // has, rows below the dense grouped GEMM's): job 0 on the stream, the others one after another
  // on a side stream forked from it and joined back before the next op (in a recorded step, a
  // parallel branch of the graph). Otherwise, or with it off, the Matmuls in order.
  absl::Status ConcurrentMatmuls(std::span<const MatmulJob> jobs) override;
  // With side_shared_expert() and 1..SideBranchMaxRows() rows, not in exact mode: the side's ops go
  // to the side stream, forked from the stream by an event (in a recorded step, a parallel branch
  // of the graph), with their own fused int8 activations and GEMV scratch (the main line's stay
  // as they were: its next ops may still read them); JoinSide makes the stream wait for the
  // side's end. Download, Synchronize and EndStep join a pending side first.
  absl::StatusOr<bool> BeginSide(int64_t rows) override;
  absl::Status EndSide() override;
  absl::Status JoinSide() override;
  // 16 token rows, or STEPSERVE_SIDE_SHARED_MAX_ROWS (1-16, read once). Was 8 until session 40:
  // at 9-16 rows the shared expert then ran in line after the routed experts (~15 us of kernels a
  // MoE layer at 16 streams); beside them, 12 / 16 streams were 1.6% / 1.2% faster (H100).
  static int64_t SideBranchMaxRows();
  absl::Status QkNormRope(const TensorView& q, const TensorView& k, const QkNormRopeParams& params,
                          std::span<const int32_t> positions) override;
  absl::Status AppendKv(const TensorView& k, const TensorView& v, const AttentionBatch& batch,
                        const KvCacheView& cache) override;
  // One kernel (kernels/attention/kv_append_rope_cuda.h) where the shapes line up and
  // STEPSERVE_ROPE_APPEND is not 0 (default on); else QkNormRope and AppendKv.
  absl::Status QkNormRopeAppendKv(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const QkNormRopeParams& params, const AttentionBatch& batch,
                                  const KvCacheView& cache) override;
  absl::Status Attention(const TensorView& q, const AttentionBatch& batch, const KvCacheView& cache,
                         const AttentionParams& params, const TensorView& out) override;
  // The head gate (and its int8 rows for the O projection) in the split-K combine kernel when the
  // attention splits (decode at small batches); else Attention, then HeadGate.
  absl::Status AttentionHeadGate(const TensorView& q, const AttentionBatch& batch,
                                 const KvCacheView& cache, const AttentionParams& params,
                                 const TensorView& gate_logits, int64_t head_dim,
                                 const TensorView& out) override;
  absl::Status HeadGate(const TensorView& o, const TensorView& gate_logits,
                        int64_t head_dim) override;
  absl::Status SwiGlu(const TensorView& g, const TensorView& u, float limit,
                      const TensorView& z) override;
  absl::Status Add(const TensorView& a, const TensorView& b, const TensorView& y) override;
  absl::Status AddRmsNorm(const TensorView& h, const TensorView& delta, const WeightView& weight,
                          float eps, const TensorView& out) override;
  absl::Status RouterTopK(const TensorView& logits, const RouterParams& params,
                          std::span<int32_t> ids, std::span<float> weights) override;
  absl::Status MoeExperts(const TensorView& x, const ExpertWeights& experts,
                          std::span<const int32_t> ids, std::span<const float> weights,
                          int64_t top_k, const TensorView& y) override;
  // Up to kMoeGemvFusedMaxTokens tokens (fast mode) whose shared expert has the routed experts'
  // types: MoeGemvCuda's two-kernel path with the shared expert as one more slot per token
  // (kernels/matmul/moe_decode_cuda.h).
  absl::StatusOr<bool> MoeExpertsWithShared(const TensorView& x, const ExpertWeights& experts,
                                            const SharedExpertWeights& shared,
                                            std::span<const int32_t> ids,
                                            std::span<const float> weights, int64_t top_k,
                                            const TensorView& y) override;
  absl::Status LogitsTopK(const TensorView& logits, int32_t k,
                          const LogitsTopKOutputs& out) override;

  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  // Seconds the host has spent blocked waiting for the device (Download, Synchronize, staging
  // waits) since creation: a decode step whose wall time is mostly not this is host-bound.
  double host_blocked_seconds() const { return host_blocked_seconds_; }
  // Steps recorded as graphs and steps replayed from them since creation.
  uint64_t recorded_steps() const { return recorded_steps_; }
  uint64_t replayed_steps() const { return replayed_steps_; }
  // ConcurrentMatmuls' side stream: on by default since session 32 (H100, 24 layers, with the
  // side shared expert: batch 1 2.55 -> 2.45 ms, 4-8 streams -4%); STEPSERVE_CONCURRENT_MATMULS=0
  // turns it off at creation, this setter at any time (tests).
  void set_concurrent_matmuls(bool on) { concurrent_matmuls_ = on; }
  bool concurrent_matmuls() const { return concurrent_matmuls_; }
  // BeginSide's branches (the model puts the MoE layers' shared expert there): on by default
  // since session 32 (measured with the one above); STEPSERVE_SIDE_SHARED_EXPERT=0 at creation
  // turns them off, this setter at any time.
  void set_side_shared_expert(bool on) { side_shared_expert_ = on; }
  bool side_shared_expert() const { return side_shared_expert_; }
  // True between BeginSide and EndSide: ops pick the side's scratch areas.
  bool in_side() const { return in_side_; }
  // Step graphs recorded from now on keep their cudaGraph_t (needed by ArmGraphProfile).
  void set_keep_step_graphs(bool keep) { keep_step_graphs_ = keep; }
  // The next replayed step with a kept graph first runs ProfileGraphKernels on it with `replays`
  // timed replays per sample (graph_kernel_profile.h), then replays as usual; TakeGraphProfile
  // returns the result (nullopt while none has run since the last take).
  void ArmGraphProfile(int replays) { profile_replays_ = replays; }
  std::optional<absl::StatusOr<GraphKernelProfile>> TakeGraphProfile() {
    return std::exchange(graph_profile_, std::nullopt);
  }
  // Matmul / MoeExperts calls that took a norm's int8 activations (fused quantization) instead of
  // running the quantizer, since creation.
  uint64_t prequantized_uses() const { return prequantized_uses_; }

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
  // Fills fresh device memory with the STEPSERVE_CUDA_POISON byte, if set (cuda_backend.cc).
  absl::Status PoisonFresh(void* data, size_t bytes, const char* what);
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

  // Step recording. While a step is recorded the ops take their batch inputs from the step's
  // description (StepSeqList says which list a batch's seqs are; -1: not the step's) and stage
  // them with StageStepInput: the bytes go to the step's input area under `key` (one copy per key
  // per step) and `recipe` rebuilds them from a later step's description before a replay; a recipe
  // returns Aborted when the recorded launch shapes do not fit the new step (it is re-recorded).
  using StepInputRecipe =
      std::function<absl::Status(const StepDescription&, std::vector<uint8_t>*)>;
  bool recording_step() const { return recording_ != nullptr; }
  int StepSeqList(std::span<const SequenceSlice> seqs) const;
  const StepDescription& recording_description() const { return recording_step_; }
  absl::StatusOr<void*> StageStepInput(const std::string& key, const void* host, size_t bytes,
                                       const char* what, StepInputRecipe recipe);
  // The recipe of the step's positions (each must be >= 0).
  static absl::Status StepPositionsRecipe(const StepDescription& step, std::vector<uint8_t>* bytes);

  // Fused quantization (cuda_backend_pointwise.cc): a norm, head gate or SwiGLU of up to 16 rows
  // may also write its output as the GEMV's int8 activations, in both orders (natural; IQ4_XS's
  // pair order), and the Matmul / MoeExperts that read that output take them instead of running
  // the quantizer (and MoeGemvCuda's SwiGLU does the same for the expert down projection).
  // They stay valid for `x` only until an op that may write memory runs: every op but Matmul,
  // MoeExperts, RouterTopK and LogitsTopK (whose outputs must not overlap x), Download and
  // Synchronize calls ForgetPrequantized.
  struct PrequantizedX {
    const float* x = nullptr;
    int64_t rows = 0, cols = 0, stride = 0;
    const void* natural = nullptr;
    const void* pair = nullptr;
  };
  // The int8 activations of `x` in the order `pair_order` asks, or nullptr.
  const void* PrequantizedFor(const TensorView& x, bool pair_order) const;
  void ForgetPrequantized() { prequantized_ = {}; }
  // Forgets them if `y` (an op's output) overlaps the prequantized x.
  void ForgetPrequantizedIfWritten(const TensorView& y);
  // Where an op writing `rows` rows of `n` values also writes their int8 form: both null when
  // fused quantization is off, in exact mode, or when the fused kernel does not take the shapes
  // (`supported` false).
  absl::StatusOr<kernels::RmsNormQ8Outputs> FusedQ8Outputs(int64_t n, int64_t rows, bool supported);
  void RememberPrequantized(const TensorView& out, const kernels::RmsNormQ8Outputs& q8);

  // Attention with an optional head gate (gate_logits null: none); true when the gate went into
  // the attention's combine, false when the caller still has to apply it.
  struct GateRequest {
    const TensorView* gate_logits = nullptr;
    int64_t head_dim = 0;
  };
  absl::StatusOr<bool> RunAttention(const TensorView& q, const AttentionBatch& batch,
                                    const KvCacheView& cache, const AttentionParams& params,
                                    const TensorView& out, GateRequest gate);

  struct PointwiseState;  // cuda_backend_pointwise.cc
  struct AttentionState;  // cuda_backend_attention.cc
  struct MatmulState;     // cuda_backend_matmul.cc

 private:
  CudaBackend() = default;
  // MoeExperts at decode sizes without a host round trip (cuda_backend_matmul.cc).
  // `shared`: also the shared expert (MoeExpertsWithShared has checked that it may).
  absl::Status MoeExpertsOnDevice(const TensorView& x, const ExpertWeights& e,
                                  std::span<const int32_t> ids, std::span<const float> weights,
                                  int64_t top_k, const TensorView& y,
                                  const SharedExpertWeights* shared = nullptr);

  // The checked kernel arguments of QkNormRope / AppendKv with their batch inputs staged on the
  // device (nothing staged when there are no tokens); the ops launch them.
  absl::StatusOr<kernels::QkNormRopeCudaArgs> QkNormRopeArgs(const TensorView& q,
                                                             const TensorView& k,
                                                             const QkNormRopeParams& p,
                                                             std::span<const int32_t> positions);
  absl::StatusOr<kernels::KvAppendArgs> AppendKvArgs(const TensorView& k, const TensorView& v,
                                                     const AttentionBatch& batch,
                                                     const KvCacheView& cache);

  // Runs cudaStreamSynchronize / cudaEventSynchronize and adds the wait to host_blocked_seconds_.
  cudaError_t TimedWait(cudaStream_t stream, cudaEvent_t event);

  struct StepGraphs;  // cuda_backend_graph.cc
  struct StepGraph;
  // Ends a failed recording: discards the capture, marks the key as not recordable.
  absl::Status AbandonRecording(const std::string& why);

  int device_ = 0;
  double host_blocked_seconds_ = 0;
  bool graphs_enabled_ = true;
  // Bumped whenever a scratch area moves: recorded graphs hold its old address.
  uint64_t scratch_epoch_ = 0;
  uint64_t recorded_steps_ = 0;
  uint64_t replayed_steps_ = 0;
  std::shared_ptr<StepGraphs> graphs_;
  StepGraph* recording_ = nullptr;
  bool keep_step_graphs_ = false;
  bool concurrent_matmuls_ = false;
  cudaStream_t side_stream_ = nullptr;  // ConcurrentMatmuls' side stream and its fork / join
  cudaEvent_t side_fork_ = nullptr, side_join_ = nullptr;
  bool side_shared_expert_ = false;
  bool in_side_ = false;       // between BeginSide and EndSide (stream_ is then the side stream)
  bool side_pending_ = false;  // between EndSide and JoinSide
  // Creates the side stream and its fork / join events once.
  absl::Status EnsureSideStream();
  int profile_replays_ = 0;
  std::optional<absl::StatusOr<GraphKernelProfile>> graph_profile_;
  StepDescription recording_step_;
  bool exact_activations_ = false;  // BackendOptions::exact_activations
  cudaStream_t stream_ = nullptr;
  std::mutex placed_mu_;
  std::vector<void*> placed_;  // PlaceWeight copies, freed in the destructor
  std::atomic<uint64_t> weight_bytes_{0};
  std::shared_ptr<std::atomic<uint64_t>> buffer_bytes_ = std::make_shared<std::atomic<uint64_t>>(0);
  PrequantizedX prequantized_;
  PrequantizedX main_prequantized_;  // the main line's, kept while a side branch runs
  uint64_t prequantized_uses_ = 0;
  std::shared_ptr<PointwiseState> pointwise_;
  std::shared_ptr<AttentionState> attention_;
  std::shared_ptr<MatmulState> matmul_;
};

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_CUDA_CUDA_BACKEND_H_
