// Decides when the engine loop is wedged, for the "liveness" health status (docs/serve-flags.md):
// the engine has work (running or queued requests) but its step counter has not moved for
// `timeout`. Pure: the caller feeds the clock, whether there is work, and the counter, so the
// rule is tested without threads or sleeps.
//
//   StallDetector stall(std::chrono::seconds(60));
//   if (stall.Update(now, !engine.Idle(), engine.GetLoad().steps)) { /* liveness NOT_SERVING */ }
#ifndef STEPSERVE_SERVER_STALL_DETECTOR_H_
#define STEPSERVE_SERVER_STALL_DETECTOR_H_

#include <chrono>
#include <cstdint>

namespace stepserve::server {

class StallDetector {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StallDetector(Clock::duration timeout) : timeout_(timeout) {}

  // True while stalled: `busy` and `steps` unchanged since a moment at least `timeout` ago.
  // Progress (a new step count) or an idle engine resets the clock.
  bool Update(Clock::time_point now, bool busy, int64_t steps) {
    const bool started_work = busy && !was_busy_;
    was_busy_ = busy;
    if (!busy || !seen_ || started_work || steps != last_steps_) {
      seen_ = true;
      last_steps_ = steps;
      since_ = now;
      return false;
    }
    return now - since_ >= timeout_;
  }
  // How long the counter has been still (0 when not busy).
  Clock::duration stalled_for(Clock::time_point now) const {
    return seen_ ? now - since_ : Clock::duration::zero();
  }

 private:
  Clock::duration timeout_;
  bool seen_ = false;
  bool was_busy_ = false;
  int64_t last_steps_ = 0;
  Clock::time_point since_{};
};

}  // namespace stepserve::server

#endif  // STEPSERVE_SERVER_STALL_DETECTOR_H_
