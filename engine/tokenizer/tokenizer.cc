#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "engine/tokenizer/byte_unicode.h"

namespace stepserve::tokenizer {
namespace {

// Token texts that end a turn in the chat formats llama.cpp knows (spec 7.1).
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|EOT|>",
    "<|end_of_text|>",
    "<|return|>",
    "<|call|>",
    "<｜end▁of▁sentence｜>",
    "<|end▁of▁sentence|>",
};

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromMetadata(const gguf::Metadata& metadata) {
  absl::StatusOr<Vocabulary> vocab = Vocabulary::FromMetadata(metadata);
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<PreTokenizerType> pre = ParsePreTokenizerType(vocab->pre());
  if (!pre.ok()) return pre.status();
  absl::StatusOr<BpeModel> bpe = BpeModel::Build(*vocab);
  if (!bpe.ok()) return bpe.status();
  std::unique_ptr<Tokenizer> tok(
      new Tokenizer(std::move(*vocab), std::move(*bpe), PreTokenizer(*pre)));

  const Vocabulary& v = tok->vocab_;
  const int32_t n = v.size();
  tok->bytes_.resize(n);
  tok->trie_token_.push_back(-1);  // root
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = v.text(id);
    const TokenType type = v.type(id);
    std::optional<std::string> decoded;
    if (type != TokenType::kControl) decoded = VocabTextToBytes(text);
    tok->bytes_[id] = decoded ? std::move(*decoded) : text;

    // Special texts are matched as the bytes they decode to, so Decode(Encode(x)) == x also for
    // user-defined tokens spelled in the byte alphabet.
    if ((type == TokenType::kControl || type == TokenType::kUserDefined) &&
        !tok->bytes_[id].empty()) {
      int32_t node = 0;
      for (char ch : tok->bytes_[id]) {
        const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
        auto [it, inserted] =
            tok->trie_edges_.try_emplace(key, static_cast<int32_t>(tok->trie_token_.size()));
        if (inserted) tok->trie_token_.push_back(-1);
        node = it->second;
      }
      if (tok->trie_token_[node] < 0) tok->trie_token_[node] = id;  // first id wins
      tok->special_first_byte_[static_cast<uint8_t>(tok->bytes_[id][0])] = true;
    }
  }

  const SpecialTokens& s = v.special();
  tok->eog_.assign(n, 0);
  for (int32_t id : {s.eos, s.eot, s.eom}) {
    if (id >= 0) tok->eog_[id] = 1;
  }
  for (std::string_view text : kEndOfTurnTexts) {
    if (std::optional<int32_t> id = v.Find(text)) tok->eog_[*id] = 1;
  }
  for (int32_t id = 0; id < n; ++id) {
    if (tok->eog_[id]) tok->eog_sorted_.push_back(id);
  }
  return tok;
}

size_t Tokenizer::MatchSpecial(std::string_view text, size_t pos, int32_t* id) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = trie_edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == trie_edges_.end()) break;
    node = it->second;
    if (trie_token_[node] >= 0) {
      best = i + 1 - pos;
      *id = trie_token_[node];
    }
  }
  return best;
}

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces;
  pre_.Split(text, &pieces);
  for (std::string_view piece : pieces) bpe_.EncodePiece(piece, out);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  if (!parse_special) {
    EncodeOrdinary(text, &out);
    return out;
  }
  size_t segment = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t id;
    size_t length = 0;
    if (special_first_byte_[static_cast<uint8_t>(text[pos])]) length = MatchSpecial(text, pos, &id);
    if (length == 0) {
      ++pos;
      continue;
    }
    EncodeOrdinary(text.substr(segment, pos - segment), &out);
    out.push_back(id);
    pos += length;
    segment = pos;
  }
  EncodeOrdinary(text.substr(segment), &out);
  return out;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (!vocab_.IsValid(id)) return std::string();
  return bytes_[id];
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (!vocab_.IsValid(id)) {
      out.append(kReplacement);
      continue;
    }
    if (skip_special && vocab_.type(id) == TokenType::kControl) continue;
    out.append(bytes_[id]);
  }
  return out;
}

}  // namespace stepserve::tokenizer
