// Metrics hooks of the engine. The server's Prometheus module implements this interface; nothing
// in engine/ depends on a metrics library. Every method has an empty default so an implementation
// overrides only what it records.
//
// Threading: OnRequestQueued / OnRequestRejected run on the thread that called Engine::Submit;
// everything else runs on the engine thread. Implementations must be thread-safe and must not
// block (they sit on the step's critical path).
#ifndef STEPSERVE_ENGINE_RUNTIME_ENGINE_OBSERVER_H_
#define STEPSERVE_ENGINE_RUNTIME_ENGINE_OBSERVER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/runtime/events.h"

namespace stepserve::engine {

struct StepStats {
  int32_t num_seqs = 0;        // sequences in the step
  int32_t prefill_tokens = 0;  // prompt (or recomputed) tokens
  int32_t decode_tokens = 0;   // one per decoding sequence (plus drafts when speculating)
  int32_t sampled_seqs = 0;    // sequences that sampled a token
  int32_t device_sampled_seqs = 0;  // of them, from the backend's top entries (device sampling)
  // Phase durations in seconds: scheduling, forward pass, sampling + stop checks + events.
  double schedule_s = 0, forward_s = 0, sample_s = 0, total_s = 0;
};

struct KvUsageStats {
  int32_t full_used_blocks = 0, full_capacity_blocks = 0;
  int32_t swa_used_blocks = 0, swa_capacity_blocks = 0;
  int32_t block_size = 0;
};

struct RequestFinishedStats {
  FinishReason reason = FinishReason::kStop;
  Usage usage;
  Timings timings;
  SpeculationStats speculation;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;

  // Accepted by Submit.
  virtual void OnRequestQueued(int32_t /*prompt_tokens*/) {}
  // Refused by Submit; the code is the one Submit returned (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
  // UNAVAILABLE).
  virtual void OnRequestRejected(absl::StatusCode /*code*/) {}
  // First scheduled (once per request, not again after a preemption).
  virtual void OnRequestStarted(const StartedEvent& /*started*/) {}
  // Time between two consecutive token events of one request (per output token).
  virtual void OnInterTokenLatency(double /*seconds*/) {}
  virtual void OnRequestFinished(const RequestFinishedStats& /*stats*/) {}
  // After every step that ran the model.
  virtual void OnStep(const StepStats& /*stats*/) {}
  // A running sequence lost its KV and was re-queued for recomputation.
  virtual void OnPreemption() {}
  // After every step, and when a cancel or deadline freed blocks.
  virtual void OnKvUsage(const KvUsageStats& /*usage*/) {}
  // The engine turned unhealthy (a model error); `status` says why.
  virtual void OnUnhealthy(const absl::Status& /*status*/) {}
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_ENGINE_OBSERVER_H_
