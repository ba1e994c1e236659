#include "engine/model/step35_model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/base/check.h"
#include "engine/base/status_macros.h"
#include "engine/model/step35_rows.h"

namespace stepserve::model {
namespace {

std::span<const float> HostF32(Tensor t) {
  if (t == nullptr) return {};
  return {static_cast<const float*>(static_cast<const void*>(t->data)),
          static_cast<size_t>(t->n_elements())};
}

}  // namespace

Step35Model::Step35Model() : rows_(std::make_unique<Rows>()) {}
Step35Model::~Step35Model() = default;

absl::StatusOr<std::unique_ptr<Step35Model>> Step35Model::Load(const std::string& path,
                                                               const LoadOptions& options) {
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return FromFile(*std::move(file), options);
}

absl::StatusOr<std::unique_ptr<Step35Model>> Step35Model::FromFile(
    std::unique_ptr<gguf::GgufFile> file, const LoadOptions& options) {
  std::unique_ptr<Step35Model> model(new Step35Model());
  model->file_ = std::move(file);
  ASSIGN_OR_RETURN(model->hparams_, Hparams::FromMetadata(model->file_->metadata()));
  BindOptions bind;
  bind.load_mtp = options.load_mtp;
  ASSIGN_OR_RETURN(model->weights_, ModelWeights::Bind(*model->file_, model->hparams_, bind));
  // Step-5 files carry sparse-indexer tensors; until that path exists they run the dense
  // attention fallback (spec 6.3), which Summary() reports.
  if (model->weights_.has_sparse_indexer) model->hparams_.step5_dense_fallback = true;
  for (float factor : HostF32(model->weights_.rope_freqs)) {
    if (!(factor > 0) || !std::isfinite(factor)) {
      return absl::InvalidArgumentError(
          "tensor rope_freqs.weight holds a non-positive or non-finite factor");
    }
  }
  ASSIGN_OR_RETURN(
      model->backend_,
      CreateBackend(options.backend, {.num_threads = options.num_threads,
                                      .device = options.device,
                                      .exact_activations = options.exact_activations}));
  // Auto fuses on an accelerator (measured on the H200: 45-layer IQ4_XS batch-1 decode 114.1 ->
  // 121.5 tok/s, docs/cuda-engine.md); on the CPU fusing would copy weights out of the mapping.
  const bool fuse =
      options.fuse_projections == LoadOptions::Fusion::kOn ||
      (options.fuse_projections == LoadOptions::Fusion::kAuto && options.backend != "cpu");
  std::vector<std::vector<Tensor>> groups;
  if (fuse) groups = model->FuseGroups();
  ASSIGN_OR_RETURN(model->placed_,
                   PlacedWeights::Place(*model->backend_, *model->file_, model->weights_,
                                        options.progress, options.placer, groups));
  model->rope_freqs_ = model->placed_.F32(model->weights_.rope_freqs);
  model->SizeScratch();
  return model;
}

std::vector<std::vector<Tensor>> Step35Model::FuseGroups() const {
  std::vector<std::vector<Tensor>> groups;
  for (int il = 0; il < hparams_.n_layer_all; ++il) {
    const LayerWeights& w = weights_.layers[il];
    if (!w.is_bound()) continue;
    // q first (its rows start the fused output), then whichever of k, v, gate share its type.
    std::vector<Tensor> attention = {w.attn_q};
    for (Tensor t : {w.attn_k, w.attn_v, w.attn_gate}) {
      if (t != nullptr && w.attn_q != nullptr && t->type == w.attn_q->type) attention.push_back(t);
    }
    if (attention.size() > 1) groups.push_back(attention);
    for (auto [gate, up] :
         {std::pair{w.ffn_gate, w.ffn_up}, std::pair{w.ffn_gate_shexp, w.ffn_up_shexp}}) {
      if (gate != nullptr && up != nullptr && gate->type == up->type) groups.push_back({gate, up});
    }
  }
  return groups;
}

void Step35Model::SizeScratch() {
  Rows& rows = *rows_;
  const int64_t d = hparams_.n_embd;
  for (Slot* slot : {&rows.h, &rows.a, &rows.tmp, &rows.f}) slot->width = d;
  for (int il = 0; il < hparams_.n_layer_all; ++il) {
    const LayerWeights& w = weights_.layers[il];
    if (!w.is_bound()) continue;
    const LayerHparams& l = hparams_.layers[il];
    rows.q.width = std::max<int64_t>(rows.q.width, l.q_dim());
    rows.k.width = std::max<int64_t>(rows.k.width, l.kv_dim_k());
    rows.v.width = std::max<int64_t>(rows.v.width, l.kv_dim_v());
    rows.o.width = std::max(rows.o.width, int64_t{l.n_head} * l.head_dim_v);
    if (w.attn_gate != nullptr) rows.gate.width = std::max<int64_t>(rows.gate.width, l.n_head);
    for (Tensor gate : {w.ffn_gate, w.ffn_gate_shexp}) {
      if (gate == nullptr) continue;
      rows.ff_g.width = std::max(rows.ff_g.width, gate->ne[1]);
      rows.ff_u.width = rows.ff_g.width;
    }
    if (w.is_moe()) {
      rows.router.width = hparams_.n_expert;
      rows.expert_ids.width = hparams_.n_expert_used;
      rows.expert_weights.width = hparams_.n_expert_used;
    }
    if (w.nextn_eh_proj != nullptr) rows.cat.width = 2 * d;
    for (Tensor first : {w.attn_q, w.ffn_gate, w.ffn_gate_shexp}) {
      if (const FusedWeight* fused = placed_.Fused(first); fused != nullptr) {
        rows.fused.width = std::max(rows.fused.width, fused->rows);
      }
    }
  }
}

absl::Status Step35Model::EnsureRowCapacity(int64_t n, Rows& rows) {
  if (n <= rows.capacity) return absl::OkStatus();
  // Doubling keeps the number of reallocations logarithmic while prefill chunk sizes climb.
  const int64_t capacity = std::max(n, 2 * rows.capacity);
  // Earlier steps may still be reading the old buffers on an asynchronous backend.
  if (rows.capacity > 0) RETURN_IF_ERROR(backend_->Synchronize());
  rows.capacity = 0;
  for (Slot* slot : rows.slots()) slot->buffer.Reset();  // free first: lower peak memory
  for (Slot* slot : rows.slots()) {
    if (slot->width == 0) continue;
    const size_t bytes = static_cast<size_t>(capacity * slot->width) * 4;
    absl::StatusOr<BackendBuffer> buffer = backend_->Allocate(bytes);
    if (!buffer.ok()) {
      return absl::Status(buffer.status().code(),
                          absl::StrFormat("activation buffers for %d rows: %s", capacity,
                                          buffer.status().message()));
    }
    slot->buffer = *std::move(buffer);
  }
  rows.capacity = capacity;
  return absl::OkStatus();
}

absl::Status Step35Model::PrepareRows(std::span<const BatchSequence> batch, Rows& rows) {
  rows.n = 0;
  rows.pending = {};  // a failed step may have left one
  rows.ids.clear();
  rows.positions.clear();
  rows.full_seqs.clear();
  rows.swa_seqs.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    const BatchSequence& seq = batch[s];
    const int64_t count = static_cast<int64_t>(seq.tokens.size());
    if (count == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("batch sequence %d has no tokens", s));
    }
    if (seq.start_pos < 0 || seq.logit_rows < 0 || seq.logit_rows > count) {
      return absl::InvalidArgumentError(
          absl::StrFormat("batch sequence %d: start position %d, %d logit rows for %d tokens", s,
                          seq.start_pos, seq.logit_rows, count));
    }
    for (int32_t token : seq.tokens) {
      if (token < 0 || token >= weights_.n_vocab) {
        return absl::OutOfRangeError(
            absl::StrFormat("batch sequence %d: token id %d is outside the vocabulary (%d)", s,
                            token, weights_.n_vocab));
      }
      rows.ids.push_back(token);
    }
    for (int64_t i = 0; i < count; ++i) {
      rows.positions.push_back(static_cast<int32_t>(seq.start_pos + i));
    }
    SequenceSlice slice;
    slice.q_begin = rows.n;
    slice.q_count = count;
    slice.context_len = seq.start_pos + count;
    slice.block_table = seq.full_table;
    rows.full_seqs.push_back(slice);
    slice.block_table = seq.swa_table;
    rows.swa_seqs.push_back(slice);
    rows.n += count;
  }
  return EnsureRowCapacity(rows.n, rows);
}

