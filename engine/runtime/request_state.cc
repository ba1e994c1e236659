#include "engine/runtime/request_state.h"

#include <utility>

namespace stepserve::engine {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

RequestState::RequestState(GenerationRequest request_in, std::shared_ptr<TokenSink> sink_in,
                           Sampler sampler_in, const tokenizer::Tokenizer& tokenizer_in,
                           int64_t max_new_tokens_in, int64_t ctx_size_in)
    : request(std::move(request_in)),
      sink(std::move(sink_in)),
      sampler(std::move(sampler_in)),
      decoder(tokenizer_in, request.skip_special_tokens),
      stop(request.stop),
      stop_token_ids(request.stop_token_ids.begin(), request.stop_token_ids.end()),
      tokenizer(&tokenizer_in),
      max_new_tokens(max_new_tokens_in),
      ctx_size(ctx_size_in),
      prompt_tokens(static_cast<int32_t>(request.prompt.size())) {}

void RequestState::AppendToken(const SampleResult& sample) {
  const int32_t token = sample.token;
  ++completion_tokens;
  pending.token_ids.push_back(token);
  pending.completion_tokens = completion_tokens;
  if (request.return_logprobs) {
    TokenLogprob lp;
    lp.token_id = token;
    lp.logprob = sample.logprob;
    for (const auto& alt : sample.top_logprobs()) lp.top.emplace_back(alt.token, alt.logprob);
    pending.logprobs.push_back(std::move(lp));
  }
  const bool eog = !request.ignore_eos && tokenizer->IsEndOfGeneration(token);
  if (eog || stop_token_ids.contains(token)) {
    // The stop token ends the text; like a stop string, its own text is not returned.
    finish = FinishReason::kStop;
    matched_token_id = token;
    FlushText();
    return;
  }
  pending.text += stop.Push(decoder.Push(token));
  if (stop.matched().has_value()) {
    finish = FinishReason::kStop;
    return;
  }
  if (completion_tokens >= max_new_tokens || prompt_tokens + completion_tokens >= ctx_size) {
    finish = FinishReason::kLength;
    FlushText();
  }
}

void RequestState::FlushText() {
  if (stop.matched().has_value()) return;
  pending.text += stop.Push(decoder.Flush());
  if (stop.matched().has_value()) {
    // The final partial character completed a stop string (only possible with U+FFFD stops).
    finish = FinishReason::kStop;
    return;
  }
  pending.text += stop.Flush();
}

std::optional<DeltaEvent> RequestState::TakeDelta() {
  if (pending.text.empty() && pending.token_ids.empty()) return std::nullopt;
  DeltaEvent out = std::exchange(pending, DeltaEvent{});
  out.completion_tokens = completion_tokens;
  return out;
}

FinishedEvent RequestState::MakeFinished(Clock::time_point now, absl::Status error) const {
  FinishedEvent event;
  event.reason = finish.value_or(FinishReason::kError);
  event.matched_token_id = matched_token_id;
  event.matched_stop = stop.matched();
  event.usage = {.prompt_tokens = prompt_tokens,
                 .completion_tokens = completion_tokens,
                 .cached_tokens = cached_tokens};
  Timings& t = event.timings;
  t.e2e_s = Seconds(now - submitted);
  t.queue_s = Seconds(first_scheduled.value_or(now) - submitted);
  if (first_token.has_value()) {
    t.ttft_s = Seconds(*first_token - submitted);
    t.prefill_s = Seconds(*first_token - *first_scheduled);
    t.decode_s = Seconds(now - *first_token);
  } else if (first_scheduled.has_value()) {
    t.prefill_s = Seconds(now - *first_scheduled);
  }
  event.speculation.active = false;
  if (request.speculation != SpeculationMode::kOff) {
    event.speculation.disabled_reason = "speculative decoding is not implemented by this engine";
  }
  event.error = std::move(error);
  return event;
}

}  // namespace stepserve::engine
