// CPU throughput of the step35 forward pass: prompt (prefill) tokens/s and decode tokens/s at
// batch 1 and with 4 sequences batched. One JSON object per line.
// Usage: bench_cpu_decode [--model F] [--threads N] [--prompt-tokens P] [--decode-tokens D]
// Without --model a tiny synthetic model is written to a temp dir (and removed afterwards).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/status_macros.h"
#include "engine/model/step35_model.h"
#include "engine/runner/kv_context.h"
#include "engine/synth/make_model.h"
#include "server/args.h"

namespace stepserve {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Config {
  int64_t batch, prompt_tokens, decode_tokens;
};

struct Timing {
  double prefill_s = 0, decode_s = 0;
};

// Prefills `batch` sequences of random prompts in one ragged forward pass, then decodes greedily
// one token per sequence per step.
absl::StatusOr<Timing> RunOnce(model::Step35Model& model, const Config& c, uint64_t seed) {
  const int32_t B = static_cast<int32_t>(c.batch);
  ASSIGN_OR_RETURN(std::unique_ptr<runner::KvContext> kv,
                   runner::KvContext::Create(model.backend(), model.hparams(),
                                             {.max_sequences = B,
                                              .ctx_size = c.prompt_tokens + c.decode_tokens + 1,
                                              .max_chunk = static_cast<int32_t>(c.prompt_tokens)}));
  const int64_t vocab = model.n_vocab();
  std::vector<std::vector<int32_t>> prompts(B);
  uint64_t state = seed;
  for (auto& p : prompts) {
    for (int64_t i = 0; i < c.prompt_tokens; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      p.push_back(static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab)));
    }
  }
  std::vector<model::BatchSequence> batch(B);
  model::ForwardOutput out;
  Timing t;
  auto start = Clock::now();
  for (int32_t s = 0; s < B; ++s) {
    ASSIGN_OR_RETURN(batch[s], kv->Append(s, prompts[s], 1));
  }
  RETURN_IF_ERROR(model.Forward(batch, kv->storage(), &out));
  t.prefill_s = Since(start);
  std::vector<int32_t> next(B);
  start = Clock::now();
  for (int64_t step = 0; step < c.decode_tokens; ++step) {
    for (int32_t s = 0; s < B; ++s) {
      const float* row = out.logits.data() + s * vocab;
      next[s] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      ASSIGN_OR_RETURN(batch[s], kv->Append(s, {&next[s], 1}, 1));
    }
    RETURN_IF_ERROR(model.Forward(batch, kv->storage(), &out));
  }
  t.decode_s = Since(start);
  return t;
}

int Main(int argc, char** argv) {
  std::string model_path;
  int64_t threads = 0, prompt_tokens = 128, decode_tokens = 32, repeats = 3;
  cli::ArgParser parser("bench_cpu_decode", "CPU prefill / decode tokens per second (JSON lines)");
  parser.AddString("model", &model_path, "step35 GGUF (default: a tiny synthetic model)");
  parser.AddInt("threads", &threads, "CPU threads (0 = all cores)");
  parser.AddInt("prompt-tokens", &prompt_tokens, "prompt tokens per sequence");
  parser.AddInt("decode-tokens", &decode_tokens, "decode steps");
  parser.AddInt("repeats", &repeats, "runs per configuration; the fastest is reported");
  int exit_code = 0;
  if (!cli::ParseOrExit(parser, argc, argv, &exit_code)) return exit_code;
  if (prompt_tokens < 1 || decode_tokens < 1 || repeats < 1 || threads < 0) {
    std::fprintf(stderr, "prompt/decode tokens and repeats must be >= 1, threads >= 0\n");
    return 2;
  }
  std::string temp_dir;
  if (model_path.empty()) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "bench-cpu-decode-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    temp_dir = tmpl;
    model_path = temp_dir + "/tiny.gguf";
    absl::StatusOr<std::vector<synth::WrittenFile>> made =
        synth::MakeModel({.preset = "tiny", .out = model_path, .seed = 1}, nullptr);
    if (!made.ok()) {
      std::fprintf(stderr, "make tiny model: %s\n", made.status().ToString().c_str());
      return 1;
    }
  }
  int rc = 0;
  {
    absl::StatusOr<std::unique_ptr<model::Step35Model>> model = model::Step35Model::Load(
        model_path, {.num_threads = static_cast<int>(threads), .load_mtp = false});
    if (!model.ok()) {
      std::fprintf(stderr, "%s: %s\n", model_path.c_str(), model.status().ToString().c_str());
      rc = 1;
    }
    const int used_threads = threads > 0 ? static_cast<int>(threads)
                                         : static_cast<int>(std::thread::hardware_concurrency());
    for (int64_t b : {1, 4}) {
      if (rc != 0) break;
      Config c{b, prompt_tokens, decode_tokens};
      Timing best{1e300, 1e300};
      for (int64_t r = 0; r < repeats && rc == 0; ++r) {
        absl::StatusOr<Timing> t = RunOnce(**model, c, 1000 + r);
        if (!t.ok()) {
          std::fprintf(stderr, "batch %ld: %s\n", static_cast<long>(b),
                       t.status().ToString().c_str());
          rc = 1;
          break;
        }
        best.prefill_s = std::min(best.prefill_s, t->prefill_s);
        best.decode_s = std::min(best.decode_s, t->decode_s);
      }
      if (rc != 0) break;
      std::printf(
          "{\"bench\":\"cpu_decode\",\"model\":\"%s\",\"threads\":%d,\"batch\":%ld,"
          "\"prompt_tokens\":%ld,\"prefill_ms\":%.2f,\"prompt_tokens_per_s\":%.1f,"
          "\"decode_steps\":%ld,\"decode_ms_per_step\":%.3f,\"decode_tokens_per_s\":%.1f}\n",
          (*model)->hparams().name.c_str(), used_threads, static_cast<long>(b),
          static_cast<long>(b * prompt_tokens), best.prefill_s * 1e3,
          static_cast<double>(b * prompt_tokens) / best.prefill_s, static_cast<long>(decode_tokens),
          best.decode_s * 1e3 / static_cast<double>(decode_tokens),
          static_cast<double>(b * decode_tokens) / best.decode_s);
      std::fflush(stdout);
    }
  }
  if (!temp_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  return rc;
}

}  // namespace
}  // namespace stepserve

int main(int argc, char** argv) { return stepserve::Main(argc, argv); }
