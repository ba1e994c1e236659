// The byte-level BPE vocabulary read from GGUF `tokenizer.*` metadata (spec:
// shared/spec/gguf-and-quants.md A.11; shared/spec/step35-architecture.md 7.1), fully validated:
// every error names the key and, for arrays, the index.
#ifndef STEPSERVE_ENGINE_TOKENIZER_VOCABULARY_H_
#define STEPSERVE_ENGINE_TOKENIZER_VOCABULARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/gguf/gguf_value.h"

namespace stepserve::tokenizer {

// `tokenizer.ggml.token_type` values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Special token ids; -1 when the key is absent.
struct SpecialTokens {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;
  int32_t eom = -1;
  int32_t unknown = -1;
  int32_t padding = -1;
  int32_t separator = -1;
  int32_t cls = -1;
  int32_t mask = -1;
  int32_t fim_pre = -1;
  int32_t fim_suf = -1;
  int32_t fim_mid = -1;
  int32_t fim_pad = -1;
  int32_t fim_rep = -1;
  int32_t fim_sep = -1;
};

// One merge rule: the pair (left, right) becomes `result`; rank = index in the merges array.
struct MergeRule {
  int32_t left;
  int32_t right;
  int32_t result;
};

class Vocabulary {
 public:
  // Requires tokenizer.ggml.model == "gpt2", tokens, merges; token_type is optional (all NORMAL).
  static absl::StatusOr<Vocabulary> FromMetadata(const gguf::Metadata& metadata);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  bool IsValid(int32_t id) const { return id >= 0 && id < size(); }
  // Token text as stored (byte-level alphabet for normal tokens). `id` must be valid.
  const std::string& text(int32_t id) const { return tokens_[id]; }
  TokenType type(int32_t id) const { return types_[id]; }
  // Id of the token whose stored text is `text` (the first one if texts repeat).
  std::optional<int32_t> Find(std::string_view text) const;

  const std::vector<MergeRule>& merges() const { return merges_; }
  const SpecialTokens& special() const { return special_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // tokenizer.ggml.pre, "default" when absent.
  const std::string& pre() const { return pre_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  absl::flat_hash_map<std::string, int32_t> index_;
  std::vector<MergeRule> merges_;
  SpecialTokens special_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::string pre_ = "default";
};

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_VOCABULARY_H_