absl::Status Step35Model::NormResidual(Rows& rows, Tensor weight, const TensorView& out) {
  const TensorView h = rows.Mat(rows.h, hparams_.n_embd, rows.n);
  if (rows.pending.data == nullptr) {
    return backend_->RmsNorm(h, placed_[weight], hparams_.rms_eps, out);
  }
  const TensorView pending = rows.pending;
  rows.pending = {};
  return backend_->AddRmsNorm(h, pending, placed_[weight], hparams_.rms_eps, out);
}

absl::Status Step35Model::FlushResidual(Rows& rows) {
  if (rows.pending.data == nullptr) return absl::OkStatus();
  const TensorView h = rows.Mat(rows.h, hparams_.n_embd, rows.n);
  const TensorView pending = rows.pending;
  rows.pending = {};
  return backend_->Add(h, pending, h);
}

absl::Status Step35Model::Attention(int il, Rows& rows, KvStorage& kv) {
  const LayerHparams& l = hparams_.layers[il];
  const LayerWeights& w = weights_.layers[il];
  Backend& ops = *backend_;
  const int64_t d = hparams_.n_embd, n = rows.n;
  TensorView a = rows.Mat(rows.a, d, n);
  RETURN_IF_ERROR(NormResidual(rows, w.attn_norm, a));
  TensorView q = rows.Mat(rows.q, l.q_dim(), n);
  TensorView k = rows.Mat(rows.k, l.kv_dim_k(), n);
  TensorView v = rows.Mat(rows.v, l.kv_dim_v(), n);
  TensorView gate;
  if (w.attn_gate != nullptr) gate = rows.Mat(rows.gate, l.n_head, n);
  // Fused projections: one Matmul, then q, k, v, gate are column ranges of its output (the parts
  // not in the fused weight keep their own Matmul: attn_v in Q5_K beside IQ4_XS q/k/gate). The
  // products are independent: one ConcurrentMatmuls call, which a GPU may run side by side.
  const FusedWeight* fused = placed_.Fused(w.attn_q);
  MatmulJob jobs[5];
  size_t n_jobs = 0;
  if (fused != nullptr) jobs[n_jobs++] = {a, fused->view, rows.Mat(rows.fused, fused->rows, n)};
  for (auto [t, view] : {std::pair{w.attn_q, &q}, std::pair{w.attn_k, &k}, std::pair{w.attn_v, &v},
                         std::pair{w.attn_gate, &gate}}) {
    if (t == nullptr) continue;
    const int64_t offset = fused != nullptr ? fused->OffsetOf(t) : -1;
    if (offset >= 0) {
      *view = rows.Cols(rows.fused, fused->rows, offset, view->cols(), n);
    } else {
      jobs[n_jobs++] = {a, placed_[t], *view};
    }
  }
  RETURN_IF_ERROR(ops.ConcurrentMatmuls({jobs, n_jobs}));
  QkNormRopeParams rope;
  rope.head_dim = l.head_dim_k;
  rope.q_norm = placed_[w.attn_q_norm];
  rope.k_norm = placed_[w.attn_k_norm];
  rope.eps = hparams_.rms_eps;
  rope.n_rot = l.n_rot;
  rope.base = l.rope_base;
  if (l.use_rope_freqs && !rope_freqs_.empty()) rope.freq_factors = rope_freqs_;
  AttentionBatch batch{rows.positions, l.is_swa ? rows.swa_seqs : rows.full_seqs};
  const KvCacheView cache = kv.layer(il);
  TensorView o = rows.Mat(rows.o, int64_t{l.n_head} * l.head_dim_v, n);
  AttentionParams params{.window = l.is_swa ? hparams_.sliding_window : 0,
                         .scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim_k))};
  RETURN_IF_ERROR(ops.QkNormRopeAppendKv(q, k, v, rope, batch, cache));
  if (w.attn_gate != nullptr) {
    RETURN_IF_ERROR(ops.AttentionHeadGate(q, batch, cache, params, gate, l.head_dim_v, o));
  } else {
    RETURN_IF_ERROR(ops.Attention(q, batch, cache, params, o));
  }
  TensorView out = rows.Mat(rows.tmp, d, n);
  RETURN_IF_ERROR(ops.Matmul(o, placed_[w.attn_output], out));
  rows.pending = out;  // added into h by the FFN's norm
  return absl::OkStatus();
}

