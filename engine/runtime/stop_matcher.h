// Stop strings over streamed text. Text arrives in pieces (one per generated token); the matcher
// releases only text that can no longer be part of a stop string: a tail that could be the start
// of one is held until the next piece decides it. On a match the text before it is released and
// the stop string itself (and anything after it) is dropped.
#ifndef STEPSERVE_ENGINE_RUNTIME_STOP_MATCHER_H_
#define STEPSERVE_ENGINE_RUNTIME_STOP_MATCHER_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stepserve::engine {

class StopMatcher {
 public:
  // Empty strings are ignored (they would match everywhere); callers validate them away.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends `text` and returns what may be released now. After a match (matched() set) the
  // returned text ends just before the stop string and Push must not be called again.
  std::string Push(std::string_view text);
  // End of the stream without a match: releases the held tail.
  std::string Flush();

  const std::optional<std::string>& matched() const { return matched_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::optional<std::string> matched_;
};

}  // namespace stepserve::engine

#endif  // STEPSERVE_ENGINE_RUNTIME_STOP_MATCHER_H_
