// Byte-level BPE merging: a piece's bytes start as single-byte tokens and the adjacent pair with
// the lowest merge rank is merged (leftmost first on ties) until no pair has a rule. Runs in
// O(n log n) per piece with a binary heap of candidate pairs over a linked symbol list.
#ifndef STEPSERVE_ENGINE_TOKENIZER_BPE_MODEL_H_
#define STEPSERVE_ENGINE_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/vocabulary.h"

namespace stepserve::tokenizer {

class BpeModel {
 public:
  // Needs a token for each of the 256 byte-alphabet characters; the error names the byte.
  static absl::StatusOr<BpeModel> Build(const Vocabulary& vocab);

  // Appends the ids of one pre-tokenized piece (raw bytes) to *out.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;

 private:
  struct Rule {
    int32_t rank;
    int32_t result;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::array<int32_t, 256> byte_token_{};
  absl::flat_hash_map<uint64_t, Rule> rules_;
};

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_BPE_MODEL_H_
