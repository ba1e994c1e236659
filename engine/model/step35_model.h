// The step35 forward pass (spec: shared/spec/step35-architecture.md sections 4 and 5) over the
// Backend ops, for a ragged batch of sequences against a paged KV cache.
//
//   ASSIGN_OR_RETURN(auto model, Step35Model::Load("model.gguf", {.backend = "cuda"}));
//   ASSIGN_OR_RETURN(KvStorage kv, KvStorage::Create(model->backend(), model->hparams(), {...}));
//   Step35Model::Sequence seq{.tokens = prompt, .start_pos = 0, .full_table = ...,
//                             .swa_table = ..., .logit_rows = 1};
//   ForwardOutput out;
//   RETURN_IF_ERROR(model->Forward({&seq, 1}, kv, &out));  // out.logits: [1][n_vocab]
//
// The caller (engine, scheduler) owns block tables: they must cover start_pos + tokens.size()
// positions. The MTP heads (ForwardMtp) run layer n_layer + head with that layer's own cache.
//
// Memory: weights are placed on the backend at load, activations live in grow-only backend
// buffers reused across steps, and only the outputs (logits, hidden on request) come back to the
// host. On a host-visible backend (CPU) nothing is copied that the ops can read in place.
#ifndef STEPSERVE_ENGINE_MODEL_STEP35_MODEL_H_
#define STEPSERVE_ENGINE_MODEL_STEP35_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/model/hparams.h"
#include "engine/model/kv_storage.h"
#include "engine/model/placed_weights.h"
#include "engine/model/weights.h"

namespace stepserve::model {

struct LoadOptions {
  std::string backend = "cpu";  // a RegisteredBackends() name
  int device = 0;               // accelerator index (ignored by the CPU backend)
  // Accelerators: F32 activations into quantized matmuls (BackendOptions::exact_activations);
  // for accuracy comparisons, slower.
  bool exact_activations = false;
  int num_threads = 0;  // 0: all cores
  bool load_mtp = true;
  LoadProgress progress;  // optional: after each weight placed on the backend
  WeightPlacer placer;    // optional: replaces Backend::PlaceWeight (placed_weights.h)
  // Place the matrices that share an input as one (FusedWeight: q/k/v/gate of the same type,
  // FFN and shared-expert gate/up) and run one Matmul for them: on an accelerator one launch and
  // one activation quantization instead of several. Results are identical either way (each output
  // row is computed alone; CPU-tested, and CUDA-tested in model_cuda_test). Auto fuses on every
  // backend but the CPU, where fusing would copy weights out of the mapping.
  enum class Fusion { kAuto, kOn, kOff };
  Fusion fuse_projections = Fusion::kAuto;
};

// One sequence's rows in a batch.
struct BatchSequence {
  std::span<const int32_t> tokens;  // new tokens, at positions start_pos, start_pos + 1, ...
  int64_t start_pos = 0;
  std::span<const int32_t> full_table;  // block tables covering start_pos + tokens.size()
  std::span<const int32_t> swa_table;
  int32_t logit_rows = 0;  // logits for this many trailing rows (0 = none)
  // MTP only: the hidden vector paired with each token (h of the previous position),
  // tokens.size() rows of n_embd.
  std::span<const float> mtp_hidden;
};

// Per logits row, computed where the logits are (Backend::LogitsTopK): the k largest entries
// (largest first, ties to the lower id), the argmax and the log-sum-exp.
struct LogitCandidates {
  int32_t k = 0;                   // 0: not computed
  std::vector<int32_t> ids;        // [rows][k]
  std::vector<float> values;       // [rows][k]
  std::vector<int32_t> argmax;     // [rows]
  std::vector<float> log_sum_exp;  // [rows]
};

struct ForwardOutput {
  std::vector<float> logits;   // [sum of logit_rows][n_vocab], batch order
  std::vector<float> hidden;   // [rows][n_embd] pre-norm final hidden state of every row
  LogitCandidates candidates;  // with ForwardOptions::logit_top_k, instead of logits
};

struct ForwardOptions {
  // Also return ForwardOutput::hidden (MTP drafting feeds it to the heads). Off by default: plain
  // decoding does not need it, and on an accelerator it would cost a transfer every step.
  bool want_hidden = false;
  // > 0 (at most 256): return ForwardOutput::candidates with this k and no logits, so only a few
  // numbers per row leave the device (greedy decoding and logprobs need no more).
  int32_t logit_top_k = 0;
};

class Step35Model {
 public:
  static absl::StatusOr<std::unique_ptr<Step35Model>> Load(const std::string& path,
                                                           const LoadOptions& options);
  // Takes ownership of an opened file (tests build models in memory-mapped temp files).
  static absl::StatusOr<std::unique_ptr<Step35Model>> FromFile(std::unique_ptr<gguf::GgufFile> file,
                                                               const LoadOptions& options);

