// Engine::Impl::RunStep and what follows a step: the scheduler's plan through the model, one
// sampled token per sampling sequence, the commit, deltas and finishes, and the step statistics.
#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/runtime/engine_impl.h"

namespace stepserve::engine {

void Engine::Impl::HandleEvents(const std::vector<scheduler::Event>& events) {
  for (const scheduler::Event& event : events) {
    switch (event.kind) {
      case scheduler::EventKind::kPreempted:
        if (observer) observer->OnPreemption();
        break;
      case scheduler::EventKind::kDeadlineExceeded: {
        auto it = live.find(event.id);
        if (it == live.end()) break;
        const bool queued = !it->second->first_scheduled.has_value();
        Finish(event.id, FinishReason::kDeadlineExceeded,
               absl::DeadlineExceededError(queued ? "the deadline passed while queued"
                                                  : "the deadline passed while generating"));
        break;
      }
      case scheduler::EventKind::kCancelled:
      case scheduler::EventKind::kFinished:
        break;  // the engine's own doing; handled where it happens
    }
  }
}

void Engine::Impl::RunStep() {
  const Clock::time_point step_start = Clock::now();
  std::vector<scheduler::Event> events;
  const scheduler::StepPlan plan = scheduler->Schedule(Now(), &events);
  HandleEvents(events);
  if (plan.empty()) {
    if (scheduler->num_running() > 0 || scheduler->num_waiting() > 0) {
      // Work that cannot run yet (should not happen: an idle cache admits anything Submit
      // accepted); wait briefly instead of spinning.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(1));
    }
    return;
  }
  const Clock::time_point scheduled = Clock::now();
  StepStats stats;
  stats.num_seqs = static_cast<int32_t>(plan.seqs.size());
  std::vector<model::BatchSequence> batch;
  batch.reserve(plan.seqs.size());
  for (const scheduler::PlannedSeq& p : plan.seqs) {
    RequestState& state = *live.at(p.id);
    if (!state.first_scheduled.has_value()) {
      state.first_scheduled = scheduled;
      // The first scheduled step is the admission step, which reports the prefix-cache hit.
      state.cached_tokens =
          static_cast<int32_t>(std::min<int64_t>(p.cached_tokens, state.prompt_tokens));
      prefix_query_tokens += state.prompt_tokens;
      prefix_hit_tokens += state.cached_tokens;
      StartedEvent started{.prompt_tokens = state.prompt_tokens,
                           .cached_tokens = state.cached_tokens,
                           .queue_seconds = Seconds(scheduled - state.submitted)};
      state.sink->OnStarted(started);
      if (observer) observer->OnRequestStarted(started);
    }
    model::BatchSequence seq;
    seq.tokens = p.tokens;
    seq.start_pos = p.start_pos;
    if (p.full_table != nullptr) seq.full_table = *p.full_table;
    if (p.swa_table != nullptr) seq.swa_table = *p.swa_table;
    seq.logit_rows = p.sample ? 1 + p.num_drafts : 0;
    batch.push_back(seq);
    // A decode step's single token was sampled last step; everything else is (re)computed.
    const bool decode = p.sample && p.tokens.size() == 1 + static_cast<size_t>(p.num_drafts) &&
                        state.completion_tokens > 0 &&
                        p.start_pos == state.prompt_tokens + state.completion_tokens - 1;
    (decode ? stats.decode_tokens : stats.prefill_tokens) += static_cast<int32_t>(p.tokens.size());
  }
  // Device sampling: when every sampled row is greedy without bias or penalties (and drafts no
  // tokens), only the top kMaxLogprobs entries of each row, its argmax and log-sum-exp come back.
  bool candidates = config.device_sampling;
  bool any_sampled = false;
  for (const scheduler::PlannedSeq& p : plan.seqs) {
    if (!p.sample) continue;
    any_sampled = true;
    candidates = candidates && p.num_drafts == 0 &&
                 live.at(p.id)->sampler.CandidatesSuffice(kMaxLogprobs);
  }
  candidates = candidates && any_sampled;
  const absl::Status forward = model->Forward(
      batch, *kv, &forward_out, {.logit_top_k = candidates ? kMaxLogprobs : 0});
  const Clock::time_point forwarded = Clock::now();
  if (!forward.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      health = forward;
    }
    if (observer) observer->OnUnhealthy(forward);
    for (const scheduler::PlannedSeq& p : plan.seqs) {
      scheduler->Cancel(p.id);
      Finish(p.id, FinishReason::kError,
             absl::InternalError(absl::StrFormat("model forward failed: %s", forward.message())));
    }
    return;
  }

