#include "engine/model/hparams.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"

namespace stepserve::model {
namespace {

constexpr int kMaxLayers = 4096;
constexpr int64_t kMaxDim = int64_t{1} << 24;

std::string Key(std::string_view name) { return absl::StrCat("step35.", std::string(name)); }

// An optional scalar integer key; `fallback` when absent.
absl::StatusOr<int64_t> OptionalInt(const gguf::Metadata& md, const std::string& key,
                                    int64_t fallback) {
  if (!md.Contains(key)) return fallback;
  return md.GetInt(key);
}

absl::StatusOr<double> OptionalFloat(const gguf::Metadata& md, const std::string& key,
                                     double fallback) {
  if (!md.Contains(key)) return fallback;
  return md.GetFloat(key);
}

absl::StatusOr<int64_t> RequiredInt(const gguf::Metadata& md, const std::string& key) {
  if (!md.Contains(key)) return absl::InvalidArgumentError(absl::StrCat("missing key ", key));
  return md.GetInt(key);
}

// A key that is either a scalar (broadcast to every layer) or an array of exactly `n` entries;
// nullopt when absent. T = int64_t reads integers or bools, T = double any number.
template <typename T>
absl::StatusOr<std::optional<std::vector<T>>> PerLayer(const gguf::Metadata& md,
                                                       const std::string& key, int n) {
  constexpr bool kInt = std::is_same_v<T, int64_t>;
  const gguf::Value* value = md.Find(key);
  if (value == nullptr) return std::optional<std::vector<T>>();
  std::vector<T> values;
  if (value->type() == gguf::ValueType::kArray) {
    absl::StatusOr<std::vector<T>> array;
    if constexpr (kInt) {
      array = md.GetIntArray(key);
    } else {
      array = md.GetFloatArray(key);
    }
    if (!array.ok()) return array.status();
    values = *std::move(array);
    if (static_cast<int>(values.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: array has %d entries, block_count is %d", key, values.size(), n));
    }
  } else {
    absl::StatusOr<T> scalar;
    if constexpr (kInt) {
      scalar = md.GetInt(key);
    } else {
      scalar = md.GetFloat(key);
    }
    if (!scalar.ok()) return scalar.status();
    values.assign(n, *scalar);
  }
  if constexpr (!kInt) {
    for (double v : values) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: non-finite entry", key));
      }
    }
  }
  return std::optional<std::vector<T>>(std::move(values));
}

absl::Status CheckRange(const std::string& key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %d is outside the supported range [%d, %d]", key, value, lo, hi));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Hparams> Hparams::FromMetadata(const gguf::Metadata& md) {
  Hparams hp;
  if (!md.Contains("general.architecture")) {
    return absl::InvalidArgumentError("missing key general.architecture");
  }
  ASSIGN_OR_RETURN(hp.architecture, md.GetString("general.architecture"));
  if (hp.architecture != "step35") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unsupported architecture '%s': stepserve serves step35 models", hp.architecture));
  }
  if (md.Contains("general.name")) {
    ASSIGN_OR_RETURN(hp.name, md.GetString("general.name"));
  }

  int64_t block_count = 0;
  ASSIGN_OR_RETURN(block_count, RequiredInt(md, Key("block_count")));
  RETURN_IF_ERROR(CheckRange(Key("block_count"), block_count, 1, kMaxLayers));
  hp.n_layer_all = static_cast<int>(block_count);
  int64_t nextn = 0;
  ASSIGN_OR_RETURN(nextn, OptionalInt(md, Key("nextn_predict_layers"), 0));
  RETURN_IF_ERROR(CheckRange(Key("nextn_predict_layers"), nextn, 0, block_count - 1));
  hp.n_nextn = static_cast<int>(nextn);
  hp.n_layer = hp.n_layer_all - hp.n_nextn;
  const int n = hp.n_layer_all;

  ASSIGN_OR_RETURN(hp.n_ctx_train, RequiredInt(md, Key("context_length")));
  RETURN_IF_ERROR(CheckRange(Key("context_length"), hp.n_ctx_train, 1, int64_t{1} << 30));
  ASSIGN_OR_RETURN(hp.n_embd, RequiredInt(md, Key("embedding_length")));
  RETURN_IF_ERROR(CheckRange(Key("embedding_length"), hp.n_embd, 1, kMaxDim));

