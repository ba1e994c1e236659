// Engine::Impl, shared by the engine's files: engine.cc (creation, requests, the loop) and
// engine_step.cc (one scheduled step: forward, sampling, events). Not part of the public API.
#ifndef STEPSERVE_ENGINE_RUNTIME_ENGINE_IMPL_H_
#define STEPSERVE_ENGINE_RUNTIME_ENGINE_IMPL_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/model/kv_storage.h"
#include "engine/model/step35_model.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/request_state.h"
#include "engine/scheduler/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace stepserve::engine {

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Engine::Impl {
  EngineConfig config;
  int64_t steps_run = 0;                     // engine thread only; published in LoadReport::steps
  std::shared_ptr<EngineObserver> observer;  // may be null
  std::unique_ptr<model::Step35Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<model::KvStorage> kv;
  scheduler::SchedulerConfig sched_config;
  std::unique_ptr<scheduler::Scheduler> scheduler;
  ModelInfo info;
  Clock::time_point epoch = Clock::now();

  // Engine-thread state.
  absl::flat_hash_map<scheduler::SeqId, std::unique_ptr<RequestState>> live;
  model::ForwardOutput forward_out;
  // Prompt tokens of started requests, and those of them the prefix cache held.
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;

  // Shared state, guarded by mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<RequestState>> inbox;
  std::vector<scheduler::SeqId> cancels;
  absl::flat_hash_map<std::string, scheduler::SeqId> live_ids;  // submitted, not yet finished
  scheduler::SeqId next_seq_id = 1;
  std::mt19937_64 seed_rng{std::random_device{}()};
  bool started = false, draining = false, stopping = false;
  absl::Status health;
  int32_t waiting_published = 0;  // scheduler's waiting count after the last inbox drain / step
  LoadReport load;
  KvBlocks blocks;
  std::thread thread;

  double Now() const { return Seconds(Clock::now() - epoch); }
  absl::Status Validate(GenerationRequest& request, int64_t* max_new_tokens) const;
  absl::Status WarmUp();
  void Loop();
  // Adds the inbox to the scheduler; returns the cancels and whether to stop. Holds mu.
  void DrainInbox(std::vector<scheduler::SeqId>* cancels_out, bool* stop_out);
  void RunStep();
  void HandleEvents(const std::vector<scheduler::Event>& events);
  // Sends the remaining text, Finished, and forgets the request.
  void Finish(scheduler::SeqId id, FinishReason reason, absl::Status error);
  void Publish();
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_ENGINE_IMPL_H_
