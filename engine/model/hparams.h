// step35 hyperparameters read from GGUF metadata, with the derived per-layer values an engine
// needs (spec: shared/spec/step35-architecture.md sections 2.1 and 2.2). Every key is validated;
// errors name the key and what was wrong with it.
#ifndef STEPSERVE_ENGINE_MODEL_HPARAMS_H_
#define STEPSERVE_ENGINE_MODEL_HPARAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf_value.h"

namespace stepserve::model {

// Router gating function ids (step35.expert_gating_func); absent or 0 means sigmoid for step35.
enum class GatingFunc : int { kSoftmax = 1, kSigmoid = 2, kSoftmaxSelected = 3, kSqrtSoftplus = 4 };

struct LayerHparams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;  // Q and K head dimension
  int head_dim_v = 0;
  bool is_swa = false;  // sliding-window attention layer
  int n_rot = 0;        // rotated dims of every Q/K head (NeoX pairs i, i + n_rot/2)
  float rope_base = 10000.0f;
  bool use_rope_freqs = false;  // rope_freqs divisors apply on full-attention layers only
  float clamp_exp = 0.0f;       // routed-expert SwiGLU limit; <= 1e-6 means no clamp
  float clamp_shexp = 0.0f;     // shared-expert and dense-FFN SwiGLU limit
  int64_t n_ff = 0;             // dense FFN width (feed_forward_length, scalar or per layer)
  int64_t n_ff_exp = 0;         // routed expert width (per layer in late converters)
  bool is_mtp = false;          // layer index >= n_layer

  int q_dim() const { return n_head * head_dim_k; }
  int kv_dim_k() const { return n_head_kv * head_dim_k; }
  int kv_dim_v() const { return n_head_kv * head_dim_v; }
};

struct Hparams {
  std::string architecture;  // "step35"
  std::string name;          // general.name, may be empty
  int n_layer_all = 0;       // block_count: trunk + MTP layers stored
  int n_nextn = 0;           // nextn_predict_layers
  int n_layer = 0;           // trunk layers
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_shexp = 0;
  float rms_eps = 1e-5f;
  int sliding_window = 0;
  float expert_weights_scale = 0.0f;  // 0 or 1: no scaling
  bool expert_weights_norm = false;
  GatingFunc gating = GatingFunc::kSigmoid;
  int n_rot_max = 0;  // over trunk layers; rope_freqs has n_rot_max / 2 entries
  // Step-5 shape (92 trunk layers, 352 experts): its sparse attention is not implemented yet, so
  // it runs in the dense fallback of spec 6.3.
  bool step5_dense_fallback = false;
  std::vector<LayerHparams> layers;  // n_layer_all entries

  // Parses and validates. Errors name the key ("step35.attention.head_count: array has 47
  // entries, block_count is 48").
  static absl::StatusOr<Hparams> FromMetadata(const gguf::Metadata& metadata);
  // One paragraph for logs and `stepserve gguf inspect`.
  std::string Summary() const;
};

}  // namespace stepserve::model

#endif  // STEPSERVE_ENGINE_MODEL_HPARAMS_H_