absl::Status Step35Model::FeedForward(int il, Rows& rows) {
  const LayerHparams& l = hparams_.layers[il];
  const LayerWeights& w = weights_.layers[il];
  Backend& ops = *backend_;
  const int64_t d = hparams_.n_embd, n = rows.n;
  TensorView h = rows.Mat(rows.h, d, n);
  TensorView f = rows.Mat(rows.f, d, n);
  RETURN_IF_ERROR(NormResidual(rows, w.ffn_norm, f));
  // Clamped SwiGLU FFN with weights (gate, up, down) and limit; its result (in tmp) becomes the
  // pending residual update, added into h by the next norm.
  auto swiglu_ffn = [&](Tensor gate_w, Tensor up_w, Tensor down_w, float limit) -> absl::Status {
    const int64_t width = gate_w->ne[1];
    TensorView g = rows.Mat(rows.ff_g, width, n);
    TensorView u = rows.Mat(rows.ff_u, width, n);
    if (const FusedWeight* fused = placed_.Fused(gate_w);
        fused != nullptr && fused->OffsetOf(up_w) >= 0) {
      RETURN_IF_ERROR(ops.Matmul(f, fused->view, rows.Mat(rows.fused, fused->rows, n)));
      g = rows.Cols(rows.fused, fused->rows, 0, width, n);
      u = rows.Cols(rows.fused, fused->rows, fused->OffsetOf(up_w), width, n);
    } else {
      RETURN_IF_ERROR(ops.Matmul(f, placed_[gate_w], g));
      RETURN_IF_ERROR(ops.Matmul(f, placed_[up_w], u));
    }
    RETURN_IF_ERROR(ops.SwiGlu(g, u, limit, g));
    TensorView down = rows.Mat(rows.tmp, d, n);
    RETURN_IF_ERROR(ops.Matmul(g, placed_[down_w], down));
    rows.pending = down;
    return absl::OkStatus();
  };
  if (w.is_moe()) {
    // The shared expert on a side branch where the backend runs one (CUDA under
    // STEPSERVE_SIDE_SHARED_EXPERT): it reads f and writes its own buffers (ff_g, ff_u, fused,
    // tmp: the pending update), while the router and the routed experts - which read f and add
    // into h - run on the main line; joined before the next layer reads either.
    bool side = false;
    if (w.ffn_gate_shexp != nullptr) {
      ASSIGN_OR_RETURN(side, ops.BeginSide(n));
      if (side) {
        const absl::Status shared =
            swiglu_ffn(w.ffn_gate_shexp, w.ffn_up_shexp, w.ffn_down_shexp, l.clamp_shexp);
        const absl::Status ended = ops.EndSide();
        RETURN_IF_ERROR(shared);
        RETURN_IF_ERROR(ended);
      }
    }
    const int64_t e = hparams_.n_expert, top_k = hparams_.n_expert_used;
    TensorView logits = rows.Mat(rows.router, e, n);
    RETURN_IF_ERROR(ops.Matmul(f, placed_[w.ffn_gate_inp], logits));
    STEPSERVE_CHECK(top_k <= rows.expert_ids.width && n <= rows.capacity);
    const std::span<int32_t> ids(static_cast<int32_t*>(rows.expert_ids.buffer.data()),
                                 static_cast<size_t>(n * top_k));
    const std::span<float> weights(rows.expert_weights.buffer.f32(),
                                   static_cast<size_t>(n * top_k));
    RouterParams router{
        .top_k = top_k,
        .gating = static_cast<stepserve::GatingFunc>(static_cast<int>(hparams_.gating)),
        .bias = placed_.F32(w.exp_probs_b),
        .normalize = hparams_.expert_weights_norm,
        .scale = hparams_.expert_weights_scale};
    RETURN_IF_ERROR(ops.RouterTopK(logits, router, ids, weights));
    ExpertWeights experts{placed_[w.ffn_gate_exps], placed_[w.ffn_up_exps],
                          placed_[w.ffn_down_exps], l.clamp_exp};
    // The routed experts accumulate straight into the residual stream (MoeExperts adds into its
    // output): no zeroed sum and no extra add. A backend may take the shared expert in the same
    // pass (the CUDA one at one token: one more expert row of its two kernels).
    if (side) {
      RETURN_IF_ERROR(ops.MoeExperts(f, experts, ids, weights, top_k, h));
      return ops.JoinSide();
    }
    if (w.ffn_gate_shexp != nullptr) {
      const SharedExpertWeights shared{placed_[w.ffn_gate_shexp], placed_[w.ffn_up_shexp],
                                       placed_[w.ffn_down_shexp], l.clamp_shexp};
      ASSIGN_OR_RETURN(const bool fused,
                       ops.MoeExpertsWithShared(f, experts, shared, ids, weights, top_k, h));
      if (fused) return absl::OkStatus();
    }
    RETURN_IF_ERROR(ops.MoeExperts(f, experts, ids, weights, top_k, h));
    if (w.ffn_gate_shexp == nullptr) return absl::OkStatus();
    return swiglu_ffn(w.ffn_gate_shexp, w.ffn_up_shexp, w.ffn_down_shexp, l.clamp_shexp);
  }
  // Dense layers (and MTP layers) use the shared-expert clamp (spec 4.5).
  return swiglu_ffn(w.ffn_gate, w.ffn_up, w.ffn_down, l.clamp_shexp);
}

