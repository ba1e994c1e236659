// Per-request state the engine thread keeps next to the scheduler's sequence: the sink, the
// sampler (its penalty window and generation index survive preemption), the streaming detokenizer
// and stop-string matcher, counters and timestamps. AppendToken turns one sampled token into
// delta content and decides whether the request is finished.
#ifndef STEPSERVE_ENGINE_RUNTIME_REQUEST_STATE_H_
#define STEPSERVE_ENGINE_RUNTIME_REQUEST_STATE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/stop_matcher.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/streaming_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace stepserve::engine {

using Clock = std::chrono::steady_clock;

struct RequestState {
  RequestState(GenerationRequest request, std::shared_ptr<TokenSink> sink, Sampler sampler,
               const tokenizer::Tokenizer& tokenizer, int64_t max_new_tokens, int64_t ctx_size);

  GenerationRequest request;  // prompt moved out to the scheduler
  std::shared_ptr<TokenSink> sink;
  scheduler::SeqId seq_id = 0;
  Sampler sampler;
  tokenizer::StreamingDecoder decoder;
  StopMatcher stop;
  absl::flat_hash_set<int32_t> stop_token_ids;
  const tokenizer::Tokenizer* tokenizer;
  int64_t max_new_tokens;  // effective: never past the context
  int64_t ctx_size;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens the prefix cache held when first scheduled
  int32_t completion_tokens = 0;

  // Finish state, set by AppendToken or the engine.
  std::optional<FinishReason> finish;
  std::optional<int32_t> matched_token_id;

  Clock::time_point submitted;
  std::optional<Clock::time_point> first_scheduled, first_token, last_token;

  // The delta being built during a step.
  DeltaEvent pending;

  // Records `sample` as the next generated token: id, logprobs and released text go to
  // `pending`; sets `finish` on EOG / stop token / stop string / max tokens / context full.
  void AppendToken(const SampleResult& sample);
  // Ends the text stream (no more tokens): releases held text into `pending` unless a stop
  // string already matched.
  void FlushText();
  // Takes the delta built so far (nullopt when it carries nothing).
  std::optional<DeltaEvent> TakeDelta();
  FinishedEvent MakeFinished(Clock::time_point now, absl::Status error) const;
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_REQUEST_STATE_H_
