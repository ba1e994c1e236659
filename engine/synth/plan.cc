#include "engine/synth/plan.h"

#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/quant/quant.h"

namespace stepserve::synth {
namespace {

constexpr float kNormSpread = 0.1f;  // norm weights in [0.9, 1.1]
constexpr float kProbsBias = 0.1f;   // exp_probs_b in [-0.1, 0.1] (spec 8.1)
constexpr float kRouterGain = 0.5f;  // router logits of RMS ~0.5: the bias matters for selection
constexpr float kEmbeddingRms = 1.0f;

class Planner {
 public:
  Planner(const Step35Config& c, const QuantRecipe& r, ModelPlan* plan)
      : c_(c), r_(r), plan_(plan) {}

  absl::Status Matrix(int layer, std::string role, std::vector<int64_t> ne, float gain = 1.0f) {
    const bool is_mtp = layer >= c_.n_layer;
    const GgmlType wanted = RecipeType(r_, role, layer, is_mtp, c_.block_count());
    const std::string name = Name(layer, role, ".weight");
    absl::StatusOr<GgmlType> type = ResolveType(wanted, ne[0]);
    if (!type.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensor %s: %s", name, type.status().message()));
    }
    if (*type != wanted) {
      plan_->notes.push_back(absl::StrFormat(
          "%s: row of %d elements is not a multiple of the %s block (%d); using %s", name, ne[0],
          GgmlTypeName(wanted), TypeInfo(wanted).block_elems, GgmlTypeName(*type)));
    }
    const float rms =
        role == "token_embd" ? kEmbeddingRms : gain * c_.weight_gain / std::sqrt(float(ne[0]));
    Add(layer, std::move(role), std::move(ne), *type, FillKind::kMatrix, rms);
    const GgmlTypeInfo& info = TypeInfo(*type);
    plan_->tensors.back().random_blocks =
        c_.fast_fill && info.block_elems > 1 && quant::CanFillRandom(*type);
    return absl::OkStatus();
  }

  void F32(int layer, std::string role, std::vector<int64_t> ne, FillKind fill, float scale,
           std::string_view suffix = ".weight") {
    Add(layer, std::move(role), std::move(ne), GgmlType::kF32, fill, scale, suffix);
  }

  absl::Status Layer(int il) {
    const int64_t d = c_.n_embd;
    const int64_t q = int64_t{c_.head_count[il]} * c_.head_dim;
    const int64_t kv = int64_t{c_.head_count_kv[il]} * c_.head_dim;
    const bool is_mtp = il >= c_.n_layer;
    F32(il, "attn_norm", {d}, FillKind::kNorm, kNormSpread);
    RETURN_IF_ERROR(Matrix(il, "attn_q", {d, q}));
    RETURN_IF_ERROR(Matrix(il, "attn_k", {d, kv}));
    RETURN_IF_ERROR(Matrix(il, "attn_v", {d, kv}));
    F32(il, "attn_q_norm", {c_.head_dim}, FillKind::kNorm, kNormSpread);
    F32(il, "attn_k_norm", {c_.head_dim}, FillKind::kNorm, kNormSpread);
    RETURN_IF_ERROR(Matrix(il, "attn_gate", {d, c_.head_count[il]}));
    RETURN_IF_ERROR(Matrix(il, "attn_output", {q, d}));
    F32(il, "ffn_norm", {d}, FillKind::kNorm, kNormSpread);
    if (c_.is_moe[il]) {
      F32(il, "ffn_gate_inp", {d, c_.n_expert}, FillKind::kRouter,
          kRouterGain / std::sqrt(float(d)));
      F32(il, "exp_probs_b", {c_.n_expert}, FillKind::kUniform, kProbsBias, ".bias");
      RETURN_IF_ERROR(Matrix(il, "ffn_gate_exps", {d, c_.n_ff_exp, c_.n_expert}));
      RETURN_IF_ERROR(Matrix(il, "ffn_up_exps", {d, c_.n_ff_exp, c_.n_expert}));
      RETURN_IF_ERROR(Matrix(il, "ffn_down_exps", {c_.n_ff_exp, d, c_.n_expert}));
      RETURN_IF_ERROR(Matrix(il, "ffn_gate_shexp", {d, c_.n_ff_shexp}));
      RETURN_IF_ERROR(Matrix(il, "ffn_up_shexp", {d, c_.n_ff_shexp}));
      RETURN_IF_ERROR(Matrix(il, "ffn_down_shexp", {c_.n_ff_shexp, d}));
    } else {
      RETURN_IF_ERROR(Matrix(il, "ffn_gate", {d, c_.n_ff}));
      RETURN_IF_ERROR(Matrix(il, "ffn_up", {d, c_.n_ff}));
      RETURN_IF_ERROR(Matrix(il, "ffn_down", {c_.n_ff, d}));
    }
    if (is_mtp) {
      RETURN_IF_ERROR(Matrix(il, "nextn.eh_proj", {2 * d, d}));
      F32(il, "nextn.enorm", {d}, FillKind::kNorm, kNormSpread);
      F32(il, "nextn.hnorm", {d}, FillKind::kNorm, kNormSpread);
      F32(il, "nextn.shared_head_norm", {d}, FillKind::kNorm, kNormSpread);
      RETURN_IF_ERROR(Matrix(il, "nextn.shared_head_head", {d, c_.n_vocab}));
    }
    return absl::OkStatus();
  }

