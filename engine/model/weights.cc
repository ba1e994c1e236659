#include "engine/model/weights.h"

#include <algorithm>
#include <array>
#include <initializer_list>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/quant/quant.h"

namespace stepserve::model {
namespace {

enum class Kind {
  kMatrix,  // any block type the engine can compute with
  kVector,  // F32 only: norms, biases, rope factors, the router
};

std::string ShapeText(std::initializer_list<int64_t> ne) {
  std::string text = "[";
  bool first = true;
  for (int64_t v : ne) {
    absl::StrAppend(&text, first ? "" : ", ", v);
    first = false;
  }
  return text + "]";
}

// Looks a tensor up and checks its shape (ggml ne order) and type.
class Binder {
 public:
  explicit Binder(const gguf::GgufFile& file) : file_(file) {}

  absl::StatusOr<Tensor> Get(const std::string& name, std::initializer_list<int64_t> ne, Kind kind,
                             bool required) {
    const gguf::TensorInfo* info = file_.FindTensor(name);
    if (info == nullptr) {
      if (required) {
        return absl::NotFoundError(
            absl::StrFormat("missing tensor %s (expected shape %s)", name, ShapeText(ne)));
      }
      return Tensor{nullptr};
    }
    used_.insert(name);
    std::array<int64_t, 4> expected = {1, 1, 1, 1};
    int i = 0;
    for (int64_t v : ne) expected[i++] = v;
    if (info->ne != expected) {
      return absl::InvalidArgumentError(absl::StrFormat("tensor %s has shape %s, expected %s", name,
                                                        info->ShapeString(), ShapeText(ne)));
    }
    if (kind == Kind::kVector && info->type != GgmlType::kF32) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor %s has type %s; stepserve needs F32 for norms, biases and the router", name,
          GgmlTypeName(info->type)));
    }
    if (kind == Kind::kMatrix && !quant::CanDequantize(info->type)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %s has type %s, which stepserve does not support", name,
                          GgmlTypeName(info->type)));
    }
    return info;
  }

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }
  bool Used(const std::string& name) const { return used_.contains(name); }

 private:
  const gguf::GgufFile& file_;
  absl::flat_hash_set<std::string> used_;
};

std::string Blk(int il, std::string_view suffix) {
  return absl::StrCat("blk.", il, ".", std::string(suffix));
}

absl::Status BindAttention(Binder& b, const Hparams& hp, int il, LayerWeights& w) {
  const LayerHparams& l = hp.layers[il];
  const int64_t d = hp.n_embd;
  if (b.Has(Blk(il, "attn_qkv.weight"))) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor %s: fused QKV projections are not supported yet", Blk(il, "attn_qkv.weight")));
  }
  ASSIGN_OR_RETURN(w.attn_norm, b.Get(Blk(il, "attn_norm.weight"), {d}, Kind::kVector, true));
  ASSIGN_OR_RETURN(w.attn_q, b.Get(Blk(il, "attn_q.weight"), {d, l.q_dim()}, Kind::kMatrix, true));
  ASSIGN_OR_RETURN(w.attn_k,
                   b.Get(Blk(il, "attn_k.weight"), {d, l.kv_dim_k()}, Kind::kMatrix, true));
  ASSIGN_OR_RETURN(w.attn_v,
                   b.Get(Blk(il, "attn_v.weight"), {d, l.kv_dim_v()}, Kind::kMatrix, true));
  ASSIGN_OR_RETURN(w.attn_q_norm,
                   b.Get(Blk(il, "attn_q_norm.weight"), {l.head_dim_k}, Kind::kVector, true));
  ASSIGN_OR_RETURN(w.attn_k_norm,
                   b.Get(Blk(il, "attn_k_norm.weight"), {l.head_dim_k}, Kind::kVector, true));
  ASSIGN_OR_RETURN(w.attn_gate,
                   b.Get(Blk(il, "attn_gate.weight"), {d, l.n_head}, Kind::kMatrix, false));
  ASSIGN_OR_RETURN(w.attn_output,
                   b.Get(Blk(il, "attn_output.weight"), {int64_t{l.n_head} * l.head_dim_v, d},
                         Kind::kMatrix, true));
  ASSIGN_OR_RETURN(w.ffn_norm, b.Get(Blk(il, "ffn_norm.weight"), {d}, Kind::kVector, true));
  return absl::OkStatus();
}

