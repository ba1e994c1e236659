// The synthetic models' vocabulary: a byte-level BPE learned from the embedded corpus plus the
// Step special tokens, optionally padded to the real vocabulary size so tensor shapes match.
//
// Token ids (both layouts):
//   0  <｜begin▁of▁sentence｜>  BOS, CONTROL        (tokenizer.ggml.bos_token_id, as in the
//   1  <｜end▁of▁sentence｜>    padding, CONTROL      official file: bos 0, padding 1)
//   2 .. 257                 the 256 byte tokens, NORMAL, in byte order
//   258 ..                   one token per learned merge, NORMAL, in rank order
// Compact layout (pad_to = 0, the tiny preset): the specials follow the merges in the order
//   <|im_start|>, <|im_end|>, <think>, </think>, <tool_call>, </tool_call>, <tool_response>,
//   </tool_response>, <im_patch>; eos = <|im_end|>.
// Padded layout (pad_to = 128896): the same specials start at id 128006, so eos = <|im_end|> =
//   128007 as in the official file (spec 7.1; the other special ids are our choice), and every
//   other id up to pad_to - 1 is a filler "<|reserved_token_ID|>" of type UNUSED.
#ifndef STEPSERVE_ENGINE_SYNTH_VOCAB_H_
#define STEPSERVE_ENGINE_SYNTH_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace stepserve::synth {

inline constexpr int64_t kStepVocabSize = 128896;
inline constexpr int32_t kPaddedFirstSpecialId = 128006;

// tokenizer.ggml.token_type values.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5 };

struct SynthVocab {
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens (byte-alphabet spelling)
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // "left right"
  uint32_t bos_id = 0;
  uint32_t eos_id = 0;
  uint32_t padding_id = 1;
  int32_t first_merge_id = 258;
  int32_t n_merges = 0;
};

// The Step special-token texts in id order of the layouts above (BOS and padding excluded).
std::vector<std::string> StepSpecialTokens();

// Trains on TrainingCorpus() with up to `max_merges` merges (fast: well under a second for a few
// thousand) and lays out the ids. Pairs seen once may merge too, so the small corpus still yields
// a few thousand merges (its rarer words become single tokens). `pad_to` 0 keeps the compact
// layout; otherwise it must be kStepVocabSize-like: larger than the trained vocabulary plus
// kPaddedFirstSpecialId headroom.
absl::StatusOr<SynthVocab> BuildSynthVocab(int max_merges, int64_t pad_to);

}  // namespace stepserve::synth

#endif  // STEPSERVE_ENGINE_SYNTH_VOCAB_H_
