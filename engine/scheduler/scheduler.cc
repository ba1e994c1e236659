#include "engine/scheduler/scheduler.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "engine/base/check.h"

namespace stepserve::scheduler {

struct Scheduler::Sequence {
  Request request;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;
  int64_t generated = 0;
  int64_t computed = 0;                        // positions whose KV is in the cache
  std::unique_ptr<kv::SequenceBlocks> blocks;  // null while waiting
  std::vector<int32_t> drafts;

  bool decoding() const { return computed == static_cast<int64_t>(tokens.size()) - 1; }
};

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), full_pool_(config.full_blocks), swa_pool_(config.swa_blocks) {
  STEPSERVE_CHECK(config.max_running > 0 && config.max_step_tokens > 0 && config.max_queue >= 0);
  STEPSERVE_CHECK(config.kv.block_size > 0);
}

Scheduler::~Scheduler() = default;

absl::Status Scheduler::Add(Request request) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (prompt_len > config_.max_context) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the prompt has %d tokens; the context holds %d", prompt_len, config_.max_context));
  }
  if (request.max_new_tokens < 1) {
    return absl::InvalidArgumentError("max_tokens must be at least 1");
  }
  if (sequences_.contains(request.id)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request id %d is already in use", request.id));
  }
  if (num_waiting() >= config_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the queue is full (%d waiting requests)", config_.max_queue));
  }
  // The most positions this sequence can ever hold KV for.
  const int64_t positions = std::min(prompt_len + request.max_new_tokens, config_.max_context) +
                            config_.kv.rollback_slack;
  const int64_t blocks = (positions + config_.kv.block_size - 1) / config_.kv.block_size;
  if (config_.kv.has_full_layers && blocks > full_pool_.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs up to %d tokens of KV cache; the cache holds %d", positions,
        static_cast<int64_t>(full_pool_.capacity()) * config_.kv.block_size));
  }
  auto seq = std::make_unique<Sequence>();
  seq->prompt_len = prompt_len;
  seq->tokens = request.prompt;
  seq->request = std::move(request);
  const SeqId id = seq->request.id;
  sequences_.emplace(id, std::move(seq));
  InsertWaiting(id, /*front=*/false);
  return absl::OkStatus();
}

void Scheduler::InsertWaiting(SeqId id, bool front) {
  if (front) {
    waiting_.push_front(id);
    return;
  }
  const Sequence& seq = *sequences_.at(id);
  auto position = waiting_.end();
  while (position != waiting_.begin()) {
    const Sequence& before = *sequences_.at(*std::prev(position));
    if (before.request.priority <= seq.request.priority) break;
    --position;
  }
  waiting_.insert(position, id);
}

void Scheduler::SetDrafts(SeqId id, std::vector<int32_t> drafts) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  if (static_cast<int32_t>(drafts.size()) > config_.kv.rollback_slack) {
    drafts.resize(config_.kv.rollback_slack);
  }
  it->second->drafts = std::move(drafts);
}

void Scheduler::Release(SeqId id) {
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  sequences_.erase(id);  // SequenceBlocks' destructor returns the blocks
}

bool Scheduler::Cancel(SeqId id) {
  if (!sequences_.contains(id)) return false;
  Release(id);
  return true;
}

void Scheduler::Preempt(Sequence& seq, std::vector<Event>* events) {
  const SeqId id = seq.request.id;
  seq.blocks.reset();
  seq.computed = 0;
  seq.drafts.clear();
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  InsertWaiting(id, /*front=*/true);
  ++num_preemptions_;
  events->push_back({id, EventKind::kPreempted});
}

bool Scheduler::TryGrow(Sequence& seq, int64_t new_length, std::vector<Event>* events) {
  // Preempt the newest running sequences until this one fits; if it is itself the newest, it
  // is the one preempted.
  while (!seq.blocks->Grow(new_length)) {
    Sequence& newest = *sequences_.at(running_.back());
    Preempt(newest, events);
    if (&newest == &seq) return false;
  }
  return true;
}

void Scheduler::ExpireDeadlines(double now_s, std::vector<Event>* events) {
  std::vector<SeqId> expired;
  for (const auto& [id, seq] : sequences_) {
    if (seq->request.deadline_s <= now_s) expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());
  for (SeqId id : expired) {
    Release(id);
    events->push_back({id, EventKind::kDeadlineExceeded});
  }
}

