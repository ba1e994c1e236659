// Binds the tensors of a step35 GGUF by name (spec: shared/spec/step35-architecture.md sections
// 3 and 5.7) with shape and type checks against the hyperparameters. Handles the three MTP
// layouts: combined (trunk + MTP), trunk-only, and MTP-only draft files. Errors name the tensor
// and say what was expected.
#ifndef STEPSERVE_ENGINE_MODEL_WEIGHTS_H_
#define STEPSERVE_ENGINE_MODEL_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/model/hparams.h"

namespace stepserve::model {

using Tensor = const gguf::TensorInfo*;  // nullptr: optional tensor absent

struct LayerWeights {
  Tensor attn_norm = nullptr;
  Tensor attn_q = nullptr;
  Tensor attn_k = nullptr;
  Tensor attn_v = nullptr;
  // Optional in llama.cpp's loader but present in every Step file; stepserve requires them.
  Tensor attn_q_norm = nullptr;
  Tensor attn_k_norm = nullptr;
  Tensor attn_gate = nullptr;
  Tensor attn_output = nullptr;
  Tensor ffn_norm = nullptr;
  // Dense FFN (dense trunk layers and MTP layers).
  Tensor ffn_gate = nullptr;
  Tensor ffn_up = nullptr;
  Tensor ffn_down = nullptr;
  // MoE FFN.
  Tensor ffn_gate_inp = nullptr;  // router [d, E], F32
  Tensor exp_probs_b = nullptr;   // selection bias [E], F32
  Tensor ffn_gate_exps = nullptr;
  Tensor ffn_up_exps = nullptr;
  Tensor ffn_down_exps = nullptr;
  Tensor ffn_gate_shexp = nullptr;
  Tensor ffn_up_shexp = nullptr;
  Tensor ffn_down_shexp = nullptr;
  // MTP head (layers >= n_layer).
  Tensor nextn_eh_proj = nullptr;
  Tensor nextn_enorm = nullptr;
  Tensor nextn_hnorm = nullptr;
  Tensor nextn_shared_head_norm = nullptr;  // fallback: output_norm
  Tensor nextn_shared_head_head = nullptr;  // fallback: output
  Tensor nextn_embed_tokens = nullptr;      // fallback: token_embd

  bool is_moe() const { return ffn_gate_inp != nullptr; }
  bool is_bound() const { return attn_norm != nullptr; }
};

enum class MtpLayout {
  kNone,       // no nextn layers declared
  kCombined,   // trunk and MTP tensors in one file
  kTrunkOnly,  // MTP layers declared but their tensors absent (official 3.7 main file)
  kMtpOnly,    // draft file: global tensors + MTP layers only
};
std::string_view MtpLayoutName(MtpLayout layout);

struct BindOptions {
  // Bind the MTP layers when the file has them (otherwise they are skipped entirely).
  bool load_mtp = true;
};

struct ModelWeights {
  Tensor token_embd = nullptr;
  Tensor output_norm = nullptr;
  Tensor output = nullptr;      // absent only in MTP-only files
  Tensor rope_freqs = nullptr;  // optional
  int64_t n_vocab = 0;          // rows of token_embd
  std::vector<LayerWeights> layers;  // n_layer_all entries; unbound layers have nullptrs
  MtpLayout mtp_layout = MtpLayout::kNone;
  bool has_trunk = true;  // false for MTP-only files
  bool has_mtp = false;   // MTP layers bound
  bool has_sparse_indexer = false;  // Step-5 sparse tensors present (ignored: dense fallback)
  std::vector<std::string> unused_tensors;  // present in the file, not used by the engine
  std::vector<Tensor> bound_tensors;        // every tensor bound above, in file order

  static absl::StatusOr<ModelWeights> Bind(const gguf::GgufFile& file, const Hparams& hparams,
                                           const BindOptions& options = {});
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_WEIGHTS_H_
