#include "engine/runtime/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "engine/base/check.h"

namespace stepserve::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  STEPSERVE_CHECK(!matched_.has_value(), "Push after a stop string matched");
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // Everything released earlier could not begin a stop string (it was not a prefix of one), so a
  // match can only start inside held_. The earliest match wins; at one position, the longest.
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stop.size() > best->size())) {
      best_pos = pos;
      best = &stop;
    }
  }
  if (best != nullptr) {
    matched_ = *best;
    std::string out = held_.substr(0, best_pos);
    held_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(held_.size(), stop.size() - 1); k > hold; --k) {
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::Flush() { return std::exchange(held_, {}); }

}  // namespace stepserve::engine
