// `stepserve make-model`: writes a synthetic step35 GGUF (engine/synth).
#include "engine/synth/make_model.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "server/args.h"
#include "server/subcommand.h"

namespace stepserve::cli {
namespace {

constexpr char kDescription[] =
    "Writes a synthetic step35 GGUF: the real metadata keys (with their GGUF value types), tensor\n"
    "names and shapes, seeded random weights and a trained byte-level BPE vocabulary.\n"
    "Presets: tiny (the step35-mini of spec 8.1: 6 trunk + 3 MTP layers), step-3.5-flash (true\n"
    "shapes), step-5 (true shapes, dense attention fallback only: no sparse-indexer tensors).\n"
    "--layers N keeps the first N trunk layers; MTP layers renumber to N..N+2 and per-layer "
    "values\n"
    "stay tied to their real layer index (step-3.5-flash's clamps on layers 43/44 vanish for\n"
    "N <= 43). Recipes: f32 f16 bf16 q8_0 iq4_xs q4_k_m step5-q2 step37-mq83 mix (the tiny\n"
    "default; real-size presets default to iq4_xs); see engine/synth/quant_recipe.h. Rows that do\n"
    "not fit a type's block fall back to a compatible type (reported on stderr).\n"
    "Vocabulary ids: 0 BOS, 1 padding, 2..257 bytes, then merges; tiny appends the Step specials\n"
    "(eos = <|im_end|>); real sizes pad to 128896 with <|im_end|> = eos = 128007.";

int Run(int argc, char** argv) {
  synth::MakeModelOptions o;
  std::string out, preset = "tiny", recipe, mtp = "embedded", split;
  int64_t layers = 0, seed = 0, threads = 0, merges = 3000;
  bool no_rope_dims = false, no_data = false;
  std::string types[13];
  const char* groups[13] = {"embd",   "attn",      "attn-q", "attn-k",      "attn-v",
                            "attn-o", "attn-gate", "ffn",    "exp-gate-up", "exp-down",
                            "output", "mtp",       nullptr};
  ArgParser parser("stepserve make-model", kDescription);
  parser.AddString("preset", &preset, "tiny | step-3.5-flash | step-5");
  parser.AddString("out", &out, "output path (.gguf); shards get -0000i-of-0000n", true);
  parser.AddInt("layers", &layers, "keep only the first N trunk layers (0 = all)");
  parser.AddInt("seed", &seed, "random seed; same seed and options give identical bytes");
  parser.AddString("recipe", &recipe, "quantization mix (default: mix for tiny, iq4_xs otherwise)");
  for (int i = 0; groups[i] != nullptr; ++i) {
    parser.AddString(
        absl::StrFormat("type-%s", groups[i]), &types[i],
        absl::StrFormat("ggml type for the %s group (overrides the recipe)", groups[i]));
  }
  parser.AddString("mtp", &mtp,
                   "embedded | separate (trunk file + mtp-<name> beside it) | none (trunk only)");
  parser.AddString("split-max-size", &split, "split into shards of at most this size (2G, 500M)");
  parser.AddInt("threads", &threads, "fill threads (0 = all cores)");
  parser.AddInt("bpe-merges", &merges, "BPE merges to learn for the vocabulary");
  parser.AddBool("no-rope-dims", &no_rope_dims,
                 "omit rope.dimension_count[_swa] (legacy converter layout)");
  parser.AddBool("no-data", &no_data,
                 "tensors of 1 MiB or more left as sparse holes (zeros): for full-size speed "
                 "benchmarks that fill weights on the device (bench_model --synthetic)");
  int exit_code = 0;
  if (!ParseOrExit(parser, argc, argv, &exit_code)) return exit_code;

  o.out = out;
  o.preset = preset;
  o.layers = static_cast<int>(layers);
  o.seed = static_cast<uint64_t>(seed);
  o.recipe = recipe;
  o.threads = static_cast<int>(threads);
  o.bpe_merges = static_cast<int>(merges);
  o.write_rope_dims = !no_rope_dims;
  o.no_data = no_data;
  for (int i = 0; groups[i] != nullptr; ++i) {
    if (!types[i].empty()) o.type_overrides.emplace_back(groups[i], types[i]);
  }
  if (mtp == "embedded") {
    o.mtp = synth::MtpLayout::kEmbedded;
  } else if (mtp == "separate") {
    o.mtp = synth::MtpLayout::kSeparate;
  } else if (mtp == "none") {
    o.mtp = synth::MtpLayout::kNone;
  } else {
    std::fprintf(stderr, "--mtp: expected embedded, separate or none, got \"%s\"\n", mtp.c_str());
    return 2;
  }
  if (!split.empty()) {
    absl::StatusOr<uint64_t> bytes = synth::ParseByteSize(split);
    if (!bytes.ok()) {
      std::fprintf(stderr, "--split-max-size: %s\n", std::string(bytes.status().message()).c_str());
      return 2;
    }
    o.split_max_bytes = *bytes;
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<synth::WrittenFile>> files = synth::MakeModel(o, &std::cerr);
  if (!files.ok()) {
    std::fprintf(stderr, "make-model: %s\n", files.status().ToString().c_str());
    return 1;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const synth::WrittenFile& f : *files) {
    for (const std::string& p : f.paths) std::printf("%s\n", p.c_str());
  }
  std::fprintf(stderr, "done in %.1f s\n", secs);
  return 0;
}

}  // namespace

STEPSERVE_SUBCOMMAND("make-model",
                     "write a synthetic step35 GGUF (presets tiny, step-3.5-flash, step-5)", Run);

}  // namespace stepserve::cli
