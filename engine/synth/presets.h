// Hyperparameters of the synthetic step35 presets (spec: shared/spec/step35-architecture.md
// sections 1, 2.1 and 8.1). Plain data shared by the GGUF generator, the CUDA benchmark (which
// fills device memory with the same shapes) and tests that need the preset values.
#ifndef STEPSERVE_ENGINE_SYNTH_PRESETS_H_
#define STEPSERVE_ENGINE_SYNTH_PRESETS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace stepserve::synth {

// llama3-style RoPE scaling carried by the rope_freqs tensor (spec 3.5).
struct Llama3Rope {
  double factor = 1.0;
  double original_context = 0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 32.0;
};

struct Step35Config {
  std::string preset;  // "tiny", "step-3.5-flash", "step-5"
  std::string name;    // general.name
  int n_layer = 0;     // trunk layers
  int n_mtp = 0;       // MTP (nextn) layers after the trunk
  int64_t n_embd = 0;
  int64_t n_vocab = 0;   // 0: the trained BPE vocabulary's own size
  int64_t n_ff = 0;      // dense FFN (dense trunk layers and MTP layers)
  int64_t n_ff_exp = 0;  // routed expert width
  int64_t n_ff_shexp = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t head_dim = 0;  // K = V head dimension
  uint32_t context_length = 0;
  uint32_t sliding_window = 0;
  float rms_eps = 1e-5f;
  float rope_base_full = 1e4f;
  float rope_base_swa = 1e4f;
  int n_rot_full = 0;
  int n_rot_swa = 0;
  // Write rope.dimension_count / _swa (the late converter does; the legacy one did not).
  bool write_rope_dims = true;
  Llama3Rope rope_scaling;
  float expert_weights_scale = 0.0f;
  bool expert_weights_norm = false;
  uint32_t expert_gating_func = 2;  // sigmoid
  uint32_t leading_dense_block_count = 0;
  // Per layer, n_layer + n_mtp entries (the GGUF arrays of the combined file).
  std::vector<int32_t> head_count;
  std::vector<int32_t> head_count_kv;
  std::vector<bool> is_swa;  // sliding_window_pattern
  std::vector<bool> is_moe;  // MoE tensors present (MTP layers are always dense)
  std::vector<float> clamp_exp;
  std::vector<float> clamp_shexp;
  // Matrix RMS multiplier on top of 1/sqrt(fan_in): a little above 1 for the miniature so
  // activations keep their size through few random layers.
  float weight_gain = 1.0f;
  // Fill block-quantized matrices with random valid blocks instead of quantizing gaussian floats:
  // on for the real-size presets, where quantizing GBs of Q6_K/Q4_K would take minutes.
  bool fast_fill = false;

  int block_count() const { return n_layer + n_mtp; }
  // Rotated dims of layer il, and the largest over the trunk (rope_freqs has n_rot_max/2 entries,
  // padded to head_dim/2 as the converter does).
  int n_rot(int il) const { return is_swa[il] ? n_rot_swa : n_rot_full; }
  int64_t rope_freqs_len() const { return head_dim / 2; }
};

// Names accepted by PresetConfig, for --help.
std::vector<std::string> PresetNames();

// The full-size hyperparameters of a preset. `n_vocab` is left 0 for "tiny" (the trained BPE
// vocabulary decides) and 128896 for the real-size presets.
absl::StatusOr<Step35Config> PresetConfig(std::string_view preset);

// Keeps the first `n` trunk layers (1 <= n <= n_layer): per-layer arrays keep entries 0..n-1
// plus the MTP entries, which thereby renumber to n..n+n_mtp-1. Values stay tied to their real
// layer index, so e.g. the step-3.5-flash clamps on layers 43 and 44 disappear for n <= 43.
absl::Status KeepTrunkLayers(int n, Step35Config* config);

// Drops the MTP layers (trunk-only layout: block_count = n_layer, arrays of n_layer entries).
Step35Config WithoutMtp(const Step35Config& config);

// The llama3 rope_freqs divisors (spec 3.5): r/2 computed values for rotary dim r =
// n_rot_full and base rope_base_full, padded with 1.0 to head_dim/2 entries.
std::vector<float> ComputeRopeFreqs(const Step35Config& config);

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_PRESETS_H_
