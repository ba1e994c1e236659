// The compute interface the model runs on: a short list of coarse ops over host (or, later,
// device) tensors. CPU implements it in engine/backend/cpu/ over kernels/; CUDA plugs in through
// RegisterBackend.
//
// Usage (one step of an attention block; shapes in ggml order [cols, rows]):
//   ASSIGN_OR_RETURN(std::unique_ptr<Backend> ops, CreateBackend("cpu", {.num_threads = 8}));
//   RETURN_IF_ERROR(ops->Embed(tok_embd, ids, h));                 // h: [d, T]
//   RETURN_IF_ERROR(ops->RmsNorm(h, attn_norm, eps, a));
//   RETURN_IF_ERROR(ops->Matmul(a, wq, q));                        // q: [H*Dh, T]; also k, v, g
//   RETURN_IF_ERROR(ops->QkNormRope(q, k, rope_params, positions));  // in place
//   RETURN_IF_ERROR(ops->AppendKv(k, v, batch, cache));            // before Attention
//   (or both in one: ops->QkNormRopeAppendKv(q, k, v, rope_params, batch, cache))
//   RETURN_IF_ERROR(ops->Attention(q, batch, cache, {.window = W, .scale = kappa}, o));
//   RETURN_IF_ERROR(ops->HeadGate(o, g, Dh));                      // in place
//   RETURN_IF_ERROR(ops->Matmul(o, wo, attn_out));
//   RETURN_IF_ERROR(ops->Add(h, attn_out, h));
//   MoE: Matmul(f, ffn_gate_inp, logits); RouterTopK(logits, ...); MoeExperts(f, ..., y) adds
//   into y; dense FFN / shared expert: Matmul, Matmul, SwiGlu, Matmul, Add.
//
// Every op validates shapes and returns InvalidArgument / OutOfRange naming the op and operand;
// nothing is resized or truncated silently. Outputs never alias inputs unless the op says so.
// A Backend instance is driven by one thread at a time (the engine thread); it parallelises
// internally.
#ifndef STEPSERVE_ENGINE_BACKEND_BACKEND_H_
#define STEPSERVE_ENGINE_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/quant/ggml_type.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/moe/moe.h"
#include "kernels/sampling/logits_topk.h"

namespace stepserve {

// An activation matrix: ne[0] contiguous elements per row, ne[1] * ne[2] * ne[3] rows, each
// `row_stride` bytes apart (0 = packed). Activations are F32.
struct TensorView {
  void* data = nullptr;
  GgmlType type = GgmlType::kF32;
  int64_t ne[4] = {0, 1, 1, 1};
  int64_t row_stride = 0;

  // A packed (or strided) F32 matrix of `rows` rows of `cols` floats.
  static TensorView F32(float* data, int64_t cols, int64_t rows, int64_t row_stride_floats = 0) {
    TensorView view;
    view.data = data;
    view.ne[0] = cols;
    view.ne[1] = rows;
    view.row_stride = (row_stride_floats > 0 ? row_stride_floats : cols) * 4;
    return view;
  }
  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  float* f32() const { return static_cast<float*>(data); }
  int64_t stride_floats() const { return (row_stride > 0 ? row_stride : ne[0] * 4) / 4; }
};

// A weight as stored in GGUF: ne = [in, out, (experts)], rows of blocks `row_stride` bytes apart
// (0 = RowBytes(type, ne[0])); a 3-D tensor's matrices are ne[1] * row_stride bytes apart.
struct WeightView {
  const void* data = nullptr;
  GgmlType type = GgmlType::kF32;
  int64_t ne[4] = {0, 1, 1, 1};
  int64_t row_stride = 0;

