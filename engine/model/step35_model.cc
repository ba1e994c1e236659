#include "engine/model/step35_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"

namespace stepserve::model {
namespace {

WeightView View(Tensor t) {
  WeightView w;
  if (t == nullptr) return w;
  w.data = t->data;
  w.type = t->type;
  for (int i = 0; i < 4; ++i) w.ne[i] = t->ne[i];
  return w;
}

// A packed F32 activation matrix of `rows` rows of `cols`, backed by `buffer` (resized).
TensorView Mat(std::vector<float>& buffer, int64_t cols, int64_t rows) {
  buffer.resize(static_cast<size_t>(cols * rows));
  return TensorView::F32(buffer.data(), cols, rows);
}

std::span<const float> F32Span(Tensor t) {
  if (t == nullptr) return {};
  return {static_cast<const float*>(static_cast<const void*>(t->data)),
          static_cast<size_t>(t->n_elements())};
}

}  // namespace

struct Step35Model::Rows {
  int64_t n = 0;
  std::vector<int32_t> ids;
  std::vector<int32_t> positions;
  std::vector<SequenceSlice> full_seqs, swa_seqs;
  std::vector<float> h, a, q, k, v, o, gate, tmp, f, y, ff_g, ff_u, router, cat;
  std::vector<int32_t> expert_ids;
  std::vector<float> expert_weights;
};

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
  ASSIGN_OR_RETURN(model->backend_,
                   CreateBackend(options.backend, {.num_threads = options.num_threads}));
  std::span<const float> freqs = F32Span(model->weights_.rope_freqs);
  model->rope_freqs_.assign(freqs.begin(), freqs.end());
  for (float factor : model->rope_freqs_) {
    if (!(factor > 0) || !std::isfinite(factor)) {
      return absl::InvalidArgumentError(
          "tensor rope_freqs.weight holds a non-positive or non-finite factor");
    }
  }
  return model;
}

absl::Status Step35Model::PrepareRows(std::span<const BatchSequence> batch, Rows& rows) {
  rows.n = 0;
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
  return absl::OkStatus();
}

absl::Status Step35Model::Attention(int il, Rows& rows, KvStorage& kv) {
  const LayerHparams& l = hparams_.layers[il];
  const LayerWeights& w = weights_.layers[il];
  Backend& ops = *backend_;
  const int64_t d = hparams_.n_embd, n = rows.n;
  TensorView h = TensorView::F32(rows.h.data(), d, n);
  TensorView a = Mat(rows.a, d, n);
  RETURN_IF_ERROR(ops.RmsNorm(h, View(w.attn_norm), hparams_.rms_eps, a));
  TensorView q = Mat(rows.q, l.q_dim(), n);
  TensorView k = Mat(rows.k, l.kv_dim_k(), n);
  TensorView v = Mat(rows.v, l.kv_dim_v(), n);
  RETURN_IF_ERROR(ops.Matmul(a, View(w.attn_q), q));
  RETURN_IF_ERROR(ops.Matmul(a, View(w.attn_k), k));
  RETURN_IF_ERROR(ops.Matmul(a, View(w.attn_v), v));
  QkNormRopeParams rope;
  rope.head_dim = l.head_dim_k;
  rope.q_norm = View(w.attn_q_norm);
  rope.k_norm = View(w.attn_k_norm);
  rope.eps = hparams_.rms_eps;
  rope.n_rot = l.n_rot;
  rope.base = l.rope_base;
  if (l.use_rope_freqs && !rope_freqs_.empty()) rope.freq_factors = rope_freqs_;
  RETURN_IF_ERROR(ops.QkNormRope(q, k, rope, rows.positions));
  AttentionBatch batch{rows.positions, l.is_swa ? rows.swa_seqs : rows.full_seqs};
  const KvCacheView cache = kv.layer(il);
  RETURN_IF_ERROR(ops.AppendKv(k, v, batch, cache));
  TensorView o = Mat(rows.o, int64_t{l.n_head} * l.head_dim_v, n);
  AttentionParams params{.window = l.is_swa ? hparams_.sliding_window : 0,
                         .scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim_k))};
  RETURN_IF_ERROR(ops.Attention(q, batch, cache, params, o));
  if (w.attn_gate != nullptr) {
    TensorView gate = Mat(rows.gate, l.n_head, n);
    RETURN_IF_ERROR(ops.Matmul(a, View(w.attn_gate), gate));
    RETURN_IF_ERROR(ops.HeadGate(o, gate, l.head_dim_v));
  }
  TensorView out = Mat(rows.tmp, d, n);
  RETURN_IF_ERROR(ops.Matmul(o, View(w.attn_output), out));
  return ops.Add(h, out, h);
}