  const int64_t vocab = model->n_vocab();
  std::vector<scheduler::SeqResult> results;
  std::vector<scheduler::SeqId> sampled;
  std::vector<scheduler::SeqId> failed;
  int64_t row = 0;
  for (const scheduler::PlannedSeq& p : plan.seqs) {
    if (!p.sample) continue;
    RequestState& state = *live.at(p.id);
    absl::StatusOr<SampleResult> sample;
    if (candidates) {
      const model::LogitCandidates& c = forward_out.candidates;
      const size_t k = static_cast<size_t>(c.k);
      sample = state.sampler.SampleFromCandidates(
          std::span<const int32_t>(c.ids).subspan(row * k, k),
          std::span<const float>(c.values).subspan(row * k, k), c.argmax[row],
          c.log_sum_exp[row]);
    } else {
      sample = state.sampler.Sample(
          std::span<const float>(forward_out.logits.data() + row * vocab, vocab));
    }
    row += 1 + p.num_drafts;
    if (!sample.ok()) {
      scheduler->Cancel(p.id);  // before Commit, which needs a token from every sampling row
      failed.push_back(p.id);
      Finish(p.id, FinishReason::kError, sample.status());
      continue;
    }
    state.AppendToken(*sample);
    if (!state.first_token.has_value()) state.first_token = forwarded;
    if (state.last_token.has_value() && observer) {
      observer->OnInterTokenLatency(Seconds(forwarded - *state.last_token));
    }
    state.last_token = forwarded;
    results.push_back(
        {.id = p.id, .new_tokens = {sample->token}, .finished = state.finish.has_value()});
    sampled.push_back(p.id);
  }
  stats.sampled_seqs = static_cast<int32_t>(sampled.size());
  if (candidates) stats.device_sampled_seqs = stats.sampled_seqs;
  events.clear();
  scheduler->Commit(plan, results, &events);
  for (const scheduler::Event& event : events) {
    if (event.kind != scheduler::EventKind::kFinished) continue;
    RequestState& state = *live.at(event.id);
    if (!state.finish.has_value()) {
      // The scheduler ends a sequence at its token limit or the context; AppendToken checks the
      // same limits, so this only guards against a mismatch.
      state.finish = FinishReason::kLength;
      state.FlushText();
    }
  }
  for (scheduler::SeqId id : sampled) {
    RequestState& state = *live.at(id);
    if (std::optional<DeltaEvent> delta = state.TakeDelta()) state.sink->OnDelta(*delta);
    if (state.finish.has_value()) Finish(id, *state.finish, absl::OkStatus());
  }
  const Clock::time_point done = Clock::now();
  stats.schedule_s = Seconds(scheduled - step_start);
  stats.forward_s = Seconds(forwarded - scheduled);
  stats.sample_s = Seconds(done - forwarded);
  stats.total_s = Seconds(done - step_start);
  if (observer) {
    observer->OnStep(stats);
    const kv::BlockPool& full = scheduler->full_pool();
    const kv::BlockPool& swa = scheduler->swa_pool();
    observer->OnKvUsage({full.num_used(), full.capacity(), swa.num_used(), swa.capacity(),
                         sched_config.kv.block_size});
  }
}

void Engine::Impl::Finish(scheduler::SeqId id, FinishReason reason, absl::Status error) {
  auto it = live.find(id);
  if (it == live.end()) return;
  std::unique_ptr<RequestState> state = std::move(it->second);
  live.erase(it);
  if (!state->finish.has_value() || reason != *state->finish) {
    state->finish = reason;
    // Ended from outside (deadline, abort, error): release the text held so far. A cancelled
    // request's client is gone, so it gets no more text.
    if (reason != FinishReason::kCancelled) state->FlushText();
    state->finish = reason;
  }
  if (std::optional<DeltaEvent> delta = state->TakeDelta();
      delta.has_value() && reason != FinishReason::kCancelled) {
    state->sink->OnDelta(*delta);
  }
  const FinishedEvent finished = state->MakeFinished(Clock::now(), std::move(error));
  {
    // The id stops being live before the sink hears of the end, so a client that saw Finished
    // can reuse it and Cancel() reports it unknown. The blocks are already back in the pools;
    // publishing them here means whoever sees Idle() also sees them freed.
    const kv::BlockPool& full = scheduler->full_pool();
    const kv::BlockPool& swa = scheduler->swa_pool();
    std::lock_guard<std::mutex> lock(mu);
    live_ids.erase(state->request.request_id);
    blocks = {.full_free = full.num_free(),
              .full_total = full.capacity(),
              .swa_free = swa.num_free(),
              .swa_total = swa.capacity()};
  }
  if (observer) {
    observer->OnRequestFinished({.reason = finished.reason,
                                 .usage = finished.usage,
                                 .timings = finished.timings,
                                 .speculation = finished.speculation});
  }
  state->sink->OnFinished(finished);
}

}  // namespace stepserve::engine
