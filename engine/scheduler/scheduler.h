// Continuous batching at token granularity (architecture.md sections 1 and 3). Pure: no threads,
// no devices, no wall clock (the caller passes `now` in seconds). The engine thread owns it:
//
//   Add(request)            queue a request (refused when the queue is full or it can never fit)
//   SetDrafts(id, tokens)   draft tokens to verify in this sequence's next decode step (MTP)
//   Schedule(now) -> plan   which sequences run this step and with which tokens
//   Commit(plan, result)    record sampled / accepted tokens, finish sequences, free KV
//   Cancel(id)              stop a waiting or running sequence and free its KV at once
//
// Policy: decoding sequences go first (1 + drafts tokens each), then prompts continue in chunks
// under the per-step token budget, then waiting requests are admitted (lower priority value
// first, FIFO within a priority). When KV blocks run out the newest running sequence is
// preempted: its KV is freed and it re-queues at the front to be recomputed (prompt + tokens
// generated so far) later.
//
// Prefix cache (config.kv.prefix_cache): every full block whose KV is computed is published by
// content; admission starts a sequence at the longest cached prefix of its tokens (never the
// block holding its last token: one row must run to produce logits) and prefills only the rest.
// Finished, cancelled and preempted sequences leave their published blocks in an LRU that counts
// as free KV and is evicted oldest first when an allocation needs the room.
#ifndef STEPSERVE_ENGINE_SCHEDULER_SCHEDULER_H_
#define STEPSERVE_ENGINE_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/sequence_blocks.h"

namespace stepserve::scheduler {

using SeqId = uint64_t;

struct SchedulerConfig {
  int32_t max_running = 64;       // sequences in one step
  int32_t max_step_tokens = 512;  // token budget of one step (prefill chunks + decodes)
  int32_t max_queue = 256;        // waiting requests
  int64_t max_context = 4096;     // prompt + generated tokens of one sequence
  kv::KvGeometry kv;              // block size, sliding window, rollback slack
  int32_t full_blocks = 0;        // KV pool sizes (blocks)
  int32_t swa_blocks = 0;
};

struct Request {
  SeqId id = 0;
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 0;
  int32_t priority = 0;
  double arrival_s = 0;
  double deadline_s = std::numeric_limits<double>::infinity();
};

// One sequence's share of a step.
struct PlannedSeq {
  SeqId id = 0;
  int64_t start_pos = 0;        // position of tokens[0]
  std::vector<int32_t> tokens;  // prompt chunk, or [last token, draft_1 .. draft_k]
  int32_t num_drafts = 0;       // k; logits are needed for all 1 + k rows
  bool sample = false;          // the step ends the prompt or decodes: sample after it
  // Positions taken from the prefix cache when this step admitted the sequence (start_pos then
  // equals it); 0 on every other step.
  int64_t cached_tokens = 0;
  const std::vector<kv::BlockId>* full_table = nullptr;
  const std::vector<kv::BlockId>* swa_table = nullptr;
};

struct StepPlan {
  std::vector<PlannedSeq> seqs;
  int32_t num_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

struct SeqResult {
  SeqId id = 0;
  // Tokens the step produced for this sequence: the accepted drafts then the sampled token
  // (empty for a prompt chunk that does not end the prompt).
  std::vector<int32_t> new_tokens;
  bool finished = false;  // stop condition met: free the sequence
};

enum class EventKind {
  kPreempted,         // KV freed, re-queued for recomputation
  kCancelled,         // Cancel()
  kDeadlineExceeded,  // deadline passed, waiting or running
  kFinished,          // Commit() with finished or the token limit reached
};

struct Event {
  SeqId id = 0;
  EventKind kind = EventKind::kFinished;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);
  ~Scheduler();

  // INVALID_ARGUMENT: empty prompt, prompt past the context, duplicate id;
  // RESOURCE_EXHAUSTED: queue full, or prompt + max_new_tokens could never fit the KV capacity.
  absl::Status Add(Request request);
  // Drafts for the sequence's next decode step (ignored unless it is decoding); at most
  // rollback_slack tokens.
  void SetDrafts(SeqId id, std::vector<int32_t> drafts);
  // Removes a waiting or running sequence; false if unknown.
  bool Cancel(SeqId id);

  StepPlan Schedule(double now_s, std::vector<Event>* events);
  void Commit(const StepPlan& plan, const std::vector<SeqResult>& results,
              std::vector<Event>* events);

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t waiting_prompt_tokens() const;
  const kv::BlockPool& full_pool() const { return full_pool_; }
  const kv::BlockPool& swa_pool() const { return swa_pool_; }
  // All tokens of a live sequence (prompt + generated); nullptr if unknown.
  const std::vector<int32_t>* tokens(SeqId id) const;
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  struct Sequence;
  bool TryGrow(Sequence& seq, int64_t new_length, std::vector<Event>* events);
  void Preempt(Sequence& seq, std::vector<Event>* events);
  void Release(SeqId id);
  void ExpireDeadlines(double now_s, std::vector<Event>* events);
  void InsertWaiting(SeqId id, bool front);

  SchedulerConfig config_;
  kv::BlockPool full_pool_;
  kv::BlockPool swa_pool_;
  absl::flat_hash_map<SeqId, std::unique_ptr<Sequence>> sequences_;
  std::vector<SeqId> running_;  // in admission order (oldest first)
  std::deque<SeqId> waiting_;   // sorted by (priority, arrival); preempted ones in front
  int64_t num_preemptions_ = 0;
};

}  // namespace stepserve::scheduler

#endif  // STEPSERVE_ENGINE_SCHEDULER_SCHEDULER_H_