absl::Status Step35Model::TimeLayerHalf() {
  // CPU ops are synchronous; an accelerator's are not, so wait for them before reading the clock.
  return backend_->host_visible() ? absl::OkStatus() : backend_->Synchronize();
}

absl::Status Step35Model::RunLayer(int il, Rows& rows, std::span<const BatchSequence> batch,
                                   KvStorage& kv) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0, t1;
  if (layer_timer_) {
    RETURN_IF_ERROR(TimeLayerHalf());
    t0 = Clock::now();
  }
  if (absl::Status status = Attention(il, rows, kv); !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrFormat("layer %d attention: %s", il, status.message()));
  }
  if (layer_timer_) {
    RETURN_IF_ERROR(TimeLayerHalf());
    t1 = Clock::now();
  }
  if (absl::Status status = FeedForward(il, rows); !status.ok()) {
    return absl::Status(status.code(), absl::StrFormat("layer %d FFN: %s", il, status.message()));
  }
  if (layer_timer_) {
    RETURN_IF_ERROR(TimeLayerHalf());
    layer_timer_(il, std::chrono::duration<double>(t1 - t0).count(),
                 std::chrono::duration<double>(Clock::now() - t1).count());
  }
  return absl::OkStatus();
}

absl::Status Step35Model::RunStep(Rows& rows, std::span<const BatchSequence> batch, KvStorage& kv,
                                  const LogitPlan& plan, Tensor norm, Tensor head,
                                  ForwardOutput* out, const std::function<absl::Status()>& body) {
  // A decode step (one row per sequence) may be recorded and replayed by the backend
  // (Backend::BeginStep, which decides which batch sizes it records). Its key names everything
  // the ops' launch shapes depend on beyond the step's ids, positions and sequence lists: rows,
  // buffers, the KV pages, the head. The layer timer synchronises inside the step: eager only.
  bool decode = !layer_timer_;
  for (const BatchSequence& seq : batch) decode = decode && seq.tokens.size() == 1;
  StepMode mode = StepMode::kEager;
  if (decode) {
    uint64_t key = 1469598103934665603ull;
    auto mix = [&key](uint64_t value) { key = (key ^ value) * 1099511628211ull; };
    mix(static_cast<uint64_t>(rows.n));
    mix(static_cast<uint64_t>(rows.capacity));
    mix(static_cast<uint64_t>(plan.m));
    mix(static_cast<uint64_t>(plan.first));
    mix(static_cast<uint64_t>(plan.top_k));
    mix(reinterpret_cast<uintptr_t>(rows.candidates.data()));
    mix(plan.contiguous ? 1 : 0);
    mix(reinterpret_cast<uintptr_t>(rows.logits.data()));
    mix(reinterpret_cast<uintptr_t>(placed_[head].data));
    mix(reinterpret_cast<uintptr_t>(placed_[norm].data));
    mix(reinterpret_cast<uintptr_t>(kv.layer(0).k));
    mix(reinterpret_cast<uintptr_t>(kv.layer(hparams_.n_layer - 1).k));
    StepDescription step;
    step.key = key;
    step.ids = rows.ids;
    step.positions = rows.positions;
    step.seq_lists[0] = rows.full_seqs;
    step.seq_lists[1] = rows.swa_seqs;
    ASSIGN_OR_RETURN(mode, backend_->BeginStep(step));
  }
  if (mode == StepMode::kReplayed) return absl::OkStatus();
  auto enqueue = [&]() -> absl::Status {
    RETURN_IF_ERROR(body());
    return EnqueueLogits(rows, batch, plan, norm, head, out);
  };
  absl::Status status = enqueue();
  absl::Status end = backend_->EndStep(status.ok());
  if (mode == StepMode::kRecord && (!status.ok() || !end.ok())) {
    // Nothing of a failed recording ran: run the step eagerly (it reports a real input error).
    status = enqueue();
    end = backend_->EndStep(status.ok());
  }
  RETURN_IF_ERROR(status);
  return end;
}

