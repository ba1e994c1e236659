#include "engine/sampling/penalty_history.h"

namespace stepserve {

PenaltyHistory::PenaltyHistory(int32_t last_n) : last_n_(last_n) {
  if (last_n_ > 0) ring_.resize(last_n_);
}

void PenaltyHistory::Push(int32_t token) {
  if (last_n_ == 0) return;
  if (last_n_ > 0) {
    if (window_size_ == last_n_) {
      // The oldest token leaves the window; drop its entry at zero so counts() lists only tokens
      // that are present.
      const int32_t old = ring_[next_];
      auto it = counts_.find(old);
      if (--it->second == 0) counts_.erase(it);
    } else {
      ++window_size_;
    }
    ring_[next_] = token;
    next_ = (next_ + 1) % last_n_;
  } else {
    ++window_size_;
  }
  ++counts_[token];
}

}  // namespace stepserve
