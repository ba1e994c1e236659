#include "engine/runner/generator.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/base/status_macros.h"
#include "engine/runner/kv_context.h"
#include "engine/sampling/sampler.h"

namespace stepserve::runner {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEndOfGeneration:
      return "end of generation";
    case StopReason::kMaxTokens:
      return "token limit";
    case StopReason::kContextFull:
      return "context full";
  }
  return "unknown";
}

double GenerationStats::prompt_tokens_per_second() const {
  return prompt_seconds > 0 ? static_cast<double>(prompt_tokens) / prompt_seconds : 0.0;
}

double GenerationStats::generation_tokens_per_second() const {
  return generation_seconds > 0 ? static_cast<double>(generated_tokens) / generation_seconds : 0.0;
}

absl::StatusOr<GenerationStats> Generate(model::Step35Model& model, std::span<const int32_t> prompt,
                                         const GenerationOptions& options,
                                         const TokenCallback& on_token) {
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) return absl::InvalidArgumentError("the prompt has no tokens");
  if (options.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max new tokens must be at least 1, got %d", options.max_new_tokens));
  }
  if (options.prefill_chunk < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prefill chunk must be at least 1, got %d", options.prefill_chunk));
  }
  // The last prompt token's logits give the first new token, which then needs a position of its
  // own to produce the second; a prompt filling the whole context leaves no room for that.
  if (n_prompt >= options.ctx_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prompt is %d tokens; the context (%d) must be larger", n_prompt, options.ctx_size));
  }
  const int vocab = static_cast<int>(model.n_vocab());
  ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(options.sampling, vocab, prompt));
  ASSIGN_OR_RETURN(std::unique_ptr<KvContext> kv,
                   KvContext::Create(model.backend(), model.hparams(), {.max_sequences = 1,
                                                       .ctx_size = options.ctx_size,
                                                       .block_size = options.block_size,
                                                       .max_chunk = options.prefill_chunk}));
  GenerationStats stats;
  stats.prompt_tokens = n_prompt;
  model::ForwardOutput out;
  auto start = std::chrono::steady_clock::now();
  for (int64_t begin = 0; begin < n_prompt; begin += options.prefill_chunk) {
    const int64_t count = std::min<int64_t>(options.prefill_chunk, n_prompt - begin);
    const bool last = begin + count == n_prompt;
    ASSIGN_OR_RETURN(model::BatchSequence seq,
                     kv->Append(0, prompt.subspan(begin, count), last ? 1 : 0));
    RETURN_IF_ERROR(model.Forward({&seq, 1}, kv->storage(), &out));
  }
  stats.prompt_seconds = SecondsSince(start);
  start = std::chrono::steady_clock::now();
  int32_t token = -1;
  while (true) {
    ASSIGN_OR_RETURN(SampleResult result, sampler.Sample(out.logits));
    token = result.token;
    ++stats.generated_tokens;
    if (on_token) on_token(token);
    if (options.is_end_of_generation && options.is_end_of_generation(token)) {
      stats.stop = StopReason::kEndOfGeneration;
      break;
    }
    if (stats.generated_tokens >= options.max_new_tokens) {
      stats.stop = StopReason::kMaxTokens;
      break;
    }
    // The token just sampled sits at position length(); it is the last one the context holds
    // when that is ctx_size - 1, and feeding it would only produce a token with no place.
    if (kv->length(0) + 1 >= options.ctx_size) {
      stats.stop = StopReason::kContextFull;
      break;
    }
    ASSIGN_OR_RETURN(model::BatchSequence seq, kv->Append(0, {&token, 1}, 1));
    RETURN_IF_ERROR(model.Forward({&seq, 1}, kv->storage(), &out));
  }
  stats.generation_seconds = SecondsSince(start);
  return stats;
}

}  // namespace stepserve::runner