  // Trunk forward: embeds, runs layers [0, n_layer), fills `out.logits` for the requested rows
  // and, with options.want_hidden, `out.hidden` for every row (otherwise it is left empty).
  absl::Status Forward(std::span<const BatchSequence> batch, KvStorage& kv, ForwardOutput* out,
                       const ForwardOptions& options = {});

  // MTP head `head` (layer n_layer + head, spec 5.2): per row e = RMSNorm(E[x]; enorm),
  // g = RMSNorm(h; hnorm), u = W_eh [e; g], then the layer; out.hidden = the head's output o,
  // out.logits = shared head over RMSNorm(o; shared_head_norm) for the requested rows. The hidden
  // output is always returned: the next head of the chain consumes it.
  absl::Status ForwardMtp(int head, std::span<const BatchSequence> batch, KvStorage& kv,
                          ForwardOutput* out);

  // Optional per-layer timing for benchmarks (bench/engine/bench_cpu_layers): called after each
  // layer of Forward / ForwardMtp with the wall-clock seconds of its attention and FFN halves.
  // Unset by default, which costs nothing; when set, asynchronous backends are synchronised at
  // each half so the times bracket the work.
  using LayerTimer = std::function<void(int layer, double attention_seconds, double ffn_seconds)>;
  void set_layer_timer(LayerTimer timer) { layer_timer_ = std::move(timer); }

  const Hparams& hparams() const { return hparams_; }
  const ModelWeights& weights() const { return weights_; }
  const PlacedWeights& placed() const { return placed_; }
  const gguf::GgufFile& file() const { return *file_; }
  // The backend the model runs on: KvStorage::Create takes it, so the cache lives beside the
  // weights.
  Backend& backend() const { return *backend_; }
  int64_t n_vocab() const { return weights_.n_vocab; }
  int num_mtp_heads() const { return weights_.has_mtp ? hparams_.n_nextn : 0; }

  ~Step35Model();

 private:
  Step35Model();
  struct Rows;         // activations, reused across calls (the model is driven by one thread)
  void SizeScratch();  // widths of the activation buffers, from the bound layers
  // The FusedWeight groups of this file (LoadOptions::fuse_projections).
  std::vector<std::vector<Tensor>> FuseGroups() const;
  absl::Status PrepareRows(std::span<const BatchSequence> batch, Rows& rows);
  absl::Status EnsureRowCapacity(int64_t n, Rows& rows);
  absl::Status RunLayer(int il, Rows& rows, std::span<const BatchSequence> batch, KvStorage& kv);
  absl::Status Attention(int il, Rows& rows, KvStorage& kv);
  // out = RMSNorm(h; weight), first adding the pending residual update into h (one fused op).
  absl::Status NormResidual(Rows& rows, Tensor weight, const TensorView& out);
  // Adds the pending residual update into h (before h is read other than by a layer's norm).
  absl::Status FlushResidual(Rows& rows);
  absl::Status FeedForward(int il, Rows& rows);
  // Which rows get logits: m rows starting at row `first` of h, or gathered when not contiguous.
  struct LogitPlan {
    int64_t m = 0;
    int64_t first = -1;
    bool contiguous = true;
    int32_t top_k = 0;  // ForwardOptions::logit_top_k
  };
  absl::StatusOr<LogitPlan> PlanLogits(Rows& rows, std::span<const BatchSequence> batch,
                                       int32_t top_k = 0);
  absl::Status EnqueueLogits(Rows& rows, std::span<const BatchSequence> batch,
                             const LogitPlan& plan, Tensor norm, Tensor head, ForwardOutput* out);
  absl::Status DownloadLogits(Rows& rows, const LogitPlan& plan, ForwardOutput* out);
  static size_t CandidateBytes(const LogitPlan& plan);
  // Runs `body` (the step's ops) then the logits, through the backend's step recording when the
  // step is a decode step.
  absl::Status RunStep(Rows& rows, std::span<const BatchSequence> batch, KvStorage& kv,
                       const LogitPlan& plan, Tensor norm, Tensor head, ForwardOutput* out,
                       const std::function<absl::Status()>& body);
  absl::Status DownloadHidden(const Rows& rows, ForwardOutput* out);
  absl::Status TimeLayerHalf();

  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<Backend> backend_;
  Hparams hparams_;
  ModelWeights weights_;
  PlacedWeights placed_;               // weights_ on the backend
  std::span<const float> rope_freqs_;  // placed; n_rot_max / 2 entries, or empty
  std::unique_ptr<Rows> rows_;         // scratch: no per-step reallocation of activation buffers
  LayerTimer layer_timer_;
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_STEP35_MODEL_H_
