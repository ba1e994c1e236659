// The engine-facing half of one generation call: a TokenSink that only merges events into a
// mutex-protected pending batch and "kicks" the gRPC reactor when no write is in flight. Deltas
// that arrive while a write is in flight coalesce into one. The reactor drains the batch on its
// own threads (write completions), so the engine thread never waits on the network.
#ifndef STEPSERVE_SERVER_CALL_CORE_H_
#define STEPSERVE_SERVER_CALL_CORE_H_

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "engine/runtime/engine.h"

namespace stepserve::server {

class CallCore : public engine::TokenSink {
 public:
  struct Batch {
    std::optional<engine::StartedEvent> started;
    bool has_delta = false;
    engine::DeltaEvent delta;  // merged
    std::optional<engine::FinishedEvent> finished;
    bool empty() const { return !started && !has_delta && !finished; }
  };

  explicit CallCore(std::string request_id) : request_id_(std::move(request_id)) {}
  const std::string& request_id() const { return request_id_; }

  // Set before Submit. Called (outside the lock) by whichever thread brings new events while no
  // write is in flight; the callee then owns the "write token" until TakeOrRelease returns false.
  void SetKick(std::function<void()> kick) { kick_ = std::move(kick); }
  // Moves the pending batch out; with nothing pending, releases the write token and returns false.
  bool TakeOrRelease(Batch* out);
  // The reactor is finishing: no more kicks.
  void Detach();

  // Set by the Abort RPC before cancelling, so the end reads as finish_reason ABORT.
  std::atomic<bool> aborted{false};

  void OnStarted(const engine::StartedEvent& event) override;
  void OnDelta(const engine::DeltaEvent& event) override;
  void OnFinished(const engine::FinishedEvent& event) override;

 private:
  template <typename F>
  void Push(F&& merge);

  const std::string request_id_;
  std::function<void()> kick_;
  std::mutex mu_;
  Batch pending_;
  bool in_flight_ = false;
  bool detached_ = false;
};

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_CALL_CORE_H_
