#include "engine/synth/presets.h"

#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stepserve::synth {
namespace {

// Fills the per-layer arrays from per-kind values; `full(il)` decides the attention type of trunk
// layer il, `moe(il)` its FFN kind. MTP layers are SWA, dense, unclamped (spec 2.1: "MTP 0").
template <typename FullFn, typename MoeFn, typename ClampFn>
void FillLayers(Step35Config& c, int32_t heads_full, int32_t heads_swa, int32_t heads_kv,
                FullFn full, MoeFn moe, ClampFn clamps) {
  const int n = c.block_count();
  c.head_count.assign(n, 0);
  c.head_count_kv.assign(n, heads_kv);
  c.is_swa.assign(n, true);
  c.is_moe.assign(n, false);
  c.clamp_exp.assign(n, 0.0f);
  c.clamp_shexp.assign(n, 0.0f);
  for (int il = 0; il < n; ++il) {
    const bool trunk = il < c.n_layer;
    const bool is_full = trunk && full(il);
    c.is_swa[il] = !is_full;
    c.head_count[il] = is_full ? heads_full : heads_swa;
    c.is_moe[il] = trunk && moe(il);
    if (trunk) clamps(il, &c.clamp_exp[il], &c.clamp_shexp[il]);
  }
}

Step35Config Tiny() {
  Step35Config c;
  c.preset = "tiny";
  c.name = "step35-mini (synthetic)";
  c.n_layer = 6;
  c.n_mtp = 3;
  c.n_embd = 256;
  c.n_vocab = 0;
  c.n_ff = 512;
  c.n_ff_exp = 64;
  c.n_ff_shexp = 64;
  c.n_expert = 16;
  c.n_expert_used = 4;
  c.head_dim = 32;
  c.context_length = 4096;
  c.sliding_window = 16;
  c.rope_base_full = 5e6f;
  c.rope_base_swa = 1e4f;
  c.n_rot_full = 16;
  c.n_rot_swa = 32;
  c.rope_scaling = {2.0, 256.0, 1.0, 32.0};
  c.expert_weights_scale = 2.5f;
  c.expert_weights_norm = true;
  c.leading_dense_block_count = 2;
  c.weight_gain = 1.5f;
  // Spec 8.1: clamps chosen so that every clamp branch triggers with short random inputs; layer 1
  // (dense) exercises the dense-layer use of the shared-expert clamp.
  FillLayers(
      c, 4, 6, 2, [](int il) { return il % 4 == 0; }, [](int il) { return il >= 2; },
      [](int il, float* exp, float* shexp) {
        if (il >= 4) *exp = 0.5f;
        if (il == 1 || il >= 4) *shexp = 0.4f;
      });
  return c;
}

Step35Config Step35Flash() {
  Step35Config c;
  c.preset = "step-3.5-flash";
  c.name = "Step-3.5-Flash (synthetic)";
  c.n_layer = 45;
  c.n_mtp = 3;
  c.n_embd = 4096;
  c.n_vocab = 128896;
  c.n_ff = 11264;
  c.n_ff_exp = 1280;
  c.n_ff_shexp = 1280;
  c.n_expert = 288;
  c.n_expert_used = 8;
  c.head_dim = 128;
  c.context_length = 262144;
  c.sliding_window = 512;
  c.rope_base_full = 5e6f;
  c.rope_base_swa = 1e4f;
  c.n_rot_full = 64;
  c.n_rot_swa = 128;
  c.rope_scaling = {2.0, 131072.0, 1.0, 32.0};
  c.expert_weights_scale = 3.0f;
  c.expert_weights_norm = true;
  c.leading_dense_block_count = 3;
  c.fast_fill = true;
  FillLayers(
      c, 64, 96, 8, [](int il) { return il % 4 == 0; }, [](int il) { return il >= 3; },
      [](int il, float* exp, float* shexp) {
        if (il == 43 || il == 44) {
          *exp = 7.0f;
          *shexp = 16.0f;
        }
      });
  return c;
}

Step35Config Step5() {
  Step35Config c;
  c.preset = "step-5";
  c.name = "Step-5-Preview (synthetic, dense attention)";
  c.n_layer = 92;
  c.n_mtp = 3;
  c.n_embd = 4096;
  c.n_vocab = 128896;
  c.n_ff = 13824;
  c.n_ff_exp = 1536;
  c.n_ff_shexp = 1536;
  c.n_expert = 352;
  c.n_expert_used = 8;
  c.head_dim = 192;
  c.context_length = 1048576;
  c.sliding_window = 512;
  c.rope_base_full = 1e7f;
  c.rope_base_swa = 1e4f;
  c.n_rot_full = 64;
  c.n_rot_swa = 192;
  c.rope_scaling = {1.0, 1048576.0, 1.0, 32.0};  // factor 1: rope_freqs all 1.0
  c.expert_weights_scale = 3.0f;
  c.expert_weights_norm = true;
  c.leading_dense_block_count = 3;
  c.fast_fill = true;
  FillLayers(
      c, 64, 64, 4, [](int il) { return il % 4 == 3; }, [](int il) { return il >= 3 && il != 91; },
      [](int il, float* exp, float* shexp) {
        *exp = 7.0f;
        *shexp = 7.0f;
      });
  return c;
}

template <typename T>
void KeepEntries(int n, int n_layer, int n_mtp, std::vector<T>* v) {
  std::vector<T> out(v->begin(), v->begin() + n);
  out.insert(out.end(), v->begin() + n_layer, v->begin() + n_layer + n_mtp);
  *v = std::move(out);
}

}  // namespace