  std::optional<std::vector<int64_t>> n_ff;
  ASSIGN_OR_RETURN(n_ff, PerLayer<int64_t>(md, Key("feed_forward_length"), n));
  std::optional<std::vector<int64_t>> heads;
  ASSIGN_OR_RETURN(heads, PerLayer<int64_t>(md, Key("attention.head_count"), n));
  if (!heads) return absl::InvalidArgumentError("missing key step35.attention.head_count");
  std::optional<std::vector<int64_t>> heads_kv;
  ASSIGN_OR_RETURN(heads_kv, PerLayer<int64_t>(md, Key("attention.head_count_kv"), n));
  if (!heads_kv) heads_kv = heads;
  for (int il = 0; il < n; ++il) {
    RETURN_IF_ERROR(CheckRange(absl::StrFormat("%s[%d]", Key("attention.head_count"), il),
                               (*heads)[il], 1, 4096));
    RETURN_IF_ERROR(CheckRange(absl::StrFormat("%s[%d]", Key("attention.head_count_kv"), il),
                               (*heads_kv)[il], 1, (*heads)[il]));
    if ((*heads)[il] % (*heads_kv)[il] != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %d: %d query heads are not a multiple of %d KV heads", il,
                          (*heads)[il], (*heads_kv)[il]));
    }
  }

  int64_t key_length = 0, value_length = 0, key_length_swa = 0, value_length_swa = 0;
  ASSIGN_OR_RETURN(key_length,
                   OptionalInt(md, Key("attention.key_length"), hp.n_embd / (*heads)[0]));
  ASSIGN_OR_RETURN(value_length,
                   OptionalInt(md, Key("attention.value_length"), hp.n_embd / (*heads)[0]));
  ASSIGN_OR_RETURN(key_length_swa, OptionalInt(md, Key("attention.key_length_swa"), key_length));
  ASSIGN_OR_RETURN(value_length_swa,
                   OptionalInt(md, Key("attention.value_length_swa"), value_length));
  for (auto [name, v] : {std::pair{"attention.key_length", key_length},
                         std::pair{"attention.value_length", value_length},
                         std::pair{"attention.key_length_swa", key_length_swa},
                         std::pair{"attention.value_length_swa", value_length_swa}}) {
    RETURN_IF_ERROR(CheckRange(Key(name), v, 2, 1024));
  }

  double eps = 0;
  if (!md.Contains(Key("attention.layer_norm_rms_epsilon"))) {
    return absl::InvalidArgumentError("missing key step35.attention.layer_norm_rms_epsilon");
  }
  ASSIGN_OR_RETURN(eps, md.GetFloat(Key("attention.layer_norm_rms_epsilon")));
  if (!(eps > 0 && eps < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step35.attention.layer_norm_rms_epsilon = %g must be in (0, 1)", eps));
  }
  hp.rms_eps = static_cast<float>(eps);

  int64_t window = 0;
  ASSIGN_OR_RETURN(window, RequiredInt(md, Key("attention.sliding_window")));
  RETURN_IF_ERROR(CheckRange(Key("attention.sliding_window"), window, 1, int64_t{1} << 30));
  hp.sliding_window = static_cast<int>(window);
  std::optional<std::vector<int64_t>> pattern;
  ASSIGN_OR_RETURN(pattern, PerLayer<int64_t>(md, Key("attention.sliding_window_pattern"), n));
  if (!pattern) {
    return absl::InvalidArgumentError("missing key step35.attention.sliding_window_pattern");
  }

  double base_full = 0, base_swa = 0;
  ASSIGN_OR_RETURN(base_full, OptionalFloat(md, Key("rope.freq_base"), 10000.0));
  ASSIGN_OR_RETURN(base_swa, OptionalFloat(md, Key("rope.freq_base_swa"), 10000.0));
  if (!(base_full > 1) || !(base_swa > 1) || !std::isfinite(base_full) ||
      !std::isfinite(base_swa)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step35.rope.freq_base (%g) and freq_base_swa (%g) must be finite and > 1",
                        base_full, base_swa));
  }
  // Spec 2.2 (the late rule): rope.dimension_count verbatim, else key_length / 2; SWA layers use
  // rope.dimension_count_swa, else the un-halved full value.
  const bool has_rot = md.Contains(Key("rope.dimension_count"));
  int64_t rot_raw = 0, n_rot_swa = 0;
  ASSIGN_OR_RETURN(rot_raw, OptionalInt(md, Key("rope.dimension_count"), key_length));
  const int64_t n_rot_full = has_rot ? rot_raw : key_length / 2;
  ASSIGN_OR_RETURN(n_rot_swa, OptionalInt(md, Key("rope.dimension_count_swa"), rot_raw));

  int64_t expert_count = 0, expert_used = 0, n_ff_shexp = 0, gating = 0;
  ASSIGN_OR_RETURN(expert_count, OptionalInt(md, Key("expert_count"), 0));
  RETURN_IF_ERROR(CheckRange(Key("expert_count"), expert_count, 0, 65536));
  ASSIGN_OR_RETURN(expert_used, OptionalInt(md, Key("expert_used_count"), 0));
  RETURN_IF_ERROR(CheckRange(Key("expert_used_count"), expert_used, 0, expert_count));
  if (expert_count > 0 && expert_used == 0) {
    return absl::InvalidArgumentError(
        "step35.expert_used_count is missing or 0 while step35.expert_count > 0");
  }
  hp.n_expert = expert_count;
  hp.n_expert_used = expert_used;
  std::optional<std::vector<int64_t>> n_ff_exp;
  ASSIGN_OR_RETURN(n_ff_exp, PerLayer<int64_t>(md, Key("expert_feed_forward_length"), n));
  if (!n_ff_exp && expert_count > 0) {
    return absl::InvalidArgumentError("missing key step35.expert_feed_forward_length");
  }
  ASSIGN_OR_RETURN(n_ff_shexp, OptionalInt(md, Key("expert_shared_feed_forward_length"), 0));
  RETURN_IF_ERROR(CheckRange(Key("expert_shared_feed_forward_length"), n_ff_shexp, 0, kMaxDim));
  hp.n_ff_shexp = n_ff_shexp;
  double scale = 0;
  ASSIGN_OR_RETURN(scale, OptionalFloat(md, Key("expert_weights_scale"), 0.0));
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step35.expert_weights_scale = %g must be finite and >= 0", scale));
  }
  hp.expert_weights_scale = static_cast<float>(scale);
  if (md.Contains(Key("expert_weights_norm"))) {
    ASSIGN_OR_RETURN(hp.expert_weights_norm, md.GetBool(Key("expert_weights_norm")));
  }
  ASSIGN_OR_RETURN(gating, OptionalInt(md, Key("expert_gating_func"), 0));
  if (gating == 0) gating = static_cast<int>(GatingFunc::kSigmoid);
  if (gating != static_cast<int>(GatingFunc::kSigmoid) &&
      gating != static_cast<int>(GatingFunc::kSoftmax)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step35.expert_gating_func = %d is not supported (1 softmax and 2 sigmoid are)", gating));
  }
  hp.gating = static_cast<GatingFunc>(gating);

  std::optional<std::vector<double>> clamp_exp, clamp_shexp;
  ASSIGN_OR_RETURN(clamp_exp, PerLayer<double>(md, Key("swiglu_clamp_exp"), n));
  ASSIGN_OR_RETURN(clamp_shexp, PerLayer<double>(md, Key("swiglu_clamp_shexp"), n));

  hp.layers.resize(n);
  for (int il = 0; il < n; ++il) {
    LayerHparams& layer = hp.layers[il];
    layer.is_mtp = il >= hp.n_layer;
    layer.is_swa = (*pattern)[il] != 0;
    layer.n_head = static_cast<int>((*heads)[il]);
    layer.n_head_kv = static_cast<int>((*heads_kv)[il]);
    layer.head_dim_k = static_cast<int>(layer.is_swa ? key_length_swa : key_length);
    layer.head_dim_v = static_cast<int>(layer.is_swa ? value_length_swa : value_length);
    layer.n_rot = static_cast<int>(layer.is_swa ? n_rot_swa : n_rot_full);
    if (layer.n_rot < 0 || layer.n_rot % 2 != 0 || layer.n_rot > layer.head_dim_k) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %d: rotary dims %d must be even and at most the head dim %d (from "
                          "step35.rope.dimension_count%s)",
                          il, layer.n_rot, layer.head_dim_k, layer.is_swa ? "_swa" : ""));
    }
    layer.rope_base = static_cast<float>(layer.is_swa ? base_swa : base_full);
    layer.use_rope_freqs = !layer.is_swa;
    layer.clamp_exp = clamp_exp ? static_cast<float>((*clamp_exp)[il]) : 0.0f;
    layer.clamp_shexp = clamp_shexp ? static_cast<float>((*clamp_shexp)[il]) : 0.0f;
    layer.n_ff = n_ff ? (*n_ff)[il] : 0;
    layer.n_ff_exp = n_ff_exp ? (*n_ff_exp)[il] : 0;
    RETURN_IF_ERROR(CheckRange(absl::StrFormat("%s[%d]", Key("feed_forward_length"), il),
                               layer.n_ff, 0, kMaxDim));
    RETURN_IF_ERROR(CheckRange(absl::StrFormat("%s[%d]", Key("expert_feed_forward_length"), il),
                               layer.n_ff_exp, 0, kMaxDim));
    if (!layer.is_mtp) hp.n_rot_max = std::max(hp.n_rot_max, layer.n_rot);
  }
  hp.step5_dense_fallback = hp.n_layer == 92 && hp.n_expert == 352;
  return hp;
}

std::string Hparams::Summary() const {
  int full = 0, swa = 0;
  for (int il = 0; il < n_layer; ++il) (layers[il].is_swa ? swa : full)++;
  std::string summary = absl::StrFormat(
      "step35%s: %d trunk layers (%d full, %d sliding, window %d) + %d MTP, d=%d, ctx %d, "
      "experts %d (top %d), rms_eps %g",
      name.empty() ? "" : absl::StrCat(" '", name, "'"), n_layer, full, swa, sliding_window,
      n_nextn, n_embd, n_ctx_train, n_expert, n_expert_used, rms_eps);
  if (step5_dense_fallback) {
    absl::StrAppend(&summary,
                    "; Step-5 sparse attention is not implemented yet: running the dense "
                    "attention fallback (spec 6.3)");
  }
  return summary;
}

}  // namespace stepserve::model
