// `stepserve make-model`: resolves a preset, vocabulary and quantization recipe into tensor plans
// and streams seeded random weights through the GGUF writer, as one combined file, a trunk-only
// plus an MTP-only file (spec 5.7), or a trunk-only file, optionally split into shards.
#ifndef STEPSERVE_ENGINE_SYNTH_MAKE_MODEL_H_
#define STEPSERVE_ENGINE_SYNTH_MAKE_MODEL_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/synth/plan.h"
#include "engine/synth/presets.h"
#include "engine/synth/quant_recipe.h"
#include "engine/synth/vocab.h"

namespace stepserve::synth {

enum class MtpLayout {
  kEmbedded,  // one file with trunk and MTP layers
  kSeparate,  // trunk-only file + "mtp-<name>" MTP-only file beside it
  kNone,      // trunk-only file
};

struct MakeModelOptions {
  std::string preset = "tiny";
  std::string out;  // path of the (first) file, ending in .gguf
  int layers = 0;   // 0: all trunk layers of the preset
  uint64_t seed = 0;
  std::string recipe;  // empty: "mix" for tiny, "iq4_xs" for the real-size presets
  // (group, type name) in command-line order; see ApplyTypeOverride.
  std::vector<std::pair<std::string, std::string>> type_overrides;
  MtpLayout mtp = MtpLayout::kEmbedded;
  uint64_t split_max_bytes = 0;  // 0: no split
  int threads = 0;               // fill threads; 0: one per hardware thread
  int bpe_merges = 3000;
  bool write_rope_dims = true;  // false: legacy-converter layout without rope.dimension_count*
  // Big tensors left as holes (gguf::WriteOptions::tensor_data_holes): seconds and
  // no disk space for a full-size file whose weights a benchmark fills in device memory.
  bool no_data = false;
};

// Everything about the model except the tensor data.
struct ResolvedModel {
  Step35Config config;  // n_vocab set
  QuantRecipe recipe;
  SynthVocab vocab;
};
absl::StatusOr<ResolvedModel> ResolveModel(const MakeModelOptions& options);

struct WrittenFile {
  FilePart part;
  std::vector<std::string> paths;  // one per shard
  int64_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
};

// Writes the file(s). Progress and type-fallback notes go to `log` when not null.
absl::StatusOr<std::vector<WrittenFile>> MakeModel(const MakeModelOptions& options,
                                                   std::ostream* log);

// "dir/name.gguf" -> "dir/mtp-name.gguf".
std::string MtpCompanionPath(const std::string& out);

// Parses "2G", "500M", "64K", "1000" (bytes; binary multiples as gguf-split does).
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_MAKE_MODEL_H_