absl::Status Step35Model::DownloadHidden(const Rows& rows, ForwardOutput* out) {
  out->hidden.resize(static_cast<size_t>(rows.n * hparams_.n_embd));
  return backend_->Download(rows.h.buffer.data(), out->hidden.data(),
                            out->hidden.size() * sizeof(float));
}

absl::Status Step35Model::Forward(std::span<const BatchSequence> batch, KvStorage& kv,
                                  ForwardOutput* out, const ForwardOptions& options) {
  if (!weights_.has_trunk) {
    return absl::FailedPreconditionError("this model file holds only MTP heads");
  }
  Rows& rows = *rows_;
  RETURN_IF_ERROR(PrepareRows(batch, rows));
  ASSIGN_OR_RETURN(const LogitPlan plan, PlanLogits(rows, batch, options.logit_top_k));
  const int64_t d = hparams_.n_embd;
  RETURN_IF_ERROR(RunStep(
      rows, batch, kv, plan, weights_.output_norm, weights_.output, out, [&]() -> absl::Status {
        RETURN_IF_ERROR(
            backend_->Embed(placed_[weights_.token_embd], rows.ids, rows.Mat(rows.h, d, rows.n)));
        for (int il = 0; il < hparams_.n_layer; ++il) {
          RETURN_IF_ERROR(RunLayer(il, rows, batch, kv));
        }
        return FlushResidual(rows);
      }));
  if (options.want_hidden) {
    RETURN_IF_ERROR(DownloadHidden(rows, out));
  } else {
    out->hidden.clear();
  }
  return DownloadLogits(rows, plan, out);
}

