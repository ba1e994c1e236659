// MTP speculative decoding: acceptance and tokens/s per draft length k (0 = plain decoding) on a
// step35 model, greedy and sampled. One JSON object per line.
// Usage: bench_mtp_spec [--model F] [--draft F] [--prompts N] [--tokens T] [--threads N]
// Without --model a tiny synthetic model (f32, seed 7, 3 MTP heads) is written to a temp dir.
// Random weights make the heads poor predictors: expect low acceptance on the tiny model.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/model/step35_model.h"
#include "engine/spec/mtp_speculator.h"
#include "engine/synth/make_model.h"
#include "server/args.h"

namespace stepserve {
namespace {

using Clock = std::chrono::steady_clock;

int Main(int argc, char** argv) {
  std::string model_path, draft_path;
  int64_t prompts = 4, tokens = 128, prompt_tokens = 32, threads = 2;
  cli::ArgParser parser("bench_mtp_spec", "MTP speculative decoding acceptance and speed");
  parser.AddString("model", &model_path, "target GGUF (default: tiny synthetic, f32, seed 7)");
  parser.AddString("draft", &draft_path, "MTP-only draft GGUF (default: the target's heads)");
  parser.AddInt("prompts", &prompts, "random prompts per configuration");
  parser.AddInt("prompt-tokens", &prompt_tokens, "tokens per prompt");
  parser.AddInt("tokens", &tokens, "tokens generated per prompt");
  parser.AddInt("threads", &threads, "CPU threads (0 = all cores)");
  int exit_code = 0;
  if (!cli::ParseOrExit(parser, argc, argv, &exit_code)) return exit_code;
  if (prompts < 1 || tokens < 1 || prompt_tokens < 1 || threads < 0) {
    std::fprintf(stderr, "prompts, tokens and prompt-tokens must be >= 1, threads >= 0\n");
    return 2;
  }
  std::string temp_dir;
  if (model_path.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "bench-mtp-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    temp_dir = tmpl;
    model_path = temp_dir + "/tiny.gguf";
    absl::StatusOr<std::vector<synth::WrittenFile>> made = synth::MakeModel(
        {.preset = "tiny", .out = model_path, .seed = 7, .recipe = "f32"}, nullptr);
    if (!made.ok()) {
      std::fprintf(stderr, "make tiny model: %s\n", made.status().ToString().c_str());
      return 1;
    }
  }
  int rc = 0;
  {
    const model::LoadOptions load{.num_threads = static_cast<int>(threads)};
    absl::StatusOr<std::unique_ptr<model::Step35Model>> target =
        model::Step35Model::Load(model_path, load);
    absl::StatusOr<std::unique_ptr<model::Step35Model>> draft;
    if (!draft_path.empty()) draft = model::Step35Model::Load(draft_path, load);
    if (!target.ok() || (!draft_path.empty() && !draft.ok())) {
      std::fprintf(stderr, "load: %s\n",
                   (target.ok() ? draft.status() : target.status()).ToString().c_str());
      rc = 1;
    }
    model::Step35Model* draft_model = draft_path.empty() ? nullptr : draft->get();
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> prompt_set(prompts);
    for (auto& p : prompt_set) {
      for (int64_t i = 0; rc == 0 && i < prompt_tokens; ++i) {
        p.push_back(static_cast<int32_t>(rng() % (*target)->n_vocab()));
      }
    }
    for (const bool sampled : {false, true}) {
      for (int k = 0; k <= 3 && rc == 0; ++k) {
        spec::SpeculativeOptions options;
        options.speculate = k > 0;
        options.drafter.n_max = k;
        absl::StatusOr<std::unique_ptr<spec::SpeculativeGenerator>> gen =
            spec::SpeculativeGenerator::Create(target->get(), draft_model, options);
        if (!gen.ok()) {
          std::fprintf(stderr, "k=%d: %s\n", k, gen.status().ToString().c_str());
          rc = 1;
          break;
        }
        spec::SpecStats total;
        total.drafted_at.assign(k, 0);
        total.accepted_at.assign(k, 0);
        double seconds = 0;
        for (size_t i = 0; i < prompt_set.size() && rc == 0; ++i) {
          SamplingParams params;
          params.temperature = sampled ? 0.8f : 0.0f;
          params.seed = 100 + i;
          const auto start = Clock::now();
          absl::StatusOr<spec::GenerationResult> r =
              (*gen)->Generate(prompt_set[i], params, static_cast<int>(tokens));
          seconds += std::chrono::duration<double>(Clock::now() - start).count();
          if (!r.ok()) {
            std::fprintf(stderr, "k=%d: %s\n", k, r.status().ToString().c_str());
            rc = 1;
            break;
          }
          const spec::SpecStats& s = r->stats;
          total.target_forwards += s.target_forwards;
          total.draft_steps += s.draft_steps;
          total.draft_tokens += s.draft_tokens;
          total.accepted_tokens += s.accepted_tokens;
          total.emitted_tokens += s.emitted_tokens;
          for (int j = 0; j < k; ++j) {
            total.drafted_at[j] += s.drafted_at[j];
            total.accepted_at[j] += s.accepted_at[j];
          }
        }
        if (rc != 0) break;
        std::printf(
            "{\"bench\":\"mtp_spec\",\"model\":\"%s\",\"draft\":\"%s\",\"k\":%d,\"mode\":\"%s\","
            "\"prompts\":%ld,\"tokens_per_prompt\":%ld,\"tokens_per_s\":%.1f,\"stats\":%s}\n",
            temp_dir.empty() ? model_path.c_str() : "tiny-f32-seed7",
            draft_path.empty() ? "embedded" : draft_path.c_str(), k,
            sampled ? "sampled_t0.8" : "greedy", static_cast<long>(prompts),
            static_cast<long>(tokens), total.emitted_tokens / seconds, total.ToJson().c_str());
        std::fflush(stdout);
      }
    }
  }
  if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir);
  return rc;
}

}  // namespace
}  // namespace stepserve

int main(int argc, char** argv) { return stepserve::Main(argc, argv); }