 private:
  std::string Name(int layer, std::string_view role, std::string_view suffix) const {
    if (layer < 0) return absl::StrFormat("%s%s", role, suffix);
    return absl::StrFormat("blk.%d.%s%s", layer, role, suffix);
  }

  void Add(int layer, std::string role, std::vector<int64_t> ne, GgmlType type, FillKind fill,
           float scale, std::string_view suffix = ".weight") {
    TensorSpec t;
    t.name = Name(layer, role, suffix);
    t.role = std::move(role);
    t.layer = layer;
    t.ne = std::move(ne);
    t.type = type;
    t.fill = fill;
    t.scale = scale;
    plan_->tensors.push_back(std::move(t));
  }

  const Step35Config& c_;
  const QuantRecipe& r_;
  ModelPlan* plan_;
};

}  // namespace

int64_t TensorSpec::n_elements() const {
  int64_t n = 1;
  for (int64_t v : ne) n *= v;
  return n;
}

uint64_t ModelPlan::total_bytes() const {
  uint64_t total = 0;
  for (const TensorSpec& t : tensors) total += static_cast<uint64_t>(t.nbytes());
  return total;
}

const TensorSpec* ModelPlan::Find(const std::string& name) const {
  for (const TensorSpec& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int64_t ExpectedTensorCount(const Step35Config& c, FilePart part) {
  int64_t n = 4;
  if (part != FilePart::kMtpOnly) {
    for (int il = 0; il < c.n_layer; ++il) n += c.is_moe[il] ? 17 : 12;
  }
  if (part != FilePart::kTrunkOnly) n += 17 * int64_t{c.n_mtp};
  return n;
}

absl::StatusOr<ModelPlan> BuildPlan(const Step35Config& config, const QuantRecipe& recipe,
                                    FilePart part) {
  if (config.n_vocab <= 0) {
    return absl::InvalidArgumentError("BuildPlan: n_vocab is not set");
  }
  const size_t n = static_cast<size_t>(config.block_count());
  if (config.head_count.size() != n || config.head_count_kv.size() != n ||
      config.is_swa.size() != n || config.is_moe.size() != n || config.clamp_exp.size() != n ||
      config.clamp_shexp.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BuildPlan: per-layer arrays of preset %s do not have block_count = %d "
                        "entries",
                        config.preset, config.block_count()));
  }
  if (part == FilePart::kMtpOnly && config.n_mtp == 0) {
    return absl::InvalidArgumentError("BuildPlan: an MTP-only file needs MTP layers");
  }
  ModelPlan plan;
  plan.part = part;
  plan.config = part == FilePart::kTrunkOnly ? WithoutMtp(config) : config;
  plan.rope_freqs = ComputeRopeFreqs(config);
  const Step35Config& c = plan.config;
  Planner p(c, recipe, &plan);

  p.F32(-1, "rope_freqs", {c.rope_freqs_len()}, FillKind::kRopeFreqs, 0.0f);
  RETURN_IF_ERROR(p.Matrix(-1, "token_embd", {c.n_embd, c.n_vocab}));
  const int first = part == FilePart::kMtpOnly ? c.n_layer : 0;
  for (int il = first; il < c.block_count(); ++il) {
    RETURN_IF_ERROR(p.Layer(il));
  }
  p.F32(-1, "output_norm", {c.n_embd}, FillKind::kNorm, kNormSpread);
  RETURN_IF_ERROR(p.Matrix(-1, "output", {c.n_embd, c.n_vocab}));

  if (recipe.file_type) {
    plan.file_type = *recipe.file_type;
  } else {
    std::map<GgmlType, int64_t> elems;
    for (const TensorSpec& t : plan.tensors) {
      if (t.fill == FillKind::kMatrix) elems[t.type] += t.n_elements();
    }
    GgmlType best = GgmlType::kF32;
    int64_t best_n = -1;
    for (const auto& [type, count] : elems) {
      if (count > best_n) best = type, best_n = count;
    }
    plan.file_type = FileTypeForMajority(best);
  }
  return plan;
}

}  // namespace stepserve::synth