StepPlan Scheduler::Schedule(double now_s, std::vector<Event>* events) {
  ExpireDeadlines(now_s, events);
  StepPlan plan;
  int32_t budget = config_.max_step_tokens;
  auto add_to_plan = [&](Sequence& seq, int64_t count, bool decode, int64_t cached = 0) {
    PlannedSeq planned;
    planned.id = seq.request.id;
    planned.cached_tokens = cached;
    planned.start_pos = seq.computed;
    planned.tokens.assign(seq.tokens.begin() + seq.computed,
                          seq.tokens.begin() + seq.computed + (decode ? 1 : count));
    if (decode) {
      planned.tokens.insert(planned.tokens.end(), seq.drafts.begin(),
                            seq.drafts.begin() + (count - 1));
      planned.num_drafts = static_cast<int32_t>(count - 1);
    }
    planned.sample = decode || seq.computed + count == static_cast<int64_t>(seq.tokens.size());
    planned.full_table = &seq.blocks->full_table();
    planned.swa_table = &seq.blocks->swa_table();
    budget -= static_cast<int32_t>(count);
    plan.seqs.push_back(std::move(planned));
  };

  // Decodes first, then prompt chunks, both oldest first. A preemption removes a sequence from
  // running_, so iterate over a snapshot and skip what is gone.
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<SeqId> snapshot = running_;
    for (SeqId id : snapshot) {
      auto it = sequences_.find(id);
      if (it == sequences_.end() || it->second->blocks == nullptr) continue;
      Sequence& seq = *it->second;
      const bool decode = seq.decoding();
      if (decode != (pass == 0) || budget <= 0) continue;
      int64_t count;
      if (decode) {
        count = std::min<int64_t>(1 + seq.drafts.size(), budget);
        // Never run past the context.
        count = std::min<int64_t>(count, config_.max_context - seq.computed);
      } else {
        count = std::min<int64_t>(static_cast<int64_t>(seq.tokens.size()) - seq.computed, budget);
      }
      if (count <= 0) continue;
      if (!TryGrow(seq, seq.computed + count, events)) continue;
      add_to_plan(seq, count, decode);
    }
  }
  // A prompt chunk of the second pass can preempt a newer sequence planned for decoding in the
  // first pass: drop planned entries whose sequence lost its blocks.
  plan.seqs.erase(std::remove_if(plan.seqs.begin(), plan.seqs.end(),
                                 [&](const PlannedSeq& p) {
                                   auto it = sequences_.find(p.id);
                                   return it == sequences_.end() || !it->second->blocks;
                                 }),
                  plan.seqs.end());

  // Admit waiting requests while there is room; admission never preempts.
  while (!waiting_.empty() && budget > 0 && num_running() < config_.max_running) {
    Sequence& seq = *sequences_.at(waiting_.front());
    seq.blocks = std::make_unique<kv::SequenceBlocks>(config_.kv, &full_pool_, &swa_pool_);
    const int64_t length = static_cast<int64_t>(seq.tokens.size());
    // At least the last token runs: its logits give the next token.
    const int64_t cached = seq.blocks->AttachCachedPrefix(seq.tokens, length - 1);
    const int64_t count = std::min<int64_t>(length - cached, budget);
    if (!seq.blocks->Grow(cached + count)) {
      seq.blocks.reset();  // the cached blocks go back to the cache
      break;
    }
    seq.computed = cached;
    waiting_.pop_front();
    running_.push_back(seq.request.id);
    add_to_plan(seq, count, /*decode=*/false, cached);
  }
  // Counted once at the end: preemption may have dropped planned entries.
  for (const PlannedSeq& p : plan.seqs) plan.num_tokens += static_cast<int32_t>(p.tokens.size());
  return plan;
}

void Scheduler::Commit(const StepPlan& plan, const std::vector<SeqResult>& results,
                       std::vector<Event>* events) {
  absl::flat_hash_map<SeqId, const SeqResult*> by_id;
  for (const SeqResult& result : results) by_id[result.id] = &result;
  for (const PlannedSeq& planned : plan.seqs) {
    auto it = sequences_.find(planned.id);
    if (it == sequences_.end()) continue;
    Sequence& seq = *it->second;
    const SeqResult* result = by_id.contains(planned.id) ? by_id[planned.id] : nullptr;
    const int64_t run = static_cast<int64_t>(planned.tokens.size()) - planned.num_drafts;
    if (!planned.sample) {
      seq.computed = planned.start_pos + run;
      seq.blocks->PublishComputed(seq.tokens, seq.computed);
      continue;
    }
    STEPSERVE_CHECK(result != nullptr && !result->new_tokens.empty(),
                    "a sampling step needs at least one new token");
    const int64_t accepted = static_cast<int64_t>(result->new_tokens.size()) - 1;
    STEPSERVE_CHECK(accepted <= planned.num_drafts, "more tokens accepted than drafted");
    seq.computed = planned.start_pos + run + accepted;
    seq.blocks->Truncate(seq.computed);  // drop the KV of rejected drafts
    seq.tokens.insert(seq.tokens.end(), result->new_tokens.begin(), result->new_tokens.end());
    seq.generated += static_cast<int64_t>(result->new_tokens.size());
    seq.drafts.clear();
    seq.blocks->PublishComputed(seq.tokens, seq.computed);
    if (result->finished || seq.generated >= seq.request.max_new_tokens ||
        static_cast<int64_t>(seq.tokens.size()) >= config_.max_context) {
      Release(planned.id);
      events->push_back({planned.id, EventKind::kFinished});
    }
  }
}

int64_t Scheduler::waiting_prompt_tokens() const {
  int64_t total = 0;
  for (SeqId id : waiting_) {
    const Sequence& seq = *sequences_.at(id);
    total += static_cast<int64_t>(seq.tokens.size()) - seq.computed;
  }
  return total;
}

const std::vector<int32_t>* Scheduler::tokens(SeqId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : &it->second->tokens;
}

}  // namespace stepserve::scheduler
