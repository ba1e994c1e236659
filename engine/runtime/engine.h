// The engine: one thread per model replica that owns the continuous-batching scheduler and issues
// all model work (architecture.md sections 1 and 3). The server submits tokenized requests with a
// TokenSink and never touches the model.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(config));
//   RETURN_IF_ERROR(engine->Start());            // warm-up step; then ready
//   RETURN_IF_ERROR(engine->Submit(std::move(request), sink));
//   ...
//   engine->BeginDrain();                        // SIGTERM: finish running work, refuse new
//   engine->Stop();                              // abort the rest (kAbort) and join
//
// Each step: Schedule → one Forward over the ragged batch (block tables from the plan) → sample
// each sequence that ends its prompt or decodes → stop checks → Commit → sink events.
#ifndef STEPSERVE_ENGINE_RUNTIME_ENGINE_H_
#define STEPSERVE_ENGINE_RUNTIME_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/runtime/engine_observer.h"
#include "engine/runtime/events.h"
#include "engine/sampling/sampling_params.h"

namespace stepserve::tokenizer {
class Tokenizer;
}

namespace stepserve::engine {

// Called on the engine thread; implementations must never block (buffer and hand off). For each
// accepted request: OnStarted at most once (not for a request that ends while queued), OnDelta
// zero or more times, then OnFinished exactly once; no call after OnFinished.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void OnStarted(const StartedEvent& event) = 0;
  virtual void OnDelta(const DeltaEvent& event) = 0;
  virtual void OnFinished(const FinishedEvent& event) = 0;
};

enum class SpeculationMode { kAuto, kOff, kOn };

struct GenerationRequest {
  std::string request_id;       // unique among live requests
  std::vector<int32_t> prompt;  // already tokenized (BOS included if wanted)
  // Validated by Submit (errors name the field). sampling.n_logprobs is set from top_logprobs
  // and sampling.ignore_eos from ignore_eos below.
  SamplingParams sampling;
  // The sampling seed; absent: the engine draws a random one (sampling.seed is overwritten).
  std::optional<uint64_t> seed;
  int64_t max_new_tokens = 0;     // 0: up to the context
  std::vector<std::string> stop;  // stop strings; the matched one is not returned
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool return_logprobs = false;
  int32_t top_logprobs = 0;  // [0, 20]; with return_logprobs
  int32_t priority = 0;      // lower runs first
  std::optional<std::chrono::steady_clock::time_point> deadline;
  SpeculationMode speculation = SpeculationMode::kAuto;
  int32_t max_draft_tokens = -1;  // -1: engine default
};

struct EngineConfig {
  std::string model_path;
  std::string draft_path;  // separate MTP file (not used yet: speculation is not implemented)
  std::string backend = "cpu";  // "cpu" or "cuda" (RegisteredBackends())
  int device = 0;               // accelerator index for non-CPU backends
  int threads = 0;              // 0: all cores
  int64_t ctx_size = 0;         // 0: min(model context, 8192)
  double kv_cache_gib = 0;      // KV memory budget (full + sliding pools) in GiB
  int64_t kv_cache_blocks = 0;  // full-attention blocks; overrides kv_cache_gib
  // Element type of the cached K and V: F16 halves the cache (twice the blocks for a budget),
  // rounding each cached value to 2^-11 relative; Q8_0 (CPU backend only for now) takes 34 bytes
  // per 32 values (docs/serve-flags.md).
  KvDtype kv_dtype = KvDtype::kF32;
  // Accelerator backends with neither KV setting: the KV cache gets what is left of this fraction
  // of device memory after the weights and kActivationReserveBytes.
  double gpu_memory_fraction = 0.92;
  int32_t block_size = 16;
  int32_t max_running = 64;
  int32_t max_step_tokens = 512;
  int32_t max_queue = 256;
  // Share the full KV blocks of identical prompt prefixes between requests (prefix caching).
  bool prefix_cache = true;
  // Steps whose sampled rows are all greedy without logit_bias or penalties take only each row's
  // argmax, log-sum-exp and top kMaxLogprobs entries from the backend (Backend::LogitsTopK)
  // instead of the full logits: same tokens and logprobs, far fewer bytes back from a GPU.
  bool device_sampling = false;
  // Metrics hooks (engine_observer.h); may be null.
  std::shared_ptr<EngineObserver> observer;
};

struct LoadReport {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t max_running = 0;
  double kv_usage = 0;  // used / capacity of the full-attention pool
  int64_t kv_capacity_tokens = 0;
  int64_t waiting_prompt_tokens = 0;
  double prefix_cache_hit_rate = 0;  // cached / prompt tokens of all started requests
  double spec_acceptance_rate = 0;
  bool draining = false;
  bool healthy = true;
  int64_t steps = 0;  // engine steps run since start (the liveness watchdog watches it move)
};

struct ModelInfo {
  std::string name, architecture;
  std::string quantization;  // the ggml type holding most weight bytes, e.g. "q4_K"
  int64_t max_context = 0;   // the engine's context (ctx_size), not the training context
  int64_t vocab_size = 0;
  std::vector<int32_t> eos_token_ids;  // every end-of-generation id
  int32_t mtp_heads = 0;
  // KV cache the engine sized (for logs and /info).
  int64_t kv_full_blocks = 0, kv_swa_blocks = 0;
  int32_t block_size = 0;
  uint64_t kv_bytes = 0;
};

class Engine {
 public:
  // Loads the model, builds the tokenizer and sizes the KV cache. `progress` (optional) is
  // called on this thread with a phase name and bytes done / total.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const EngineConfig& config,
      std::function<void(std::string_view phase, uint64_t done, uint64_t total)> progress = {});
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs one warm-up forward + sample, then starts the engine thread. FAILED_PRECONDITION if
  // called twice; the warm-up's error otherwise.
  absl::Status Start();

  // Thread-safe. INVALID_ARGUMENT (the bad field named; "prompt has N tokens; the context holds
  // M"); RESOURCE_EXHAUSTED (queue full, or the request could never fit the KV cache);
  // UNAVAILABLE (not started, draining, stopped or unhealthy). On OK the sink gets events.
  absl::Status Submit(GenerationRequest request, std::shared_ptr<TokenSink> sink);
  // Thread-safe. Ends a live request with kCancelled and frees its KV on the engine thread's
  // next iteration; false if no live request has this id.
  bool Cancel(std::string_view request_id);
  // Refuse new work; running and queued requests finish.
  void BeginDrain();
  // Aborts everything still live (kAbort) and joins the engine thread. Idempotent.
  void Stop();

  bool Idle() const;            // nothing running, waiting or submitted
  bool Healthy() const;         // false after a model error
  absl::Status health() const;  // OK, or the model error that made the engine unhealthy
  LoadReport GetLoad() const;   // thread-safe snapshot (as of the last step)
  const ModelInfo& model_info() const;
  const tokenizer::Tokenizer& tokenizer() const;

  // Free / total blocks of the full-attention and sliding-window pools as of the last step
  // (tests check that cancel and deadline return every block).
  struct KvBlocks {
    int32_t full_free = 0, full_total = 0, swa_free = 0, swa_total = 0;
  };
  KvBlocks kv_blocks() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_ENGINE_H_