absl::Status Step35Model::ForwardMtp(int head, std::span<const BatchSequence> batch, KvStorage& kv,
                                     ForwardOutput* out) {
  if (!weights_.has_mtp || head < 0 || head >= hparams_.n_nextn) {
    return absl::FailedPreconditionError(
        absl::StrFormat("MTP head %d is not available (%d heads loaded)", head, num_mtp_heads()));
  }
  const int il = hparams_.n_layer + head;
  const LayerWeights& w = weights_.layers[il];
  Rows& rows = *rows_;
  RETURN_IF_ERROR(PrepareRows(batch, rows));
  const int64_t d = hparams_.n_embd, n = rows.n;
  Backend& ops = *backend_;
  int64_t row = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t count = static_cast<int64_t>(batch[s].tokens.size());
    if (static_cast<int64_t>(batch[s].mtp_hidden.size()) != count * d) {
      return absl::InvalidArgumentError(
          absl::StrFormat("MTP batch sequence %d: %d hidden floats for %d tokens of width %d", s,
                          batch[s].mtp_hidden.size(), count, d));
    }
  }
  // e = RMSNorm(E[x]; enorm), g = RMSNorm(h; hnorm), both written into one [2d, n] matrix.
  Tensor table = w.nextn_embed_tokens != nullptr ? w.nextn_embed_tokens : weights_.token_embd;
  TensorView e = rows.Mat(rows.a, d, n);
  RETURN_IF_ERROR(ops.Embed(placed_[table], rows.ids, e));
  STEPSERVE_CHECK(rows.cat.width == 2 * d && n <= rows.capacity);
  TensorView cat_e = TensorView::F32(rows.cat.buffer.f32(), d, n, 2 * d);
  TensorView cat_g = TensorView::F32(rows.cat.buffer.f32() + d, d, n, 2 * d);
  RETURN_IF_ERROR(ops.RmsNorm(e, placed_[w.nextn_enorm], hparams_.rms_eps, cat_e));
  TensorView hidden_in = rows.Mat(rows.f, d, n);
  if (ops.host_visible() && batch.size() == 1) {
    // Host memory is backend memory here: the norm reads the caller's rows in place.
    hidden_in.data = const_cast<float*>(batch[0].mtp_hidden.data());
  } else {
    for (const BatchSequence& seq : batch) {
      const int64_t count = static_cast<int64_t>(seq.tokens.size());
      RETURN_IF_ERROR(ops.Upload(seq.mtp_hidden.data(), hidden_in.f32() + row * d,
                                 static_cast<size_t>(count * d) * sizeof(float)));
      row += count;
    }
  }
  RETURN_IF_ERROR(ops.RmsNorm(hidden_in, placed_[w.nextn_hnorm], hparams_.rms_eps, cat_g));
  TensorView cat = TensorView::F32(rows.cat.buffer.f32(), 2 * d, n);
  RETURN_IF_ERROR(ops.Matmul(cat, placed_[w.nextn_eh_proj], rows.Mat(rows.h, d, n)));
  RETURN_IF_ERROR(RunLayer(il, rows, batch, kv));
  RETURN_IF_ERROR(FlushResidual(rows));
  RETURN_IF_ERROR(DownloadHidden(rows, out));
  Tensor norm = w.nextn_shared_head_norm ? w.nextn_shared_head_norm : weights_.output_norm;
  Tensor head_w = w.nextn_shared_head_head ? w.nextn_shared_head_head : weights_.output;
  if (head_w == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "MTP head %d has no shared_head_head and the file has no output.weight", head));
  }
  ASSIGN_OR_RETURN(const LogitPlan plan, PlanLogits(rows, batch));
  RETURN_IF_ERROR(EnqueueLogits(rows, batch, plan, norm, head_w, out));
  return DownloadLogits(rows, plan, out);
}

}  // namespace stepserve::model
