// The tensor plan of a synthetic step35 file: every tensor's GGUF name, ggml shape, type and how
// its contents are generated, without any data (spec: shared/spec/step35-architecture.md 3.1,
// 3.2, 3.4, 5.7). Writing a file, filling device memory for a benchmark and checking shapes all
// start from this list.
#ifndef STEPSERVE_ENGINE_SYNTH_PLAN_H_
#define STEPSERVE_ENGINE_SYNTH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/quant/ggml_type.h"
#include "engine/synth/presets.h"
#include "engine/synth/quant_recipe.h"

namespace stepserve::synth {

enum class FillKind {
  kMatrix,   // gaussian weights, RMS `scale` (random blocks of that RMS for non-quantizable types)
  kNorm,     // F32, uniform in [1 - scale, 1 + scale] (GGUF norms already carry the +1)
  kRouter,   // F32 gaussian, RMS `scale`
  kUniform,  // F32 uniform in [-scale, scale] (exp_probs_b)
  kRopeFreqs,  // F32, the llama3 divisors of ComputeRopeFreqs
};

struct TensorSpec {
  std::string name;         // GGUF name, e.g. "blk.3.ffn_gate_exps.weight"
  std::string role;         // name without "blk.N." and ".weight": "ffn_gate_exps"
  int layer = -1;           // -1 for global tensors
  std::vector<int64_t> ne;  // ggml order, ne[0] contiguous
  GgmlType type = GgmlType::kF32;
  FillKind fill = FillKind::kMatrix;
  float scale = 0.0f;
  // kMatrix of a block type: write FillRandomBlocks blocks even when QuantizeRow could round
  // gaussian floats (that rounding costs ~100x more; multi-GB real-size files use this).
  bool random_blocks = false;

  int64_t n_elements() const;
  int64_t row_elements() const { return ne[0]; }
  int64_t n_rows() const { return n_elements() / ne[0]; }
  int64_t nbytes() const { return RowBytes(type, ne[0]) * n_rows(); }
};

// Which tensors of the model a file holds (spec 5.7).
enum class FilePart {
  kCombined,   // trunk + MTP layers
  kTrunkOnly,  // no MTP layers, no nextn key, arrays of n_layer entries
  kMtpOnly,    // token_embd, output_norm, output, rope_freqs and blk.{n_layer...}.*
};

struct ModelPlan {
  // The hyperparameters this file's metadata describes (kTrunkOnly: the MTP layers removed).
  Step35Config config;
  FilePart part = FilePart::kCombined;
  std::vector<TensorSpec> tensors;
  std::vector<float> rope_freqs;
  uint32_t file_type = 0;          // general.file_type
  std::vector<std::string> notes;  // type fallbacks, one line each

  uint64_t total_bytes() const;
  const TensorSpec* Find(const std::string& name) const;
};

// Lists the tensors of `config` (n_vocab must be set). With config.fast_fill, quantized matrices
// are marked random_blocks. Weight matrices get the recipe's types,
// made to fit their rows by ResolveType (each substitution is recorded in `notes`); norms, router,
// exp_probs_b and rope_freqs are F32.
absl::StatusOr<ModelPlan> BuildPlan(const Step35Config& config, const QuantRecipe& recipe,
                                    FilePart part);

// The count the real files have: 4 global + 12 per dense trunk layer + 17 per MoE trunk layer +
// 17 per MTP layer (kMtpOnly: 4 + 17 per MTP layer; kTrunkOnly: no MTP layers).
int64_t ExpectedTensorCount(const Step35Config& config, FilePart part);

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_PLAN_H_
