#include "engine/synth/bpe_trainer.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/byte_unicode.h"

namespace stepserve::synth {
namespace {

enum class Cls { kLetter, kDigit, kCjk, kSpace, kNewline, kPunct, kInvalid };

struct CodePoint {
  char32_t cp;
  size_t start;
  size_t len;
  Cls cls;
};

// Decodes one UTF-8 sequence at `i`; invalid or truncated sequences yield len 1, kInvalid.
CodePoint Decode(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) return {0xFFFD, i, 1, Cls::kInvalid};
  char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {0xFFFD, i, 1, Cls::kInvalid};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, i, static_cast<size_t>(len), Cls::kPunct};
}

bool IsAsciiLetter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

Cls Classify(char32_t c) {
  if (c >= '0' && c <= '9') return Cls::kDigit;
  if (c == '\r' || c == '\n') return Cls::kNewline;
  if (c == ' ' || c == '\t' || c == '\v' || c == '\f') return Cls::kSpace;
  if (IsAsciiLetter(c)) return Cls::kLetter;
  if (c < 0x80) return Cls::kPunct;
  // The CJK ranges of the deepseek-v3 regex 2 (U+4E00-9FA5, U+3040-309F, U+30A0-30FF).
  if ((c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF)) return Cls::kCjk;
  if (c == 0xA0 || (c >= 0x2000 && c <= 0x200A) || c == 0x3000) return Cls::kSpace;
  // A rough \p{P}\p{S} for the non-ASCII characters a small corpus meets.
  if ((c >= 0xA1 && c <= 0xBF && c != 0xAA && c != 0xB5 && c != 0xBA) || c == 0xD7 || c == 0xF7 ||
      (c >= 0x2010 && c <= 0x2BFF) || (c >= 0x3001 && c <= 0x303F) ||
      (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||
      (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65)) {
    return Cls::kPunct;
  }
  return Cls::kLetter;
}

// Regex 3 of the pre-tokenizer on cps[s, e) (no digits or CJK inside).
void SplitRest(std::string_view text, const std::vector<CodePoint>& cps, size_t s, size_t e,
               std::vector<std::string>* out) {
  auto cls = [&](size_t i) { return i < e ? cps[i].cls : Cls::kInvalid; };
  auto emit = [&](size_t a, size_t b) {
    const size_t from = cps[a].start;
    const size_t to = cps[b - 1].start + cps[b - 1].len;
    out->emplace_back(text.substr(from, to - from));
  };
  size_t i = s;
  while (i < e) {
    const Cls c = cps[i].cls;
    size_t j = i + 1;
    if (c == Cls::kPunct && cps[i].cp < 0x80 && i + 1 < e && IsAsciiLetter(cps[i + 1].cp)) {
      // [ASCII punct][A-Za-z]+
      while (j < e && IsAsciiLetter(cps[j].cp)) ++j;
    } else if (c == Cls::kLetter || (c != Cls::kNewline && c != Cls::kPunct && c != Cls::kInvalid &&
                                     cls(i + 1) == Cls::kLetter)) {
      // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
      j = c == Cls::kLetter ? i : i + 1;
      while (cls(j) == Cls::kLetter) ++j;
    } else if (c == Cls::kPunct || (cps[i].cp == ' ' && cls(i + 1) == Cls::kPunct)) {
      //  ?[\p{P}\p{S}]+[\r\n]*
      j = c == Cls::kPunct ? i : i + 1;
      while (cls(j) == Cls::kPunct) ++j;
      while (cls(j) == Cls::kNewline) ++j;
    } else if (c == Cls::kSpace || c == Cls::kNewline) {
      size_t run_end = i;
      size_t last_newline = e;
      while (cls(run_end) == Cls::kSpace || cls(run_end) == Cls::kNewline) {
        if (cls(run_end) == Cls::kNewline) last_newline = run_end;
        ++run_end;
      }
      if (last_newline != e) {
        j = last_newline + 1;  // \s*[\r\n]+
      } else if (run_end < e && run_end - i > 1) {
        j = run_end - 1;  // \s+(?!\S): the last space goes with the next word
      } else {
        j = run_end;  // \s+
      }
    }
    emit(i, j);
    i = j;
  }
}

uint64_t PairId(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

std::string PairKey(std::string_view a, std::string_view b) {
  std::string key = absl::StrFormat("%d:", a.size());
  key.append(a);
  key.append(b);
  return key;
}

struct Word {
  std::vector<int> syms;
  int64_t count;
};

}  // namespace

std::vector<std::string> PreSplit(std::string_view text) {
  std::vector<CodePoint> cps;
  for (size_t i = 0; i < text.size();) {
    CodePoint cp = Decode(text, i);
    if (cp.cls != Cls::kInvalid) cp.cls = Classify(cp.cp);
    cps.push_back(cp);
    i += cp.len;
  }
  std::vector<std::string> out;
  auto emit = [&](size_t a, size_t b) {
    const size_t from = cps[a].start;
    const size_t to = cps[b - 1].start + cps[b - 1].len;
    out.emplace_back(text.substr(from, to - from));
  };
  size_t i = 0;
  size_t rest_start = 0;
  while (i < cps.size()) {
    const Cls c = cps[i].cls;
    if (c != Cls::kDigit && c != Cls::kCjk && c != Cls::kInvalid) {
      ++i;
      continue;
    }
    SplitRest(text, cps, rest_start, i, &out);
    size_t j = i + 1;
    if (c == Cls::kDigit) {
      while (j < cps.size() && j - i < 3 && cps[j].cls == Cls::kDigit) ++j;  // \p{N}{1,3}
    } else if (c == Cls::kCjk) {
      while (j < cps.size() && cps[j].cls == Cls::kCjk) ++j;
    }
    emit(i, j);
    i = rest_start = j;
  }
  SplitRest(text, cps, rest_start, cps.size(), &out);
  return out;
}

std::vector<std::string> BpeModel::MergeStrings() const {
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (const auto& [a, b] : merges) {
    out.push_back(tokenizer::BytesToVocabText(a) + " " + tokenizer::BytesToVocabText(b));
  }
  return out;
}

std::vector<std::string> BpeModel::TokenTexts() const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (const std::string& t : tokens) out.push_back(tokenizer::BytesToVocabText(t));
  return out;
}

