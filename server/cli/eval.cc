// `stepserve eval`: perplexity (and KL divergence against saved log-probabilities) of a text
// under a step35 GGUF, chunked like llama.cpp's perplexity tool (engine/model/perplexity.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/model/perplexity.h"
#include "engine/model/step35_model.h"
#include "engine/runner/kv_context.h"
#include "engine/tokenizer/jinja_value.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/args.h"
#include "server/cli/backend_flags.h"
#include "server/subcommand.h"

namespace stepserve::cli {
namespace {

constexpr char kDescription[] =
    "Perplexity of a text file under a step35 GGUF, computed the way llama.cpp's perplexity tool\n"
    "does: the tokens are cut into chunks of --ctx, the first token of each chunk becomes BOS\n"
    "when the vocabulary adds one, every chunk runs with a fresh KV cache and only the second\n"
    "half of each chunk is scored. Progress goes to stderr, then `perplexity: X +/- Y` (and the\n"
    "mean KL divergence and top-1 agreement with --kld-against); stdout gets one JSON line with\n"
    "every number. --save-logits writes the scored log-probabilities for a later --kld-against.";

struct Flags {
  std::string model, text, save_logits, kld_against, kv_dtype = "f32";
  int64_t ctx = 512, chunks = 0, batch_rows = 0, threads = 0;
  BackendFlags backend;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("--text: cannot open %s", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrFormat("--text: error reading %s", path));
  return text.str();
}

// JSON numbers must be finite; a NaN perplexity is reported as null rather than breaking parsers.
jinja::Value Number(double x) {
  return std::isfinite(x) ? jinja::Value::Float(x) : jinja::Value::None();
}

absl::Status RunEval(const Flags& flags) {
  if (flags.ctx < 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--ctx must be at least 4, got %d", flags.ctx));
  }
  if (flags.chunks < 0 || flags.batch_rows < 0 || flags.threads < 0) {
    return absl::InvalidArgumentError("--chunks, --batch-rows and --threads must be >= 0");
  }
  if (std::string error = ValidateBackendFlags(flags.backend); !error.empty()) {
    return absl::InvalidArgumentError(error);
  }
  const absl::StatusOr<KvDtype> kv_dtype = model::KvDtypeFromName(flags.kv_dtype);
  if (!kv_dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-dtype: ", kv_dtype.status().message()));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(flags.text));
  absl::StatusOr<std::unique_ptr<model::Step35Model>> loaded =
      model::Step35Model::Load(flags.model, {.backend = flags.backend.backend,
                                             .device = static_cast<int>(flags.backend.device),
                                             .num_threads = static_cast<int>(flags.threads),
                                             .load_mtp = false,
                                             .progress = StderrLoadProgress()});
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrFormat("%s: %s", flags.model, loaded.status().message()));
  }
  model::Step35Model& model = **loaded;
  std::fprintf(stderr, "%s\n", model.hparams().Summary().c_str());
  const int64_t n_ctx_train = model.hparams().n_ctx_train;
  if (n_ctx_train > 0 && flags.ctx > n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--ctx %d exceeds the model's training context %d", flags.ctx, n_ctx_train));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok,
                   tokenizer::Tokenizer::FromMetadata(model.file().metadata()));
  const bool add_bos = tok->add_bos_token() && tok->bos_id() >= 0;
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> tokens = tok->Encode(text, add_bos, /*parse_special=*/false);
  const double tokenize_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "eval: %s: %zu bytes -> %zu tokens (%.2f s); %ld chunks of %ld available\n",
               flags.text.c_str(), text.size(), tokens.size(), tokenize_seconds,
               static_cast<long>(static_cast<int64_t>(tokens.size()) / flags.ctx),
               static_cast<long>(flags.ctx));

