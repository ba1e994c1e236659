#include "engine/synth/make_model.h"

#include <charconv>
#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/synth/fill.h"
#include "engine/synth/metadata.h"

namespace stepserve::synth {
namespace {

absl::StatusOr<WrittenFile> WriteOne(const ModelPlan& plan, const SynthVocab& vocab,
                                     const MakeModelOptions& options, const std::string& path,
                                     std::ostream* log) {
  gguf::WriteOptions write_options;
  write_options.split_max_bytes = options.split_max_bytes;
  write_options.tensor_data_holes = options.no_data;
  gguf::GgufWriter writer(write_options);
  AddModelMetadata(plan, &writer.metadata());
  AddTokenizerMetadata(vocab, &writer.metadata());
  // The lambdas point into `plan`, which outlives Write().
  for (const TensorSpec& spec : plan.tensors) {
    const TensorSpec* s = &spec;
    const std::vector<float>* rope = &plan.rope_freqs;
    const uint64_t seed = options.seed;
    const int threads = options.threads;
    RETURN_IF_ERROR(writer.AddTensor(spec.name, spec.type, spec.ne,
                                     [s, rope, seed, threads](uint8_t* dst, uint64_t nbytes) {
                                       return FillTensor(*s, *rope, seed, threads, dst, nbytes);
                                     }));
  }
  const auto start = std::chrono::steady_clock::now();
  const uint64_t total = plan.total_bytes();
  gguf::GgufWriter::ProgressFn progress;
  if (log != nullptr) {
    // At most one line a second (plus the last), so logs of big files stay readable.
    auto last = std::make_shared<double>(-1.0);
    progress = [log, start, total, last](size_t done, size_t n, uint64_t bytes) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (done != n && secs - *last < 1.0) return;
      *last = secs;
      *log << absl::StrFormat("  %zu/%zu tensors, %.2f / %.2f GiB, %.1f s\n", done, n,
                              bytes / 1073741824.0, total / 1073741824.0, secs);
      log->flush();
    };
  }
  ASSIGN_OR_RETURN(std::vector<std::string> paths, writer.Write(path, progress));
  return WrittenFile{plan.part, std::move(paths), static_cast<int64_t>(plan.tensors.size()), total};
}

}  // namespace

absl::StatusOr<ResolvedModel> ResolveModel(const MakeModelOptions& options) {
  ResolvedModel m;
  ASSIGN_OR_RETURN(m.config, PresetConfig(options.preset));
  if (options.layers != 0) RETURN_IF_ERROR(KeepTrunkLayers(options.layers, &m.config));
  m.config.write_rope_dims = options.write_rope_dims;
  const bool real_size = m.config.n_vocab > 0;
  ASSIGN_OR_RETURN(m.vocab, BuildSynthVocab(options.bpe_merges, real_size ? m.config.n_vocab : 0));
  m.config.n_vocab = static_cast<int64_t>(m.vocab.tokens.size());
  std::string recipe = options.recipe;
  if (recipe.empty()) recipe = real_size ? "iq4_xs" : "mix";
  ASSIGN_OR_RETURN(m.recipe, RecipeByName(recipe));
  // "attn" first so per-projection overrides win whatever their order on the command line.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [group, type] : options.type_overrides) {
      if ((group == "attn") == (pass == 0)) {
        RETURN_IF_ERROR(ApplyTypeOverride(group, type, &m.recipe));
      }
    }
  }
  return m;
}

std::string MtpCompanionPath(const std::string& out) {
  const size_t slash = out.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  return out.substr(0, base) + "mtp-" + out.substr(base);
}

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data()) {
    return absl::InvalidArgumentError(absl::StrFormat("bad size \"%s\" (e.g. 2G, 500M)", text));
  }
  const std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  uint64_t mult = 1;
  if (unit == "K" || unit == "k") {
    mult = uint64_t{1} << 10;
  } else if (unit == "M" || unit == "m") {
    mult = uint64_t{1} << 20;
  } else if (unit == "G" || unit == "g") {
    mult = uint64_t{1} << 30;
  } else if (!unit.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad size \"%s\": unit must be K, M or G", text));
  }
  if (value == 0 || value > UINT64_MAX / mult) {
    return absl::InvalidArgumentError(absl::StrFormat("bad size \"%s\"", text));
  }
  return value * mult;
}

absl::StatusOr<std::vector<WrittenFile>> MakeModel(const MakeModelOptions& options,
                                                   std::ostream* log) {
  if (options.out.size() < 6 || options.out.substr(options.out.size() - 5) != ".gguf") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--out \"%s\" must name a .gguf file", options.out));
  }
  ASSIGN_OR_RETURN(ResolvedModel m, ResolveModel(options));
  std::vector<std::pair<FilePart, std::string>> files;
  switch (options.mtp) {
    case MtpLayout::kEmbedded:
      files.emplace_back(FilePart::kCombined, options.out);
      break;
    case MtpLayout::kSeparate:
      files.emplace_back(FilePart::kTrunkOnly, options.out);
      files.emplace_back(FilePart::kMtpOnly, MtpCompanionPath(options.out));
      break;
    case MtpLayout::kNone:
      files.emplace_back(FilePart::kTrunkOnly, options.out);
      break;
  }
  std::vector<WrittenFile> written;
  for (const auto& [part, path] : files) {
    ASSIGN_OR_RETURN(ModelPlan plan, BuildPlan(m.config, m.recipe, part));
    if (log != nullptr) {
      for (const std::string& note : plan.notes) *log << "note: " << note << "\n";
      *log << absl::StrFormat(
          "writing %s: preset %s, %d trunk + %d MTP layers, %zu tensors, "
          "%.2f GiB, recipe %s, file_type %u\n",
          path, m.config.preset, plan.config.n_layer, plan.config.n_mtp, plan.tensors.size(),
          plan.total_bytes() / 1073741824.0, m.recipe.name, plan.file_type);
    }
    ASSIGN_OR_RETURN(WrittenFile file, WriteOne(plan, m.vocab, options, path, log));
    written.push_back(std::move(file));
  }
  return written;
}

}  // namespace stepserve::synth