absl::Status BindFfn(Binder& b, const Hparams& hp, int il, bool required, LayerWeights& w) {
  const LayerHparams& l = hp.layers[il];
  const int64_t d = hp.n_embd;
  if (b.Has(Blk(il, "ffn_gate_inp.weight"))) {
    if (hp.n_expert == 0 || l.n_ff_exp == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %d has a router (%s) but step35.expert_count / expert_feed_forward_length are "
          "missing or 0",
          il, Blk(il, "ffn_gate_inp.weight")));
    }
    const int64_t e = hp.n_expert, f = l.n_ff_exp, s = hp.n_ff_shexp;
    ASSIGN_OR_RETURN(w.ffn_gate_inp,
                     b.Get(Blk(il, "ffn_gate_inp.weight"), {d, e}, Kind::kVector, true));
    ASSIGN_OR_RETURN(w.exp_probs_b, b.Get(Blk(il, "exp_probs_b.bias"), {e}, Kind::kVector, false));
    ASSIGN_OR_RETURN(w.ffn_gate_exps,
                     b.Get(Blk(il, "ffn_gate_exps.weight"), {d, f, e}, Kind::kMatrix, true));
    ASSIGN_OR_RETURN(w.ffn_up_exps,
                     b.Get(Blk(il, "ffn_up_exps.weight"), {d, f, e}, Kind::kMatrix, true));
    ASSIGN_OR_RETURN(w.ffn_down_exps,
                     b.Get(Blk(il, "ffn_down_exps.weight"), {f, d, e}, Kind::kMatrix, true));
    const bool has_shared = s > 0;
    ASSIGN_OR_RETURN(w.ffn_gate_shexp,
                     b.Get(Blk(il, "ffn_gate_shexp.weight"), {d, s}, Kind::kMatrix, has_shared));
    ASSIGN_OR_RETURN(w.ffn_up_shexp,
                     b.Get(Blk(il, "ffn_up_shexp.weight"), {d, s}, Kind::kMatrix, has_shared));
    ASSIGN_OR_RETURN(w.ffn_down_shexp,
                     b.Get(Blk(il, "ffn_down_shexp.weight"), {s, d}, Kind::kMatrix, has_shared));
    return absl::OkStatus();
  }
  const int64_t f = l.n_ff;
  if (f == 0 && required) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %d is dense (no %s) but step35.feed_forward_length is missing or 0",
                        il, Blk(il, "ffn_gate_inp.weight")));
  }
  ASSIGN_OR_RETURN(w.ffn_gate, b.Get(Blk(il, "ffn_gate.weight"), {d, f}, Kind::kMatrix, required));
  ASSIGN_OR_RETURN(w.ffn_up, b.Get(Blk(il, "ffn_up.weight"), {d, f}, Kind::kMatrix, required));
  ASSIGN_OR_RETURN(w.ffn_down, b.Get(Blk(il, "ffn_down.weight"), {f, d}, Kind::kMatrix, required));
  if (w.ffn_gate == nullptr || w.ffn_up == nullptr || w.ffn_down == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "layer %d has no complete FFN (needs ffn_gate/up/down or a router and experts)", il));
  }
  return absl::OkStatus();
}

absl::Status BindMtpExtras(Binder& b, const Hparams& hp, int64_t n_vocab, int il, LayerWeights& w) {
  const int64_t d = hp.n_embd;
  ASSIGN_OR_RETURN(w.nextn_eh_proj,
                   b.Get(Blk(il, "nextn.eh_proj.weight"), {2 * d, d}, Kind::kMatrix, true));
  ASSIGN_OR_RETURN(w.nextn_enorm, b.Get(Blk(il, "nextn.enorm.weight"), {d}, Kind::kVector, true));
  ASSIGN_OR_RETURN(w.nextn_hnorm, b.Get(Blk(il, "nextn.hnorm.weight"), {d}, Kind::kVector, true));
  ASSIGN_OR_RETURN(w.nextn_shared_head_norm,
                   b.Get(Blk(il, "nextn.shared_head_norm.weight"), {d}, Kind::kVector, false));
  ASSIGN_OR_RETURN(w.nextn_shared_head_head, b.Get(Blk(il, "nextn.shared_head_head.weight"),
                                                   {d, n_vocab}, Kind::kMatrix, false));
  ASSIGN_OR_RETURN(w.nextn_embed_tokens,
                   b.Get(Blk(il, "nextn.embed_tokens.weight"), {d, n_vocab}, Kind::kMatrix, false));
  return absl::OkStatus();
}

}  // namespace

