// Pre-tokenizers: the regex split sequences that run before byte-level BPE, selected by
// `tokenizer.ggml.pre` (spec: shared/spec/step35-architecture.md 7.2). Each regex of a sequence
// splits every piece produced by the previous one; matched and unmatched spans are both kept
// (Hugging Face `Split(..., "isolated")`). The regexes are hand-written matchers over a decoded
// code point array: std::regex has no \p{..} and is far too slow for 100k-token prompts.
#ifndef STEPSERVE_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define STEPSERVE_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace stepserve::tokenizer {

enum class PreTokenizerType {
  kGpt2,           // "gpt-2": the GPT-2 ByteLevel regex
  kDefault,        // "default": llama.cpp's fallback sequence of four regexes
  kDeepseekLlm,    // "deepseek-llm"
  kDeepseekCoder,  // "deepseek-coder"
  kDeepseekV3,     // "deepseek-v3" (Step models)
};

// Maps a `tokenizer.ggml.pre` value; an error names the unsupported value.
absl::StatusOr<PreTokenizerType> ParsePreTokenizerType(std::string_view name);
std::string_view PreTokenizerName(PreTokenizerType type);

class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerType type) : type_(type) {}

  PreTokenizerType type() const { return type_; }

  // Appends the pieces of `text` to *pieces, in order; they are views into `text` and their
  // concatenation is exactly `text` (malformed UTF-8 bytes travel as property-less characters).
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  PreTokenizerType type_;
};

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