absl::Status Step35Model::FeedForward(int il, Rows& rows) {
  const LayerHparams& l = hparams_.layers[il];
  const LayerWeights& w = weights_.layers[il];
  Backend& ops = *backend_;
  const int64_t d = hparams_.n_embd, n = rows.n;
  TensorView h = TensorView::F32(rows.h.data(), d, n);
  TensorView f = Mat(rows.f, d, n);
  RETURN_IF_ERROR(ops.RmsNorm(h, View(w.ffn_norm), hparams_.rms_eps, f));
  // Clamped SwiGLU FFN with weights (gate, up, down) and limit; result added into `acc`.
  auto swiglu_ffn = [&](Tensor gate_w, Tensor up_w, Tensor down_w, float limit,
                        const TensorView& acc) -> absl::Status {
    const int64_t width = gate_w->ne[1];
    TensorView g = Mat(rows.ff_g, width, n);
    TensorView u = Mat(rows.ff_u, width, n);
    RETURN_IF_ERROR(ops.Matmul(f, View(gate_w), g));
    RETURN_IF_ERROR(ops.Matmul(f, View(up_w), u));
    RETURN_IF_ERROR(ops.SwiGlu(g, u, limit, g));
    TensorView down = Mat(rows.tmp, d, n);
    RETURN_IF_ERROR(ops.Matmul(g, View(down_w), down));
    return ops.Add(acc, down, acc);
  };
  if (w.is_moe()) {
    TensorView y = Mat(rows.y, d, n);
    std::fill(rows.y.begin(), rows.y.end(), 0.0f);
    const int64_t e = hparams_.n_expert, top_k = hparams_.n_expert_used;
    TensorView logits = Mat(rows.router, e, n);
    RETURN_IF_ERROR(ops.Matmul(f, View(w.ffn_gate_inp), logits));
    rows.expert_ids.resize(static_cast<size_t>(n * top_k));
    rows.expert_weights.resize(static_cast<size_t>(n * top_k));
    RouterParams router{
        .top_k = top_k,
        .gating = static_cast<stepserve::GatingFunc>(static_cast<int>(hparams_.gating)),
        .bias = F32Span(w.exp_probs_b),
        .normalize = hparams_.expert_weights_norm,
        .scale = hparams_.expert_weights_scale};
    RETURN_IF_ERROR(ops.RouterTopK(logits, router, rows.expert_ids, rows.expert_weights));
    ExpertWeights experts{View(w.ffn_gate_exps), View(w.ffn_up_exps), View(w.ffn_down_exps),
                          l.clamp_exp};
    RETURN_IF_ERROR(ops.MoeExperts(f, experts, rows.expert_ids, rows.expert_weights, top_k, y));
    if (w.ffn_gate_shexp != nullptr) {
      RETURN_IF_ERROR(
          swiglu_ffn(w.ffn_gate_shexp, w.ffn_up_shexp, w.ffn_down_shexp, l.clamp_shexp, y));
    }
    return ops.Add(h, y, h);
  }
  // Dense layers (and MTP layers) use the shared-expert clamp (spec 4.5).
  return swiglu_ffn(w.ffn_gate, w.ffn_up, w.ffn_down, l.clamp_shexp, h);
}

absl::Status Step35Model::RunLayer(int il, Rows& rows, std::span<const BatchSequence> batch,
                                   KvStorage& kv) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = layer_timer_ ? Clock::now() : Clock::time_point();
  if (absl::Status status = Attention(il, rows, kv); !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrFormat("layer %d attention: %s", il, status.message()));
  }
  const Clock::time_point t1 = layer_timer_ ? Clock::now() : Clock::time_point();
  if (absl::Status status = FeedForward(il, rows); !status.ok()) {
    return absl::Status(status.code(), absl::StrFormat("layer %d FFN: %s", il, status.message()));
  }
  if (layer_timer_) {
    // The CPU backend's ops are synchronous, so wall-clock time brackets the work.
    layer_timer_(il, std::chrono::duration<double>(t1 - t0).count(),
                 std::chrono::duration<double>(Clock::now() - t1).count());
  }
  return absl::OkStatus();
}