std::string_view MtpLayoutName(MtpLayout layout) {
  switch (layout) {
    case MtpLayout::kNone:
      return "none";
    case MtpLayout::kCombined:
      return "combined";
    case MtpLayout::kTrunkOnly:
      return "trunk-only";
    case MtpLayout::kMtpOnly:
      return "mtp-only";
  }
  return "?";
}

absl::StatusOr<ModelWeights> ModelWeights::Bind(const gguf::GgufFile& file, const Hparams& hp,
                                                const BindOptions& options) {
  Binder b(file);
  ModelWeights w;
  w.layers.resize(hp.n_layer_all);
  const int64_t d = hp.n_embd;

  if (hp.n_nextn == 0) {
    w.mtp_layout = MtpLayout::kNone;
  } else if (!b.Has("blk.0.attn_norm.weight")) {
    w.mtp_layout = MtpLayout::kMtpOnly;
  } else if (!b.Has(Blk(hp.n_layer, "nextn.eh_proj.weight"))) {
    w.mtp_layout = MtpLayout::kTrunkOnly;
  } else {
    w.mtp_layout = MtpLayout::kCombined;
  }
  w.has_trunk = w.mtp_layout != MtpLayout::kMtpOnly;

  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return absl::NotFoundError("missing tensor token_embd.weight");
  w.n_vocab = embd->ne[1];
  if (w.n_vocab <= 0) return absl::InvalidArgumentError("tensor token_embd.weight has no rows");
  ASSIGN_OR_RETURN(w.token_embd, b.Get("token_embd.weight", {d, w.n_vocab}, Kind::kMatrix, true));
  ASSIGN_OR_RETURN(w.output_norm, b.Get("output_norm.weight", {d}, Kind::kVector, true));
  ASSIGN_OR_RETURN(w.output, b.Get("output.weight", {d, w.n_vocab}, Kind::kMatrix, w.has_trunk));
  if (const gguf::TensorInfo* rf = file.FindTensor("rope_freqs.weight"); rf != nullptr) {
    ASSIGN_OR_RETURN(w.rope_freqs, b.Get("rope_freqs.weight", {rf->ne[0]}, Kind::kVector, true));
    int64_t needed = 0;
    for (int il = 0; il < hp.n_layer_all; ++il) {
      if (hp.layers[il].use_rope_freqs) needed = std::max<int64_t>(needed, hp.layers[il].n_rot / 2);
    }
    if (rf->ne[0] < needed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor rope_freqs.weight has %d entries; full-attention layers rotate %d pairs",
          rf->ne[0], needed));
    }
  }

  if (w.has_trunk) {
    for (int il = 0; il < hp.n_layer; ++il) {
      absl::Status status = BindAttention(b, hp, il, w.layers[il]);
      if (status.ok()) status = BindFfn(b, hp, il, /*required=*/true, w.layers[il]);
      if (!status.ok()) return status;
    }
  }
  const bool bind_mtp = options.load_mtp && (w.mtp_layout == MtpLayout::kCombined ||
                                             w.mtp_layout == MtpLayout::kMtpOnly);
  if (w.mtp_layout == MtpLayout::kMtpOnly && !options.load_mtp) {
    return absl::InvalidArgumentError(
        "this file holds only MTP heads (no blk.0.attn_norm.weight): load it as a draft model");
  }
  if (bind_mtp) {
    for (int il = hp.n_layer; il < hp.n_layer_all; ++il) {
      absl::Status status = BindAttention(b, hp, il, w.layers[il]);
      if (status.ok()) status = BindFfn(b, hp, il, /*required=*/true, w.layers[il]);
      if (status.ok()) status = BindMtpExtras(b, hp, w.n_vocab, il, w.layers[il]);
      if (!status.ok()) return status;
    }
    w.has_mtp = true;
  }
  w.has_sparse_indexer = b.Has("blk.3.attn_ssmax_s");
  for (const gguf::TensorInfo& info : file.tensors()) {
    if (b.Used(info.name)) {
      w.bound_tensors.push_back(&info);
    } else {
      w.unused_tensors.push_back(info.name);
    }
  }
  return w;
}

}  // namespace stepserve::model