std::vector<std::string> PresetNames() { return {"tiny", "step-3.5-flash", "step-5"}; }

absl::StatusOr<Step35Config> PresetConfig(std::string_view preset) {
  if (preset == "tiny") return Tiny();
  if (preset == "step-3.5-flash") return Step35Flash();
  if (preset == "step-5") return Step5();
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown preset \"%s\" (known: tiny, step-3.5-flash, step-5)", preset));
}

absl::Status KeepTrunkLayers(int n, Step35Config* c) {
  if (n < 1 || n > c->n_layer) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--layers %d out of range: preset %s has %d trunk layers", n, c->preset, c->n_layer));
  }
  KeepEntries(n, c->n_layer, c->n_mtp, &c->head_count);
  KeepEntries(n, c->n_layer, c->n_mtp, &c->head_count_kv);
  KeepEntries(n, c->n_layer, c->n_mtp, &c->is_swa);
  KeepEntries(n, c->n_layer, c->n_mtp, &c->is_moe);
  KeepEntries(n, c->n_layer, c->n_mtp, &c->clamp_exp);
  KeepEntries(n, c->n_layer, c->n_mtp, &c->clamp_shexp);
  c->n_layer = n;
  return absl::OkStatus();
}

Step35Config WithoutMtp(const Step35Config& config) {
  Step35Config c = config;
  const int n = c.n_layer;
  c.head_count.resize(n);
  c.head_count_kv.resize(n);
  c.is_swa.resize(n);
  c.is_moe.resize(n);
  c.clamp_exp.resize(n);
  c.clamp_shexp.resize(n);
  c.n_mtp = 0;
  return c;
}

std::vector<float> ComputeRopeFreqs(const Step35Config& c) {
  std::vector<float> out(static_cast<size_t>(c.rope_freqs_len()), 1.0f);
  const Llama3Rope& s = c.rope_scaling;
  const double r = c.n_rot_full;
  const double lambda_hi = s.original_context / s.high_freq_factor;  // shorter wavelengths: 1
  const double lambda_lo = s.original_context / s.low_freq_factor;   // longer: factor
  for (int j = 0; j < c.n_rot_full / 2 && j < static_cast<int>(out.size()); ++j) {
    const double freq = std::pow(static_cast<double>(c.rope_base_full), -2.0 * j / r);
    const double lambda = 2.0 * std::numbers::pi / freq;
    double ff;
    if (lambda < lambda_hi) {
      ff = 1.0;
    } else if (lambda > lambda_lo) {
      ff = s.factor;
    } else {
      const double smooth = (s.original_context / lambda - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      ff = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out[j] = static_cast<float>(ff);
  }
  return out;
}

}  // namespace stepserve::synth
