// The token window that repetition / presence / frequency penalties look at: the last `last_n`
// tokens of a sequence (prompt included when the engine feeds it), kept as a ring plus a count per
// distinct token so applying penalties costs O(distinct tokens), not O(vocab).
#ifndef STEPSERVE_ENGINE_SAMPLING_PENALTY_HISTORY_H_
#define STEPSERVE_ENGINE_SAMPLING_PENALTY_HISTORY_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace stepserve {

class PenaltyHistory {
 public:
  // last_n: -1 = every token ever pushed, 0 = nothing is kept, n > 0 = the last n tokens.
  explicit PenaltyHistory(int32_t last_n);

  void Push(int32_t token);

  // Occurrences of each token inside the window; tokens with no occurrence are absent.
  const absl::flat_hash_map<int32_t, int32_t>& counts() const { return counts_; }
  // Tokens inside the window.
  int64_t window_size() const { return window_size_; }

 private:
  int32_t last_n_;
  std::vector<int32_t> ring_;  // capacity last_n_ when last_n_ > 0; unused otherwise
  int64_t next_ = 0;           // ring slot the next token goes to
  int64_t window_size_ = 0;
  absl::flat_hash_map<int32_t, int32_t> counts_;
};

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_SAMPLING_PENALTY_HISTORY_H_
