// Byte-level BPE tokenizer for GGUF models (tokenizer.ggml.model = "gpt2"): special-token
// partition, pre-tokenizer regex split, byte-level BPE; and detokenization to raw bytes.
// Thread-safe: all methods are const and share no mutable state.
#ifndef STEPSERVE_ENGINE_TOKENIZER_TOKENIZER_H_
#define STEPSERVE_ENGINE_TOKENIZER_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/gguf/gguf_value.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/vocabulary.h"

namespace stepserve::tokenizer {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromMetadata(const gguf::Metadata& metadata);

  // Tokenizes `text`. With `add_bos`, the BOS id (if the vocabulary has one) comes first. With
  // `parse_special`, texts of CONTROL and USER_DEFINED tokens in `text` map to their ids (longest
  // match first); without it they are tokenized as ordinary text.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special) const;

  // The bytes a token stands for: byte-level text decoded for normal tokens, the text itself for
  // CONTROL tokens (and for any token whose text is not byte-level). Empty for invalid ids.
  std::string TokenBytes(int32_t id) const;
  const std::string& TokenBytesRef(int32_t id) const { return bytes_[id]; }  // id must be valid

  // Concatenated bytes of `ids` (not necessarily valid UTF-8; see StreamingDecoder). With
  // `skip_special`, CONTROL tokens are left out. Invalid ids decode to U+FFFD so that they are
  // visible rather than silently dropped.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const;

  // eos / eot / eom, plus tokens whose text is a known end-of-turn marker (<|im_end|>, ...).
  bool IsEndOfGeneration(int32_t id) const { return vocab_.IsValid(id) && eog_[id] != 0; }
  bool IsControl(int32_t id) const {
    return vocab_.IsValid(id) && vocab_.type(id) == TokenType::kControl;
  }

  int32_t vocab_size() const { return vocab_.size(); }
  const SpecialTokens& special() const { return vocab_.special(); }
  int32_t bos_id() const { return vocab_.special().bos; }
  int32_t eos_id() const { return vocab_.special().eos; }
  int32_t eot_id() const { return vocab_.special().eot; }
  int32_t padding_id() const { return vocab_.special().padding; }
  bool add_bos_token() const { return vocab_.add_bos(); }
  bool add_eos_token() const { return vocab_.add_eos(); }
  const Vocabulary& vocab() const { return vocab_; }
  PreTokenizerType pre_tokenizer() const { return pre_.type(); }
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_sorted_; }

  // Id of the token whose stored text is exactly `text` (e.g. "<|im_end|>").
  std::optional<int32_t> TokenId(std::string_view text) const { return vocab_.Find(text); }

 private:
  Tokenizer(Vocabulary vocab, BpeModel bpe, PreTokenizer pre)
      : vocab_(std::move(vocab)), bpe_(std::move(bpe)), pre_(pre) {}

  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const;
  // Length of the longest special-token text at text[pos] and its id; 0 if none.
  size_t MatchSpecial(std::string_view text, size_t pos, int32_t* id) const;

  Vocabulary vocab_;
  BpeModel bpe_;
  PreTokenizer pre_;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> eog_;  // per id: 1 if end-of-generation
  std::vector<int32_t> eog_sorted_;
  // Byte trie of special-token texts: edge key (node << 8 | byte) -> child node.
  absl::flat_hash_map<uint64_t, int32_t> trie_edges_;
  std::vector<int32_t> trie_token_;  // per node: token id ending here, or -1
  std::array<bool, 256> special_first_byte_{};
};

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_TOKENIZER_H_