absl::StatusOr<BpeModel> TrainBpe(std::string_view corpus, int max_merges, int min_count) {
  if (max_merges < 0 || min_count < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "TrainBpe: max_merges %d must be >= 0 and min_count %d >= 1", max_merges, min_count));
  }
  BpeModel model;
  for (int b = 0; b < 256; ++b) model.tokens.emplace_back(1, static_cast<char>(b));

  absl::flat_hash_map<std::string, int64_t> piece_counts;
  for (std::string& piece : PreSplit(corpus)) ++piece_counts[piece];
  std::vector<std::pair<std::string, int64_t>> sorted(piece_counts.begin(), piece_counts.end());
  std::sort(sorted.begin(), sorted.end());  // deterministic word order
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    Word w{{}, count};
    for (unsigned char ch : piece) w.syms.push_back(ch);
    words.push_back(std::move(w));
  }

  absl::flat_hash_map<uint64_t, int64_t> pair_counts;
  auto count_pairs = [&](const Word& w, int64_t sign) {
    for (size_t k = 0; k + 1 < w.syms.size(); ++k) {
      const uint64_t id = PairId(w.syms[k], w.syms[k + 1]);
      const int64_t v = (pair_counts[id] += sign * w.count);
      if (v == 0) pair_counts.erase(id);
    }
  };
  for (const Word& w : words) count_pairs(w, +1);

  while (static_cast<int>(model.merges.size()) < max_merges) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [id, count] : pair_counts) {
      if (count > best_count || (count == best_count && id < best)) best = id, best_count = count;
    }
    if (best_count < min_count) break;
    const int a = static_cast<int>(best >> 32);
    const int b = static_cast<int>(best & 0xFFFFFFFFu);
    const int merged = static_cast<int>(model.tokens.size());
    model.merges.emplace_back(model.tokens[a], model.tokens[b]);
    model.tokens.push_back(model.tokens[a] + model.tokens[b]);
    for (Word& w : words) {
      bool has = false;
      for (size_t k = 0; k + 1 < w.syms.size() && !has; ++k) {
        has = w.syms[k] == a && w.syms[k + 1] == b;
      }
      if (!has) continue;
      count_pairs(w, -1);
      std::vector<int> next;
      next.reserve(w.syms.size());
      for (size_t k = 0; k < w.syms.size(); ++k) {
        if (k + 1 < w.syms.size() && w.syms[k] == a && w.syms[k + 1] == b) {
          next.push_back(merged);
          ++k;
        } else {
          next.push_back(w.syms[k]);
        }
      }
      w.syms = std::move(next);
      count_pairs(w, +1);
    }
  }
  return model;
}

BpeEncoder::BpeEncoder(const BpeModel& model) {
  for (size_t r = 0; r < model.merges.size(); ++r) {
    ranks_.emplace(PairKey(model.merges[r].first, model.merges[r].second), static_cast<int>(r));
  }
}

std::vector<std::string> BpeEncoder::Encode(std::string_view piece) const {
  std::vector<std::string> parts;
  for (char ch : piece) parts.emplace_back(1, ch);
  while (parts.size() > 1) {
    int best_rank = -1;
    size_t best_at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      auto it = ranks_.find(PairKey(parts[k], parts[k + 1]));
      if (it != ranks_.end() && (best_rank < 0 || it->second < best_rank)) {
        best_rank = it->second;
        best_at = k;
      }
    }
    if (best_rank < 0) break;
    parts[best_at] += parts[best_at + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return parts;
}

}  // namespace stepserve::synth