  const int64_t rows = flags.batch_rows == 0 ? flags.ctx : std::min(flags.batch_rows, flags.ctx);
  ASSIGN_OR_RETURN(std::unique_ptr<runner::KvContext> kv,
                   runner::KvContext::Create(model.backend(), model.hparams(),
                                             {.max_sequences = 1,
                                              .ctx_size = flags.ctx,
                                              .max_chunk = static_cast<int32_t>(rows),
                                              .kv_dtype = *kv_dtype}));
  const int64_t n_vocab = model.n_vocab();
  model::ForwardOutput out;
  auto chunk_logits = [&](std::span<const int32_t> chunk, std::vector<float>* logits) {
    kv->Reset(0);  // every chunk starts from an empty cache, as llama.cpp clears its KV
    logits->resize(chunk.size() * n_vocab);
    for (size_t begin = 0; begin < chunk.size(); begin += rows) {
      const size_t count = std::min<size_t>(rows, chunk.size() - begin);
      ASSIGN_OR_RETURN(model::BatchSequence seq,
                       kv->Append(0, chunk.subspan(begin, count), static_cast<int32_t>(count)));
      RETURN_IF_ERROR(model.Forward({&seq, 1}, kv->storage(), &out));
      std::copy(out.logits.begin(), out.logits.end(), logits->begin() + begin * n_vocab);
    }
    return absl::OkStatus();
  };
  auto start = std::chrono::steady_clock::now();
  auto last = start;
  auto progress = [&](int64_t chunk, int64_t total, double ppl) {
    const auto now = std::chrono::steady_clock::now();
    // EvaluatePerplexity counts chunks from 1.
    std::fprintf(stderr, "[%ld/%ld] ppl %.4f (%.2f s)\n", static_cast<long>(chunk),
                 static_cast<long>(total), ppl, std::chrono::duration<double>(now - last).count());
    last = now;
  };
  model::PerplexityOptions options{.n_ctx = flags.ctx,
                                   .max_chunks = flags.chunks,
                                   .save_logits_path = flags.save_logits,
                                   .kld_reference_path = flags.kld_against};
  if (add_bos) options.bos_token = tok->bos_id();
  ASSIGN_OR_RETURN(model::PerplexityResult result,
                   model::EvaluatePerplexity(tokens, n_vocab, options, chunk_logits, progress));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "perplexity: %.4f +/- %.4f\n", result.perplexity, result.perplexity_stderr);
  if (result.has_kld) {
    std::fprintf(stderr, "mean KLD: %.6f, top-1 agreement: %.4f\n", result.mean_kld,
                 result.top1_agreement);
  }
  const double evaluated = static_cast<double>(result.chunks * flags.ctx);
  jinja::Object json;
  json.Set("model", jinja::Value::String(flags.model));
  json.Set("text", jinja::Value::String(flags.text));
  json.Set("tokens", jinja::Value::Int(static_cast<int64_t>(tokens.size())));
  json.Set("ctx", jinja::Value::Int(flags.ctx));
  json.Set("batch_rows", jinja::Value::Int(rows));
  json.Set("chunks", jinja::Value::Int(result.chunks));
  json.Set("scored_tokens", jinja::Value::Int(result.scored_tokens));
  json.Set("perplexity", Number(result.perplexity));
  json.Set("perplexity_stderr", Number(result.perplexity_stderr));
  if (result.has_kld) {
    json.Set("mean_kld", Number(result.mean_kld));
    json.Set("top1_agreement", Number(result.top1_agreement));
  }
  json.Set("seconds", Number(seconds));
  json.Set("tokens_per_second", Number(seconds > 0 ? evaluated / seconds : 0));
  ASSIGN_OR_RETURN(std::string line, jinja::DumpJson(jinja::Value::MakeObject(std::move(json))));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

int Run(int argc, char** argv) {
  Flags f;
  ArgParser parser("stepserve eval", kDescription);
  parser.AddString("model", &f.model, "step35 GGUF file (first shard of a split set)", true);
  parser.AddString("text", &f.text, "UTF-8 text file to evaluate", true);
  parser.AddInt("ctx", &f.ctx, "tokens per chunk (llama.cpp -c)");
  parser.AddInt("chunks", &f.chunks, "evaluate at most this many chunks (0 = all)");
  parser.AddInt("batch-rows", &f.batch_rows, "rows per forward pass (0 = the whole chunk)");
  parser.AddString("kv-dtype", &f.kv_dtype,
                   "f32 | f16 | q8_0: KV cache element type (with --kld-against: its effect)");
  parser.AddString("save-logits", &f.save_logits, "write scored log-probabilities to this file");
  parser.AddString("kld-against", &f.kld_against,
                   "compare with log-probabilities saved by --save-logits");
  parser.AddInt("threads", &f.threads, "CPU threads (0 = all cores)");
  AddBackendFlags(parser, &f.backend);
  int exit_code = 0;
  if (!ParseOrExit(parser, argc, argv, &exit_code)) return exit_code;
  if (absl::Status status = RunEval(f); !status.ok()) {
    std::fprintf(stderr, "eval: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

STEPSERVE_SUBCOMMAND("eval", "perplexity / KL divergence of a text under a step35 GGUF", Run);

}  // namespace stepserve::cli
