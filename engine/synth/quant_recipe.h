// Which ggml type each weight of a synthetic step35 model gets: named recipes (mixes modelled on
// real files), per-group overrides, and llama-quantize style fallbacks for rows that are not a
// multiple of the chosen type's block.
//
// Recipes (F32 always for norms, router, exp_probs_b and rope_freqs):
//   f32 / f16 / bf16 / q8_0  every matrix of that type.
//   iq4_xs       every matrix IQ4_XS except attn_v Q5_K and output Q6_K (ftype 30).
//   q4_k_m       llama.cpp's Q4_K_M (ftype 15): Q4_K everywhere, output Q6_K, and Q6_K for attn_v
//                and every ffn_down (dense, shared, routed) on the layers where llama.cpp's
//                use_more_bits(i, n) holds: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, with
//                i = layer index and n = block_count of the file.
//   step5-q2     routed gate/up IQ2_XXS, routed down Q2_K, attention/shared/dense/output Q8_0,
//                token_embd BF16, MTP layers Q6_K (ftype 19, IQ2_XXS holds most weights).
//   step37-mq83  Step-3.7 "MQ83": attention/shared/dense/output/token_embd Q8_0, routed gate/up
//                IQ2_XXS, routed down Q4_K, MTP layers Q8_0 (ftype 19 by the same majority rule).
//   mix          the tiny preset's default: token_embd F16, attention Q8_0, dense/shared FFN and
//                routed gate/up Q4_K, routed down Q6_K, output Q6_K, MTP layers Q8_0.
#ifndef STEPSERVE_ENGINE_SYNTH_QUANT_RECIPE_H_
#define STEPSERVE_ENGINE_SYNTH_QUANT_RECIPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/quant/ggml_type.h"

namespace stepserve::synth {

struct QuantRecipe {
  std::string name;
  GgmlType embd = GgmlType::kF32;
  GgmlType attn_q = GgmlType::kF32;
  GgmlType attn_k = GgmlType::kF32;
  GgmlType attn_v = GgmlType::kF32;
  GgmlType attn_output = GgmlType::kF32;
  GgmlType attn_gate = GgmlType::kF32;
  GgmlType ffn = GgmlType::kF32;  // dense FFN and shared expert
  GgmlType exp_gate_up = GgmlType::kF32;
  GgmlType exp_down = GgmlType::kF32;
  GgmlType output = GgmlType::kF32;
  // Every matrix of the MTP layers (attention, FFN, eh_proj, shared head). Unset: MTP layers use
  // the trunk groups (eh_proj counts as FFN, the shared head as output).
  std::optional<GgmlType> mtp;
  // Q4_K_M's "more bits" type for attn_v and ffn_down* on use_more_bits layers.
  std::optional<GgmlType> more_bits;
  // general.file_type; unset: derived from the type holding most weight elements.
  std::optional<uint32_t> file_type;
};

std::vector<std::string> RecipeNames();
absl::StatusOr<QuantRecipe> RecipeByName(std::string_view name);

// Per-group overrides as given on the command line (group names: embd, attn, attn-q, attn-k,
// attn-v, attn-o, attn-gate, ffn, exp-gate-up, exp-down, output, mtp). "attn" sets all five
// attention projections, so callers apply it before the per-projection groups.
absl::Status ApplyTypeOverride(std::string_view group, std::string_view type_name,
                               QuantRecipe* recipe);

// The type a weight matrix gets. `role` is the tensor name without "blk.N." and ".weight"
// (e.g. "attn_v", "ffn_down_exps", "nextn.eh_proj", "token_embd", "output").
GgmlType RecipeType(const QuantRecipe& recipe, std::string_view role, int layer, bool is_mtp,
                    int block_count);

// Makes `type` usable for rows of `ne0` elements: the type itself when ne0 is a multiple of its
// block and we can produce its blocks, else the first workable fallback in llama-quantize's spirit
// (Q4_K -> Q5_0 -> IQ4_NL, Q5_K -> Q5_1, Q6_K -> Q8_0, 2/3-bit and IQ types -> IQ4_NL; finally
// Q8_0, F16). Fallbacks we cannot generate (Q5_0, Q5_1) are skipped. Error if nothing fits.
absl::StatusOr<GgmlType> ResolveType(GgmlType type, int64_t ne0);

// llama_ftype for a recipe whose file_type is unset, from the type holding most elements.
uint32_t FileTypeForMajority(GgmlType type);

// Whether we can write blocks of this type (QuantizeRow or FillRandomBlocks).
bool CanProduce(GgmlType type);

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_QUANT_RECIPE_H_
