// A small byte-level BPE trainer (GPT-2 convention: merges over raw bytes, vocabulary spelled in
// the byte-to-unicode alphabet) for the synthetic models' vocabulary. Words come from a pre-split
// that approximates llama.cpp's deepseek-v3 pre-tokenizer (spec step35-architecture.md 7.2):
// digit groups of at most 3, CJK runs, letter runs with one optional leading non-letter
// (usually a space), punctuation runs with an optional leading space and trailing line breaks,
// and whitespace runs that leave their last space to the following word.
#ifndef STEPSERVE_ENGINE_SYNTH_BPE_TRAINER_H_
#define STEPSERVE_ENGINE_SYNTH_BPE_TRAINER_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace stepserve::synth {

// Splits UTF-8 text into pre-tokenizer pieces; concatenated they give back `text` exactly.
// Invalid UTF-8 bytes are kept, each as its own one-byte piece.
std::vector<std::string> PreSplit(std::string_view text);

struct BpeModel {
  // Raw-byte spellings of the learned merges, in priority (rank) order.
  std::vector<std::pair<std::string, std::string>> merges;
  // Token byte strings: the 256 single bytes in byte order, then one per merge in rank order.
  std::vector<std::string> tokens;

  // Merges as GGUF writes them: "left right", both spelled in the byte alphabet.
  std::vector<std::string> MergeStrings() const;
  // Token texts in the byte alphabet (tokenizer.ggml.tokens entries).
  std::vector<std::string> TokenTexts() const;
};

// Learns up to `max_merges` merges from `corpus`: repeatedly merges the most frequent adjacent
// pair (ties: smallest left token id, then smallest right id), never across pieces. Stops early
// when no pair occurs at least `min_count` times.
absl::StatusOr<BpeModel> TrainBpe(std::string_view corpus, int max_merges, int min_count = 2);

// Applies merges by rank (lowest rank first, leftmost on ties), as a GPT-2 BPE tokenizer does.
class BpeEncoder {
 public:
  explicit BpeEncoder(const BpeModel& model);
  // Token byte strings of one pre-split piece; their concatenation is `piece`.
  std::vector<std::string> Encode(std::string_view piece) const;

 private:
  absl::flat_hash_map<std::string, int> ranks_;  // PairKey(left, right) -> rank
};

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_BPE_TRAINER_H_
