// The events a request produces (engine → server), shared by the TokenSink (engine.h) and the
// metrics observer (engine_observer.h). Plain data; the server converts them to proto messages.
#ifndef STEPSERVE_ENGINE_RUNTIME_EVENTS_H_
#define STEPSERVE_ENGINE_RUNTIME_EVENTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace stepserve::engine {

enum class FinishReason { kStop, kLength, kAbort, kCancelled, kDeadlineExceeded, kError };

// "stop", "length", "abort", "cancelled", "deadline_exceeded", "error" (metric label values).
std::string_view FinishReasonName(FinishReason reason);

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;                           // raw model log-softmax (sampler.h explains why)
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
};

struct StartedEvent {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  double queue_seconds = 0;   // Submit to first scheduled step
};

struct DeltaEvent {
  std::string text;                    // UTF-8 complete; text that may begin a stop string is held
  std::vector<int32_t> token_ids;      // tokens generated since the previous delta
  std::vector<TokenLogprob> logprobs;  // one per token id when return_logprobs
  int32_t completion_tokens = 0;       // cumulative
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
};

// Seconds. queue: Submit to first scheduled step; ttft: Submit to first token; prefill: first
// scheduled step to first token; decode: first token to finish; e2e: Submit to finish.
struct Timings {
  double queue_s = 0, ttft_s = 0, prefill_s = 0, decode_s = 0, e2e_s = 0;
};

struct SpeculationStats {
  bool active = false;
  std::string disabled_reason;  // set when speculation was wanted but did not run
  int32_t drafts = 0;
  int32_t draft_tokens = 0;
  int32_t accepted_tokens = 0;
  std::vector<int32_t> accepted_per_position;
};

struct FinishedEvent {
  FinishReason reason = FinishReason::kStop;
  std::optional<int32_t> matched_token_id;  // EOG or stop_token_ids match
  std::optional<std::string> matched_stop;  // stop string match (not part of the text)
  Usage usage;
  Timings timings;
  SpeculationStats speculation;
  absl::Status error;  // kError / kDeadlineExceeded / kAbort: why
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_EVENTS_H_
