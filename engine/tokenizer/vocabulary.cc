#include "engine/tokenizer/vocabulary.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/base/absl_compat.h"

namespace stepserve::tokenizer {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kTypesKey[] = "tokenizer.ggml.token_type";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";

// Quotes a token or merge text for an error message, cut to a readable length.
std::string Quote(std::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return absl::StrFormat("\"%s\"", text);
  return absl::StrFormat("\"%s\"... (%d bytes)", text.substr(0, kMax), text.size());
}

// Reads an optional token id key; absent -> -1, present -> must be a valid id.
absl::Status ReadSpecialId(const gguf::Metadata& metadata, std::string_view key, int32_t n_tokens,
                           int32_t* id) {
  if (!metadata.Contains(key)) return absl::OkStatus();
  absl::StatusOr<int64_t> value = metadata.GetInt(key);
  if (!value.ok()) return value.status();
  if (*value < 0 || *value >= n_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: token id %d is out of range (vocabulary has %d tokens)", key, *value, n_tokens));
  }
  *id = static_cast<int32_t>(*value);
  return absl::OkStatus();
}

absl::Status ReadBool(const gguf::Metadata& metadata, std::string_view key, bool* out) {
  if (!metadata.Contains(key)) return absl::OkStatus();
  absl::StatusOr<bool> value = metadata.GetBool(key);
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

}  // namespace

std::optional<int32_t> Vocabulary::Find(std::string_view text) const {
  auto it = index_.find(AbslView(text));
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<Vocabulary> Vocabulary::FromMetadata(const gguf::Metadata& metadata) {
  Vocabulary vocab;
  absl::StatusOr<std::string> model = metadata.GetString(kModelKey);
  if (!model.ok()) return model.status();
  if (*model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tokenizer model \"%s\" is not supported (only \"gpt2\", byte-level BPE)", kModelKey,
        *model));
  }
  if (metadata.Contains(kPreKey)) {
    absl::StatusOr<std::string> pre = metadata.GetString(kPreKey);
    if (!pre.ok()) return pre.status();
    vocab.pre_ = *pre;
  }

  absl::StatusOr<std::vector<std::string>> tokens = metadata.GetStringArray(kTokensKey);
  if (!tokens.ok()) return tokens.status();
  if (tokens->empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the vocabulary is empty", kTokensKey));
  }
  if (tokens->size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d tokens do not fit int32 ids", kTokensKey, tokens->size()));
  }
  vocab.tokens_ = std::move(*tokens);
  const auto n_tokens = static_cast<int32_t>(vocab.tokens_.size());

  vocab.types_.assign(n_tokens, TokenType::kNormal);
  if (metadata.Contains(kTypesKey)) {
    absl::StatusOr<std::vector<int64_t>> types = metadata.GetIntArray(kTypesKey);
    if (!types.ok()) return types.status();
    if (types->size() != vocab.tokens_.size()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: has %d entries but %s has %d",
                                                        kTypesKey, types->size(), kTokensKey,
                                                        vocab.tokens_.size()));
    }
    for (int32_t i = 0; i < n_tokens; ++i) {
      const int64_t type = (*types)[i];
      if (type < 0 || type > static_cast<int64_t>(TokenType::kByte)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s[%d]: unknown token type %d (token %s)", kTypesKey, i, type,
                            Quote(vocab.tokens_[i])));
      }
      vocab.types_[i] = static_cast<TokenType>(type);
    }
  }

  vocab.index_.reserve(n_tokens);
  for (int32_t i = 0; i < n_tokens; ++i) {
    vocab.index_.try_emplace(vocab.tokens_[i], i);  // first id wins for repeats
  }

  absl::StatusOr<std::vector<std::string>> merges = metadata.GetStringArray(kMergesKey);
  if (!merges.ok()) return merges.status();
  vocab.merges_.reserve(merges->size());
  std::string joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& merge = (*merges)[i];
    // Search from index 1 so that a left part which is itself a space still splits correctly.
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= merge.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d]: %s is not of the form \"left right\"", kMergesKey, i, Quote(merge)));
    }
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    std::optional<int32_t> left_id = vocab.Find(left);
    if (!left_id) {
      return absl::InvalidArgumentError(absl::StrFormat("%s[%d]: left part %s of %s is not a token",
                                                        kMergesKey, i, Quote(left), Quote(merge)));
    }
    std::optional<int32_t> right_id = vocab.Find(right);
    if (!right_id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d]: right part %s of %s is not a token", kMergesKey, i, Quote(right), Quote(merge)));
    }
    joined.assign(left);
    joined.append(right);
    std::optional<int32_t> result_id = vocab.Find(joined);
    if (!result_id) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s[%d]: merged token %s of %s is not a token", kMergesKey, i,
                          Quote(joined), Quote(merge)));
    }
    vocab.merges_.push_back({*left_id, *right_id, *result_id});
  }

  struct IdKey {
    const char* key;
    int32_t* id;
  };
  SpecialTokens& s = vocab.special_;
  const IdKey id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &s.bos},
      {"tokenizer.ggml.eos_token_id", &s.eos},
      {"tokenizer.ggml.eot_token_id", &s.eot},
      {"tokenizer.ggml.eom_token_id", &s.eom},
      {"tokenizer.ggml.unknown_token_id", &s.unknown},
      {"tokenizer.ggml.padding_token_id", &s.padding},
      {"tokenizer.ggml.seperator_token_id", &s.separator},  // sic, llama.cpp spelling
      {"tokenizer.ggml.cls_token_id", &s.cls},
      {"tokenizer.ggml.mask_token_id", &s.mask},
      {"tokenizer.ggml.fim_pre_token_id", &s.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &s.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &s.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &s.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &s.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &s.fim_sep},
  };
  for (const IdKey& entry : id_keys) {
    if (absl::Status st = ReadSpecialId(metadata, entry.key, n_tokens, entry.id); !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = ReadBool(metadata, "tokenizer.ggml.add_bos_token", &vocab.add_bos_);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = ReadBool(metadata, "tokenizer.ggml.add_eos_token", &vocab.add_eos_);
      !st.ok()) {
    return st;
  }
  return vocab;
}

}  // namespace stepserve::tokenizer