absl::Status Step35Model::Logits(Rows& rows, std::span<const BatchSequence> batch, Tensor norm,
                                 Tensor head, ForwardOutput* out) {
  const int64_t d = hparams_.n_embd;
  int64_t m = 0;
  for (const BatchSequence& seq : batch) m += seq.logit_rows;
  out->logits.clear();
  if (m == 0) return absl::OkStatus();
  TensorView picked = Mat(rows.a, d, m);
  int64_t row = 0, dst = 0;
  for (const BatchSequence& seq : batch) {
    const int64_t count = static_cast<int64_t>(seq.tokens.size());
    for (int64_t i = count - seq.logit_rows; i < count; ++i) {
      std::memcpy(rows.a.data() + (dst++) * d, rows.h.data() + (row + i) * d, d * sizeof(float));
    }
    row += count;
  }
  TensorView normed = Mat(rows.f, d, m);
  RETURN_IF_ERROR(backend_->RmsNorm(picked, View(norm), hparams_.rms_eps, normed));
  TensorView logits = Mat(out->logits, weights_.n_vocab, m);
  return backend_->Matmul(normed, View(head), logits);
}

absl::Status Step35Model::Forward(std::span<const BatchSequence> batch, KvStorage& kv,
                                  ForwardOutput* out) {
  if (!weights_.has_trunk) {
    return absl::FailedPreconditionError("this model file holds only MTP heads");
  }
  Rows& rows = *rows_;
  RETURN_IF_ERROR(PrepareRows(batch, rows));
  const int64_t d = hparams_.n_embd;
  RETURN_IF_ERROR(backend_->Embed(View(weights_.token_embd), rows.ids, Mat(rows.h, d, rows.n)));
  for (int il = 0; il < hparams_.n_layer; ++il) RETURN_IF_ERROR(RunLayer(il, rows, batch, kv));
  out->hidden = rows.h;
  return Logits(rows, batch, weights_.output_norm, weights_.output, out);
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
  // e = RMSNorm(E[x]; enorm), g = RMSNorm(h; hnorm), both written into one [2d, n] matrix.
  Tensor table = w.nextn_embed_tokens != nullptr ? w.nextn_embed_tokens : weights_.token_embd;
  TensorView e = Mat(rows.a, d, n);
  RETURN_IF_ERROR(ops.Embed(View(table), rows.ids, e));
  rows.cat.resize(static_cast<size_t>(2 * d * n));
  TensorView cat_e = TensorView::F32(rows.cat.data(), d, n, 2 * d);
  TensorView cat_g = TensorView::F32(rows.cat.data() + d, d, n, 2 * d);
  RETURN_IF_ERROR(ops.RmsNorm(e, View(w.nextn_enorm), hparams_.rms_eps, cat_e));
  TensorView hidden_in = Mat(rows.f, d, n);
  int64_t row = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t count = static_cast<int64_t>(batch[s].tokens.size());
    if (static_cast<int64_t>(batch[s].mtp_hidden.size()) != count * d) {
      return absl::InvalidArgumentError(
          absl::StrFormat("MTP batch sequence %d: %d hidden floats for %d tokens of width %d", s,
                          batch[s].mtp_hidden.size(), count, d));
    }
    std::memcpy(rows.f.data() + row * d, batch[s].mtp_hidden.data(), count * d * sizeof(float));
    row += count;
  }
  RETURN_IF_ERROR(ops.RmsNorm(hidden_in, View(w.nextn_hnorm), hparams_.rms_eps, cat_g));
  TensorView cat = TensorView::F32(rows.cat.data(), 2 * d, n);
  RETURN_IF_ERROR(ops.Matmul(cat, View(w.nextn_eh_proj), Mat(rows.h, d, n)));
  RETURN_IF_ERROR(RunLayer(il, rows, batch, kv));
  out->hidden = rows.h;
  Tensor norm = w.nextn_shared_head_norm ? w.nextn_shared_head_norm : weights_.output_norm;
  Tensor head_w = w.nextn_shared_head_head ? w.nextn_shared_head_head : weights_.output;
  if (head_w == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "MTP head %d has no shared_head_head and the file has no output.weight", head));
  }
  return Logits(rows, batch, norm, head_w, out);
}

}  // namespace stepserve::model
