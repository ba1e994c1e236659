#include "server/call_core.h"

#include <utility>

namespace stepserve::server {

template <typename F>
void CallCore::Push(F&& merge) {
  bool kick = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    merge(pending_);
    if (!in_flight_ && !detached_) {
      in_flight_ = true;
      kick = true;
    }
  }
  if (kick) kick_();
}

void CallCore::OnStarted(const engine::StartedEvent& event) {
  Push([&](Batch& b) { b.started = event; });
}

void CallCore::OnDelta(const engine::DeltaEvent& event) {
  Push([&](Batch& b) {
    if (!b.has_delta) {
      b.delta = event;
      b.has_delta = true;
      return;
    }
    b.delta.text += event.text;
    b.delta.token_ids.insert(b.delta.token_ids.end(), event.token_ids.begin(),
                             event.token_ids.end());
    b.delta.logprobs.insert(b.delta.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
    b.delta.completion_tokens = event.completion_tokens;
  });
}

void CallCore::OnFinished(const engine::FinishedEvent& event) {
  Push([&](Batch& b) { b.finished = event; });
}

bool CallCore::TakeOrRelease(Batch* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty()) {
    in_flight_ = false;
    return false;
  }
  *out = std::move(pending_);
  pending_ = Batch();
  return true;
}

void CallCore::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  detached_ = true;
}

}  // namespace stepserve::server