  int64_t row_bytes() const { return row_stride > 0 ? row_stride : RowBytes(type, ne[0]); }
};

using KvDtype = kernels::KvDtype;
// One layer's paged KV cache (layout in kernels/attention/paged_attention.h).
using KvCacheView = kernels::PagedKv;

// One sequence of a ragged batch: its query rows [q_begin, q_begin + q_count), how many tokens
// its cache holds after this step's append, and its block table (page ids, one per block_size
// positions).
struct SequenceSlice {
  int64_t q_begin = 0;
  int64_t q_count = 0;
  int64_t context_len = 0;
  std::span<const int32_t> block_table;
};

struct AttentionBatch {
  std::span<const int32_t> positions;  // one absolute position per query row
  std::span<const SequenceSlice> seqs;
};

struct AttentionParams {
  int64_t window = 0;  // sliding window W on SWA layers, 0 on full layers
  float scale = 0.0f;  // kappa = 1/sqrt(Dh)
};

// q/k per-head RMSNorm then partial NeoX RoPE (spec 4.4 steps 2-3).
struct QkNormRopeParams {
  int64_t head_dim = 0;
  WeightView q_norm;  // F32 [head_dim]
  WeightView k_norm;  // F32 [head_dim]
  float eps = 1e-5f;
  int64_t n_rot = 0;                         // rotated dims per head (n_rot(l))
  float base = 10000.0f;                     // rope_base(l)
  std::span<const float> freq_factors = {};  // rope_freqs on full layers; empty on SWA layers
};

using GatingFunc = kernels::GatingFunc;

struct RouterParams {
  int64_t top_k = 0;
  GatingFunc gating = GatingFunc::kSigmoid;
  std::span<const float> bias = {};  // exp_probs_b, [n_experts] or empty
  bool normalize = false;            // expert_weights_norm
  float scale = 1.0f;                // expert_weights_scale (0 or 1: skipped)
};

// The routed experts of one layer: 3-D tensors gate/up ne = [d, ff, E], down ne = [ff, d, E].
struct ExpertWeights {
  WeightView gate;
  WeightView up;
  WeightView down;
  float limit = 0.0f;  // swiglu_clamp_exp[l]
};

// A MoE layer's always-on shared expert (2-D gate / up [d, n_ff_sh], down [n_ff_sh, d]).
struct SharedExpertWeights {
  WeightView gate;
  WeightView up;
  WeightView down;
  float limit = 0.0f;  // swiglu_clamp_shexp[l]
};

// One product of Backend::ConcurrentMatmuls: y = x * W^T, as Matmul.
struct MatmulJob {
  TensorView x;
  WeightView w;
  TensorView y;
};

// Memory the ops read and write, owned by the backend that allocated it. On the CPU backend it is
// host memory; on an accelerator it is device memory the host must never dereference. Move-only;
// released when destroyed.
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(void* data, size_t bytes, std::function<void(void*)> release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  BackendBuffer(BackendBuffer&& other) noexcept { *this = std::move(other); }
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = other.data_;
      bytes_ = other.bytes_;
      release_ = std::move(other.release_);
      other.data_ = nullptr;
      other.bytes_ = 0;
      other.release_ = nullptr;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { Reset(); }

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }
  void Reset() {
    if (data_ != nullptr && release_) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
    release_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::function<void(void*)> release_;
};

struct BackendMemoryInfo {
  uint64_t total_bytes = 0;   // device capacity (CPU: physical RAM)
  uint64_t free_bytes = 0;    // what the device reports free now
  uint64_t weight_bytes = 0;  // held by PlaceWeight copies (CPU: 0, weights stay in the mmap)
  uint64_t buffer_bytes = 0;  // held by live Allocate buffers
};

struct BackendOptions {
  int num_threads = 0;  // CPU worker threads including the caller; 0 = hardware concurrency
  int device = 0;       // device index for accelerator backends
  // Accelerators: quantized matmuls on few rows keep activations in F32 (exact up to summation
  // order) instead of rounding them to int8 per 32 values (~5e-3 relative per product, ~1e-2
  // through an expert FFN). Slower; for accuracy tests and debugging. CPU: always exact.
  bool exact_activations = false;
};

// Outputs of Backend::LogitsTopK, backend memory; any may be null (not computed).
struct LogitsTopKOutputs {
  int32_t* ids = nullptr;        // [rows][k]
  float* values = nullptr;       // [rows][k]
  int32_t* argmax = nullptr;     // [rows]
  float* log_sum_exp = nullptr;  // [rows]
};

// One step's host-side batch description, handed to BeginStep before the step's ops so an
// accelerator can record the ops once and replay them on later steps of the same shape. `key`
// identifies everything else the ops' launch shapes depend on (row counts, buffers, which outputs);
// the ops of a recorded step must take their ids, positions and sequence lists from these spans.
struct StepDescription {
  uint64_t key = 0;
  std::span<const int32_t> ids;        // Embed's token ids
  std::span<const int32_t> positions;  // QkNormRope's positions and AttentionBatch::positions
  std::span<const SequenceSlice> seq_lists[2];  // the AttentionBatch::seqs lists the step uses
};

// How the ops of a step are run (BeginStep).
enum class StepMode {
  kEager,     // enqueue the ops as usual, then call EndStep
  kRecord,    // enqueue the ops (they are recorded, not run), then call EndStep, which runs them
  kReplayed,  // the step has been enqueued from an earlier recording: enqueue no ops, no EndStep
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Whether AppendKv / Attention take a cache of this element type (KvStorage::Create checks it,
  // so an unsupported --kv-dtype fails at load with the backend's name).
  virtual bool SupportsKvDtype(KvDtype dtype) const {
    return dtype == KvDtype::kF32 || dtype == KvDtype::kF16;
  }

  // ---- Memory (see "Where operands live" below). ----
  // True when backend memory is host memory (CPU): the model may read it directly and skip copies.
  virtual bool host_visible() const = 0;
  // `bytes` of uninitialised backend memory, 256-byte aligned. ResourceExhausted saying how many
  // bytes were asked for and how many are free when it does not fit.
  virtual absl::StatusOr<BackendBuffer> Allocate(size_t bytes) = 0;
  // Host -> backend memory. Returns once `host` may be reused.
  virtual absl::Status Upload(const void* host, void* dst, size_t bytes) = 0;
  // Backend -> host memory, after every op enqueued before it has finished.
  virtual absl::Status Download(const void* src, void* host, size_t bytes) = 0;
  // Backend -> backend memory, ordered with the ops (may be asynchronous).
  virtual absl::Status Copy(const void* src, void* dst, size_t bytes) = 0;
  // Sets `bytes` of backend memory to zero, ordered with the ops.
  virtual absl::Status Zero(void* dst, size_t bytes) = 0;
  // Waits for every enqueued op; surfaces asynchronous kernel errors as Internal.
  virtual absl::Status Synchronize() = 0;
  // Makes a GGUF weight (host view into the mmapped file) readable by the ops. CPU: returns `host`
  // unchanged. Accelerators copy it into memory the backend owns until it is destroyed, possibly
  // with padded rows (row_stride), and return the view of the copy; ResourceExhausted naming
  // `name` and the missing bytes when it does not fit.
  virtual absl::StatusOr<WeightView> PlaceWeight(const WeightView& host, std::string_view name) = 0;
  virtual BackendMemoryInfo memory_info() const = 0;

  // ---- Step recording (optional; the CPU runs every step eagerly). ----
  // Called before a step's first op. On kReplayed the backend has uploaded the step's inputs and
  // enqueued the recorded ops: the caller goes straight to its downloads. Errors are the ops'
  // own (a bad position or block table), as the eager step would give them.
  virtual absl::StatusOr<StepMode> BeginStep(const StepDescription& step) {
    (void)step;
    return StepMode::kEager;
  }
  // Ends a kEager or kRecord step; `enqueued_all` is false when an op failed. After kRecord it runs
  // the recording. When a kRecord step's op failed or EndStep returns Unavailable, nothing of the
  // step ran: the caller enqueues the ops again right away (they run eagerly), which also reports
  // a genuine input error as the eager step does. The backend decides whether later steps with
  // that key try recording again.
  virtual absl::Status EndStep(bool enqueued_all) {
    (void)enqueued_all;
    return absl::OkStatus();
  }

  // ---- Ops. ----
  // Where operands live: TensorView / WeightView data, RouterParams::bias,
  // QkNormRopeParams::freq_factors and the ids / weights of RouterTopK and MoeExperts are backend
  // memory (placed weights or Allocate buffers). The token ids of Embed, the positions of
  // QkNormRope and every field of AttentionBatch (positions, block tables) are host memory: they
  // describe the batch and are uploaded by accelerator backends as needed.

  // out[t] = dequantized row ids[t] of `table` (ne = [d, n_vocab]); out: [d, ids.size()].
  virtual absl::Status Embed(const WeightView& table, std::span<const int32_t> ids,
                             const TensorView& out) = 0;
  // out = RMSNorm(x; weight) per row; weight F32 [cols]. out may equal x.
  virtual absl::Status RmsNorm(const TensorView& x, const WeightView& weight, float eps,
                               const TensorView& out) = 0;
  // y = x * W^T; x: [in, T], W: ne = [in, out] any dequantizable type, y: [out, T].
  virtual absl::Status Matmul(const TensorView& x, const WeightView& w, const TensorView& y) = 0;
  // A side branch: the ops enqueued between BeginSide (when it returns true) and EndSide run after
  // everything enqueued before BeginSide, and the ops enqueued after EndSide (the main line) need
  // not wait for them - until JoinSide, after which every op does. The side must not write what
  // the main line reads or writes before the join, nor read what it writes. `rows`: the token
  // rows of the ops (a backend may branch only where its paths for them share no scratch).
  // Default (a backend whose ops run in order): false, and EndSide / JoinSide do nothing.
  virtual absl::StatusOr<bool> BeginSide(int64_t rows) {
    (void)rows;
    return false;
  }
  virtual absl::Status EndSide() { return absl::OkStatus(); }
  virtual absl::Status JoinSide() { return absl::OkStatus(); }
  // Every job's Matmul, the jobs independent of each other (no job writes what another reads):
  // an accelerator may run them side by side (the CUDA backend: q/k/gate and attn_v when their
  // types differ). The results are those of the Matmuls in order; so is this default.
  virtual absl::Status ConcurrentMatmuls(std::span<const MatmulJob> jobs) {
    for (const MatmulJob& job : jobs) {
      absl::Status status = Matmul(job.x, job.w, job.y);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
  // In place on q: [H*Dh, T] and k: [G*Dh, T] (k may be empty: data == nullptr).
  virtual absl::Status QkNormRope(const TensorView& q, const TensorView& k,
                                  const QkNormRopeParams& params,
                                  std::span<const int32_t> positions) = 0;
  // Writes k, v rows ([G*Dh, T]) at their positions into the sequences' pages.
  virtual absl::Status AppendKv(const TensorView& k, const TensorView& v,
                                const AttentionBatch& batch, const KvCacheView& cache) = 0;
  // QkNormRope(q, k, params, batch.positions) then AppendKv(k, v, batch, cache), which a backend
  // may do in one pass (the same q, k and cache contents). By default the two ops.
  virtual absl::Status QkNormRopeAppendKv(const TensorView& q, const TensorView& k,
                                          const TensorView& v, const QkNormRopeParams& params,
                                          const AttentionBatch& batch, const KvCacheView& cache) {
    if (absl::Status status = QkNormRope(q, k, params, batch.positions); !status.ok()) {
      return status;
    }
    return AppendKv(k, v, batch, cache);
  }
  // out: [H*Dh, T] = softmax(q k^T * scale) v over each row's visible cached positions.
  virtual absl::Status Attention(const TensorView& q, const AttentionBatch& batch,
                                 const KvCacheView& cache, const AttentionParams& params,
                                 const TensorView& out) = 0;
  // In place: o[:, h] *= sigmoid(gate_logits[h]); o: [H*Dh, T], gate_logits: [H, T].
  virtual absl::Status HeadGate(const TensorView& o, const TensorView& gate_logits,
                                int64_t head_dim) = 0;
  // Attention(q, batch, cache, params, out) then HeadGate(out, gate_logits, head_dim), which a
  // backend may do in one pass (the same out). By default the two ops.
  virtual absl::Status AttentionHeadGate(const TensorView& q, const AttentionBatch& batch,
                                         const KvCacheView& cache, const AttentionParams& params,
                                         const TensorView& gate_logits, int64_t head_dim,
                                         const TensorView& out) {
    if (absl::Status status = Attention(q, batch, cache, params, out); !status.ok()) return status;
    return HeadGate(out, gate_logits, head_dim);
  }
  // z = clamped SwiGLU(g, u) (spec 4.5); z may equal g or u.
  virtual absl::Status SwiGlu(const TensorView& g, const TensorView& u, float limit,
                              const TensorView& z) = 0;
  // y = a + b; y may equal a or b.
  virtual absl::Status Add(const TensorView& a, const TensorView& b, const TensorView& y) = 0;
  // The residual update fused with the next norm: h += delta, then out = RMSNorm(h; weight). out
  // must not alias h or delta. By default the two ops; a backend may do it in one pass (the same
  // float sums as Add).
  virtual absl::Status AddRmsNorm(const TensorView& h, const TensorView& delta,
                                  const WeightView& weight, float eps, const TensorView& out) {
    if (absl::Status status = Add(h, delta, h); !status.ok()) return status;
    return RmsNorm(h, weight, eps, out);
  }
  // Top-k routing from router logits [E, T]; ids and weights hold T * top_k entries.
  virtual absl::Status RouterTopK(const TensorView& logits, const RouterParams& params,
                                  std::span<int32_t> ids, std::span<float> weights) = 0;
  // y[t] += sum_k weights[t][k] * Expert_{ids[t][k]}(x[t]); x: [d, T], y: [d, T].
  virtual absl::Status MoeExperts(const TensorView& x, const ExpertWeights& experts,
                                  std::span<const int32_t> ids, std::span<const float> weights,
                                  int64_t top_k, const TensorView& y) = 0;
  // MoeExperts plus the shared expert in the same pass where the backend fuses the two:
  // y[t] += sum_k weights[t][k] * Expert_{ids[t][k]}(x[t]) + Shared(x[t]), and true. False, with
  // nothing done, where it does not (the default): the caller then runs MoeExperts and the shared
  // expert's FFN itself.
  virtual absl::StatusOr<bool> MoeExpertsWithShared(const TensorView& x,
                                                    const ExpertWeights& experts,
                                                    const SharedExpertWeights& shared,
                                                    std::span<const int32_t> ids,
                                                    std::span<const float> weights, int64_t top_k,
                                                    const TensorView& y) {
    return false;
  }
  // Per row of logits [vocab, T]: the k (1..256) largest entries (ids and values, largest first,
  // ties to the lower id), the argmax and the log-sum-exp, as kernels/sampling/logits_topk.h
  // defines them; so a decode step can bring back a few numbers per row instead of the row.
  virtual absl::Status LogitsTopK(const TensorView& logits, int32_t k,
                                  const LogitsTopKOutputs& out) = 0;
};

using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions& options)>;

// Adds a backend under `name`; AlreadyExists if taken. "cpu" is always registered.
absl::Status RegisterBackend(std::string_view name, BackendFactory factory);
// NotFound (listing the known names) for an unknown name.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name,
                                                       const BackendOptions& options = {});
std::vector<std::string> RegisteredBackends();

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_BACKEND_H_
