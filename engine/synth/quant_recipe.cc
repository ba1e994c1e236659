#include "engine/synth/quant_recipe.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"

namespace stepserve::synth {
namespace {

QuantRecipe Uniform(std::string name, GgmlType t, uint32_t file_type) {
  QuantRecipe r;
  r.name = std::move(name);
  r.embd = r.attn_q = r.attn_k = r.attn_v = r.attn_output = r.attn_gate = t;
  r.ffn = r.exp_gate_up = r.exp_down = r.output = t;
  r.file_type = file_type;
  return r;
}

// llama.cpp's use_more_bits(i_layer, n_layers).
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::vector<std::string> RecipeNames() {
  return {"f32", "f16", "bf16", "q8_0", "iq4_xs", "q4_k_m", "step5-q2", "step37-mq83", "mix"};
}

absl::StatusOr<QuantRecipe> RecipeByName(std::string_view name) {
  if (name == "f32") return Uniform("f32", GgmlType::kF32, 0);
  if (name == "f16") return Uniform("f16", GgmlType::kF16, 1);
  if (name == "bf16") return Uniform("bf16", GgmlType::kBF16, 32);
  if (name == "q8_0") return Uniform("q8_0", GgmlType::kQ8_0, 7);
  if (name == "iq4_xs") {
    QuantRecipe r = Uniform("iq4_xs", GgmlType::kIQ4_XS, 30);
    r.attn_v = GgmlType::kQ5_K;
    r.output = GgmlType::kQ6_K;
    return r;
  }
  if (name == "q4_k_m") {
    QuantRecipe r = Uniform("q4_k_m", GgmlType::kQ4_K, 15);
    r.output = GgmlType::kQ6_K;
    r.more_bits = GgmlType::kQ6_K;
    return r;
  }
  if (name == "step5-q2") {
    QuantRecipe r = Uniform("step5-q2", GgmlType::kQ8_0, 19);
    r.exp_gate_up = GgmlType::kIQ2_XXS;
    r.exp_down = GgmlType::kQ2_K;
    r.embd = GgmlType::kBF16;
    r.mtp = GgmlType::kQ6_K;
    return r;
  }
  if (name == "step37-mq83") {
    QuantRecipe r = Uniform("step37-mq83", GgmlType::kQ8_0, 19);
    r.exp_gate_up = GgmlType::kIQ2_XXS;
    r.exp_down = GgmlType::kQ4_K;
    r.mtp = GgmlType::kQ8_0;
    return r;
  }
  if (name == "mix") {
    QuantRecipe r = Uniform("mix", GgmlType::kQ8_0, 0);
    r.file_type.reset();
    r.embd = GgmlType::kF16;
    r.ffn = GgmlType::kQ4_K;
    r.exp_gate_up = GgmlType::kQ4_K;
    r.exp_down = GgmlType::kQ6_K;
    r.output = GgmlType::kQ6_K;
    r.mtp = GgmlType::kQ8_0;
    return r;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown recipe \"%s\" (known: f32, f16, bf16, q8_0, iq4_xs, q4_k_m, step5-q2, "
      "step37-mq83, mix)",
      name));
}

absl::Status ApplyTypeOverride(std::string_view group, std::string_view type_name, QuantRecipe* r) {
  const std::optional<GgmlType> parsed = ParseGgmlTypeName(type_name);
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--type-%s: unknown ggml type \"%s\"", group, type_name));
  }
  const GgmlType t = *parsed;
  if (!CanProduce(t)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--type-%s: cannot generate blocks of type %s", group, GgmlTypeName(t)));
  }
  if (group == "embd") {
    r->embd = t;
  } else if (group == "attn") {
    r->attn_q = r->attn_k = r->attn_v = r->attn_output = r->attn_gate = t;
  } else if (group == "attn-q") {
    r->attn_q = t;
  } else if (group == "attn-k") {
    r->attn_k = t;
  } else if (group == "attn-v") {
    r->attn_v = t;
  } else if (group == "attn-o") {
    r->attn_output = t;
  } else if (group == "attn-gate") {
    r->attn_gate = t;
  } else if (group == "ffn") {
    r->ffn = t;
  } else if (group == "exp-gate-up") {
    r->exp_gate_up = t;
  } else if (group == "exp-down") {
    r->exp_down = t;
  } else if (group == "output") {
    r->output = t;
  } else if (group == "mtp") {
    r->mtp = t;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat("unknown type group \"%s\"", group));
  }
  // An explicit override changes the mix, so the recipe's nominal ftype no longer describes it.
  r->file_type.reset();
  r->more_bits.reset();
  return absl::OkStatus();
}

