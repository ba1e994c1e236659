// Single-sequence generation without the scheduler (`stepserve generate`, benchmarks): prefill
// the prompt in chunks, then sample and decode one token at a time until an end-of-generation
// token, the token limit or the end of the context.
//
//   GenerationOptions options{.ctx_size = 4096, .max_new_tokens = 64, .sampling = params,
//                             .is_end_of_generation = [&](int32_t t) { return tok.IsEog(t); }};
//   ASSIGN_OR_RETURN(GenerationStats stats,
//                    Generate(model, prompt, options, [&](int32_t t) { Print(t); }));
#ifndef STEPSERVE_ENGINE_RUNNER_GENERATOR_H_
#define STEPSERVE_ENGINE_RUNNER_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/step35_model.h"
#include "engine/sampling/sampling_params.h"

namespace stepserve::runner {

enum class StopReason {
  kEndOfGeneration,  // the model produced an end-of-generation token (it is reported)
  kMaxTokens,        // max_new_tokens reached
  kContextFull,      // prompt + generated tokens reached ctx_size
};
std::string_view StopReasonName(StopReason reason);  // "end of generation", ...

struct GenerationOptions {
  int64_t ctx_size = 4096;       // positions the sequence may occupy
  int64_t max_new_tokens = 128;  // >= 1
  int32_t prefill_chunk = 512;   // prompt tokens per forward pass
  int32_t block_size = 16;       // KV page size
  SamplingParams sampling;
  // Empty: never stop early.
  std::function<bool(int32_t token)> is_end_of_generation;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;  // prefill forward passes
  int64_t generated_tokens = 0;
  // From the end of prefill to the last generated token: sampling plus one decode forward pass
  // per generated token after the first (the first comes from the prompt's last logits).
  double generation_seconds = 0;
  StopReason stop = StopReason::kMaxTokens;

  double prompt_tokens_per_second() const;
  double generation_tokens_per_second() const;
};

// Called with each generated token as soon as it is sampled (an end-of-generation token
// included), before the next forward pass, so callers can stream it.
using TokenCallback = std::function<void(int32_t token)>;

// Runs one sequence. InvalidArgument for an empty prompt, a prompt that leaves no room in the
// context ("prompt is N tokens; the context (M) must be larger"), or bad sampling params; model
// errors pass through.
absl::StatusOr<GenerationStats> Generate(model::Step35Model& model, std::span<const int32_t> prompt,
                                         const GenerationOptions& options,
                                         const TokenCallback& on_token);

}  // namespace stepserve::runner

#endif  // STEPSERVE_ENGINE_RUNNER_GENERATOR_H_