GgmlType RecipeType(const QuantRecipe& r, std::string_view role, int layer, bool is_mtp,
                    int block_count) {
  if (is_mtp && r.mtp) return *r.mtp;
  if (role == "token_embd") return r.embd;
  if (role == "output" || role == "nextn.shared_head_head") return r.output;
  const bool more_bits = r.more_bits && layer >= 0 && UseMoreBits(layer, block_count);
  if (role == "attn_q") return r.attn_q;
  if (role == "attn_k") return r.attn_k;
  if (role == "attn_v") return more_bits ? *r.more_bits : r.attn_v;
  if (role == "attn_output") return r.attn_output;
  if (role == "attn_gate") return r.attn_gate;
  if (role == "ffn_gate_exps" || role == "ffn_up_exps") return r.exp_gate_up;
  if (role == "ffn_down_exps") return more_bits ? *r.more_bits : r.exp_down;
  if (EndsWith(role, "ffn_down") || role == "ffn_down_shexp") {
    return more_bits ? *r.more_bits : r.ffn;
  }
  return r.ffn;  // ffn_gate/up, *_shexp, nextn.eh_proj
}

bool CanProduce(GgmlType type) { return quant::CanQuantize(type) || quant::CanFillRandom(type); }

absl::StatusOr<GgmlType> ResolveType(GgmlType type, int64_t ne0) {
  auto fits = [ne0](GgmlType t) { return CanProduce(t) && ne0 % TypeInfo(t).block_elems == 0; };
  if (fits(type)) return type;
  std::vector<GgmlType> chain;
  switch (type) {
    case GgmlType::kQ4_K:
      chain = {GgmlType::kQ5_0, GgmlType::kIQ4_NL};
      break;
    case GgmlType::kQ5_K:
      chain = {GgmlType::kQ5_1};
      break;
    case GgmlType::kQ6_K:
      break;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ1_S:
    case GgmlType::kIQ1_M:
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ4_XS:
      chain = {GgmlType::kIQ4_NL};
      break;
    default:
      break;
  }
  chain.push_back(GgmlType::kQ8_0);
  chain.push_back(GgmlType::kF16);
  for (GgmlType t : chain) {
    if (fits(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "no usable type for rows of %d elements (wanted %s)", ne0, GgmlTypeName(type)));
}

uint32_t FileTypeForMajority(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 0;
    case GgmlType::kF16:
      return 1;
    case GgmlType::kQ4_0:
      return 2;
    case GgmlType::kQ4_1:
      return 3;
    case GgmlType::kQ8_0:
      return 7;
    case GgmlType::kQ5_0:
      return 8;
    case GgmlType::kQ5_1:
      return 9;
    case GgmlType::kQ2_K:
      return 10;
    case GgmlType::kQ3_K:
      return 12;
    case GgmlType::kQ4_K:
      return 15;
    case GgmlType::kQ5_K:
      return 17;
    case GgmlType::kQ6_K:
      return 18;
    case GgmlType::kIQ2_XXS:
      return 19;
    case GgmlType::kIQ2_XS:
      return 20;
    case GgmlType::kIQ3_XXS:
      return 23;
    case GgmlType::kIQ1_S:
      return 24;
    case GgmlType::kIQ4_NL:
      return 25;
    case GgmlType::kIQ3_S:
      return 26;
    case GgmlType::kIQ2_S:
      return 28;
    case GgmlType::kIQ4_XS:
      return 30;
    case GgmlType::kIQ1_M:
      return 31;
    case GgmlType::kBF16:
      return 32;
    case GgmlType::kMXFP4:
      return 38;
    case GgmlType::kNVFP4:
      return 39;
    default:
      return 1024;  // "guessed": no ftype names this type
  }
}

}  // namespace stepserve::synth
