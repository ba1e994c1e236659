#include "engine/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/unicode_props.h"

namespace stepserve::tokenizer {
namespace {

// The input decoded once: code points, their property bits and byte offsets (offset.size() ==
// size() + 1), so matchers never touch UTF-8 or allocate.
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<uint8_t> fl;
  std::vector<uint32_t> offset;
  size_t size() const { return cp.size(); }
};

void Decode(std::string_view text, CodePoints* t) {
  t->cp.reserve(text.size());
  t->fl.reserve(text.size());
  t->offset.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp;
    const size_t length = DecodeUtf8At(text, pos, &cp);
    t->cp.push_back(cp);
    t->fl.push_back(CodePointFlags(cp));
    t->offset.push_back(static_cast<uint32_t>(pos));
    pos += length;
  }
  t->offset.push_back(static_cast<uint32_t>(pos));
}

struct Span {
  size_t begin;
  size_t end;
};

// A matcher anchored at `pos`: returns the length of the match there, 0 for none (no regex here
// can match the empty string). `end` is the end of the current piece: lookaheads and `$` see only
// the piece, because each regex of a sequence runs on each piece separately.
using AnchoredFn = size_t (*)(const CodePoints& t, size_t pos, size_t end);
// Finds the leftmost match in [pos, end).
using FindFn = bool (*)(const CodePoints& t, size_t pos, size_t end, size_t* begin, size_t* stop);

template <AnchoredFn kMatch>
bool FindAnchored(const CodePoints& t, size_t pos, size_t end, size_t* begin, size_t* stop) {
  for (; pos < end; ++pos) {
    const size_t length = kMatch(t, pos, end);
    if (length > 0) {
      *begin = pos;
      *stop = pos + length;
      return true;
    }
  }
  return false;
}

template <class Pred>
size_t RunWhile(const CodePoints& t, size_t pos, size_t end, Pred pred) {
  size_t i = pos;
  while (i < end && pred(t.cp[i], t.fl[i])) ++i;
  return i - pos;
}

size_t RunMask(const CodePoints& t, size_t pos, size_t end, uint8_t mask) {
  size_t i = pos;
  while (i < end && (t.fl[i] & mask)) ++i;
  return i - pos;
}

// `\s?X+` where X is given by `pred`: one optional whitespace character, then a run of X.
template <class Pred>
size_t OptionalSpaceThenRun(const CodePoints& t, size_t pos, size_t end, Pred pred) {
  if ((t.fl[pos] & kSpace) && pos + 1 < end && pred(t.cp[pos + 1], t.fl[pos + 1])) {
    return 1 + RunWhile(t, pos + 1, end, pred);
  }
  return RunWhile(t, pos, end, pred);
}

bool IsCrLf(char32_t c) { return c == '\r' || c == '\n'; }
bool IsAsciiAlpha(char32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsAsciiDigit(char32_t c) { return c >= '0' && c <= '9'; }
// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]: every printable ASCII character but letters, digits.
bool IsAsciiPunct(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// ---- gpt-2 / default ---------------------------------------------------------------------------
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// kFinalSpaceRun selects the trailing `|\s+` (present in the GPT-2 ByteLevel regex, absent from
// llama.cpp's "default" list).
template <bool kFinalSpaceRun>
size_t MatchGpt2(const CodePoints& t, size_t pos, size_t end) {
  const char32_t c = t.cp[pos];
  if (c == '\'' && pos + 1 < end) {
    const char32_t c1 = t.cp[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 < end) {
      const char32_t c2 = t.cp[pos + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
        return 3;
      }
    }
  }
  // A leading ' ' is never a letter/number/other itself, so trying the optional space first and
  // checking only the character after it is equivalent to the regex's backtracking.
  const size_t q = (c == ' ' && pos + 1 < end) ? pos + 1 : pos;
  const uint8_t f = t.fl[q];
  if (f & kLetter) return q - pos + RunMask(t, q, end, kLetter);
  if (f & kNumber) return q - pos + RunMask(t, q, end, kNumber);
  auto other = [](char32_t, uint8_t fl) { return (fl & (kSpace | kLetter | kNumber)) == 0; };
  if (other(0, f)) return q - pos + RunWhile(t, q, end, other);
  const size_t spaces = RunMask(t, pos, end, kSpace);
  if (spaces == 0) return 0;
  if (pos + spaces == end) return spaces;  // \s+(?!\S) at the end of the piece
  if (spaces >= 2) return spaces - 1;      // back off so the next character is a space
  return kFinalSpaceRun ? spaces : 0;
}

// [\p{P}\$\+<=>\^~\|]+
size_t MatchDefaultPunct(const CodePoints& t, size_t pos, size_t end) {
  return RunWhile(t, pos, end, [](char32_t c, uint8_t f) {
    return (f & kPunct) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
           c == '~' || c == '|';
  });
}

size_t MatchNumberRun(const CodePoints& t, size_t pos, size_t end) {
  return RunMask(t, pos, end, kNumber);
}

// [0-9][0-9][0-9]
size_t MatchThreeDigits(const CodePoints& t, size_t pos, size_t end) {
  return pos + 3 <= end && IsAsciiDigit(t.cp[pos]) && IsAsciiDigit(t.cp[pos + 1]) &&
                 IsAsciiDigit(t.cp[pos + 2])
             ? 3
             : 0;
}

// ---- deepseek-llm / deepseek-coder -------------------------------------------------------------
size_t MatchCrLf(const CodePoints& t, size_t pos, size_t end) { return IsCrLf(t.cp[pos]) ? 1 : 0; }

// The letter class of the deepseek-llm regex, as code point ranges (a subset of the cased
// letters; the regex lists it literally, so it does not follow \p{L}).
constexpr std::pair<char32_t, char32_t> kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

bool IsDeepseekLetter(char32_t c, uint8_t f) {
  if (c < 0x80) return IsAsciiAlpha(c);
  if (!(f & kLetter)) return false;  // the class holds letters only: skip the search otherwise
  const auto* it = std::upper_bound(
      std::begin(kDeepseekLetters), std::end(kDeepseekLetters), c,
      [](char32_t value, const std::pair<char32_t, char32_t>& r) { return value < r.first; });
  return it != std::begin(kDeepseekLetters) && c <= (it - 1)->second;
}

// [!-/:-~！-／：-～‘-‟　-。]
bool IsDeepseekPunct(char32_t c, uint8_t) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) ||
         (c >= 0x3000 && c <= 0x3002);
}

// [一-龥ࠀ-一가-퟿]
bool IsDeepseekCjk(char32_t c, uint8_t) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x0800 && c <= 0x4E00) ||
         (c >= 0xAC00 && c <= 0xD7FF);
}

size_t MatchDeepseekLetters(const CodePoints& t, size_t pos, size_t end) {
  return OptionalSpaceThenRun(t, pos, end, IsDeepseekLetter);
}
size_t MatchDeepseekPunct(const CodePoints& t, size_t pos, size_t end) {
  return OptionalSpaceThenRun(t, pos, end, IsDeepseekPunct);
}
size_t MatchDeepseekCjk(const CodePoints& t, size_t pos, size_t end) {
  return RunWhile(t, pos, end, IsDeepseekCjk);
}

// \s+$ : the leftmost match is the piece's trailing whitespace run. Found directly: trying every
// start position would be quadratic in long whitespace runs.
bool FindTrailingSpaces(const CodePoints& t, size_t pos, size_t end, size_t* begin, size_t* stop) {
  size_t b = end;
  while (b > pos && (t.fl[b - 1] & kSpace)) --b;
  if (b == end) return false;
  *begin = b;
  *stop = end;
  return true;
}

// \s?\p{L}+ and \s?\p{P}+
size_t MatchSpaceLetters(const CodePoints& t, size_t pos, size_t end) {
  return OptionalSpaceThenRun(t, pos, end, [](char32_t, uint8_t f) { return (f & kLetter) != 0; });
}
size_t MatchSpacePunct(const CodePoints& t, size_t pos, size_t end) {
  return OptionalSpaceThenRun(t, pos, end, [](char32_t, uint8_t f) { return (f & kPunct) != 0; });
}
// \p{N}
size_t MatchOneNumber(const CodePoints& t, size_t pos, size_t end) {
  return (t.fl[pos] & kNumber) ? 1 : 0;
}

// ---- deepseek-v3 -------------------------------------------------------------------------------
// \p{N}{1,3}
size_t MatchUpToThreeNumbers(const CodePoints& t, size_t pos, size_t end) {
  return RunMask(t, pos, std::min(end, pos + 3), kNumber);
}

// [一-龥぀-ゟ゠-ヿ]+
size_t MatchV3Cjk(const CodePoints& t, size_t pos, size_t end) {
  return RunWhile(t, pos, end, [](char32_t c, uint8_t) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) ||
           (c >= 0x30A0 && c <= 0x30FF);
  });
}

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
//  ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t MatchV3Main(const CodePoints& t, size_t pos, size_t end) {
  const char32_t c = t.cp[pos];
  const uint8_t f = t.fl[pos];
  // 1: one ASCII punctuation character, then ASCII letters.
  if (IsAsciiPunct(c) && pos + 1 < end && IsAsciiAlpha(t.cp[pos + 1])) {
    return 1 + RunWhile(t, pos + 1, end, [](char32_t ch, uint8_t) { return IsAsciiAlpha(ch); });
  }
  // 2: optional prefix character that is not CR/LF/letter/punctuation/symbol, then letters/marks.
  constexpr uint8_t kLetterMark = kLetter | kMark;
  if (!IsCrLf(c) && !(f & (kLetter | kPunct | kSymbol)) && pos + 1 < end &&
      (t.fl[pos + 1] & kLetterMark)) {
    return 1 + RunMask(t, pos + 1, end, kLetterMark);
  }
  if (f & kLetterMark) return RunMask(t, pos, end, kLetterMark);
  // 3: optional space, punctuation/symbols, trailing CR/LF.
  const size_t q = (c == ' ' && pos + 1 < end) ? pos + 1 : pos;
  if (t.fl[q] & (kPunct | kSymbol)) {
    size_t i = q + RunMask(t, q, end, kPunct | kSymbol);
    while (i < end && IsCrLf(t.cp[i])) ++i;
    return i - pos;
  }
  if (!(f & kSpace)) return 0;
  const size_t spaces = RunMask(t, pos, end, kSpace);
  // 4: \s*[\r\n]+ backtracks to end just after the run's last line break.
  for (size_t i = pos + spaces; i > pos; --i) {
    if (IsCrLf(t.cp[i - 1])) return i - pos;
  }
  // 5 and 6: \s+(?!\S) | \s+
  if (pos + spaces == end || spaces == 1) return spaces;
  return spaces - 1;
}

// Regex sequences per type.
constexpr FindFn kGpt2Sequence[] = {FindAnchored<MatchGpt2<true>>};
constexpr FindFn kDefaultSequence[] = {FindAnchored<MatchDefaultPunct>,
                                       FindAnchored<MatchGpt2<false>>, FindAnchored<MatchNumberRun>,
                                       FindAnchored<MatchThreeDigits>};
constexpr FindFn kDeepseekLlmSequence[] = {
    FindAnchored<MatchCrLf>, FindAnchored<MatchDeepseekLetters>, FindAnchored<MatchDeepseekPunct>,
    FindTrailingSpaces,      FindAnchored<MatchDeepseekCjk>,     FindAnchored<MatchNumberRun>};
constexpr FindFn kDeepseekCoderSequence[] = {
    FindAnchored<MatchCrLf>, FindAnchored<MatchSpaceLetters>, FindAnchored<MatchSpacePunct>,
    FindAnchored<MatchDeepseekCjk>, FindAnchored<MatchOneNumber>};
constexpr FindFn kDeepseekV3Sequence[] = {FindAnchored<MatchUpToThreeNumbers>,
                                          FindAnchored<MatchV3Cjk>, FindAnchored<MatchV3Main>};

struct Sequence {
  const FindFn* begin;
  const FindFn* end;
};

Sequence SequenceOf(PreTokenizerType type) {
  switch (type) {
    case PreTokenizerType::kGpt2:
      return {std::begin(kGpt2Sequence), std::end(kGpt2Sequence)};
    case PreTokenizerType::kDefault:
      return {std::begin(kDefaultSequence), std::end(kDefaultSequence)};
    case PreTokenizerType::kDeepseekLlm:
      return {std::begin(kDeepseekLlmSequence), std::end(kDeepseekLlmSequence)};
    case PreTokenizerType::kDeepseekCoder:
      return {std::begin(kDeepseekCoderSequence), std::end(kDeepseekCoderSequence)};
    case PreTokenizerType::kDeepseekV3:
      return {std::begin(kDeepseekV3Sequence), std::end(kDeepseekV3Sequence)};
  }
  return {std::begin(kGpt2Sequence), std::end(kGpt2Sequence)};
}

// "isolated" split of every span: matches and the gaps between them all become spans.
void ApplySplit(FindFn find, const CodePoints& t, const std::vector<Span>& in,
                std::vector<Span>* out) {
  out->clear();
  for (const Span& span : in) {
    size_t pos = span.begin;
    size_t begin;
    size_t stop;
    while (pos < span.end && find(t, pos, span.end, &begin, &stop)) {
      if (begin > pos) out->push_back({pos, begin});
      out->push_back({begin, stop});
      pos = stop;
    }
    if (pos < span.end) out->push_back({pos, span.end});
  }
}

constexpr std::pair<std::string_view, PreTokenizerType> kNames[] = {
    {"gpt-2", PreTokenizerType::kGpt2},
    {"default", PreTokenizerType::kDefault},
    {"deepseek-llm", PreTokenizerType::kDeepseekLlm},
    {"deepseek-coder", PreTokenizerType::kDeepseekCoder},
    {"deepseek-v3", PreTokenizerType::kDeepseekV3},
};

}  // namespace

absl::StatusOr<PreTokenizerType> ParsePreTokenizerType(std::string_view name) {
  for (const auto& [text, type] : kNames) {
    if (text == name) return type;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "tokenizer.ggml.pre: unsupported pre-tokenizer \"%s\" (supported: gpt-2, default, "
      "deepseek-llm, deepseek-coder, deepseek-v3)",
      name));
}

std::string_view PreTokenizerName(PreTokenizerType type) {
  for (const auto& [text, t] : kNames) {
    if (t == type) return text;
  }
  return "?";
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return;
  CodePoints t;
  Decode(text, &t);
  std::vector<Span> current = {{0, t.size()}};
  std::vector<Span> next;
  next.reserve(t.size() / 2 + 1);
  const Sequence sequence = SequenceOf(type_);
  for (const FindFn* find = sequence.begin; find != sequence.end; ++find) {
    ApplySplit(*find, t, current, &next);
    current.swap(next);
  }
  pieces->reserve(pieces->size() + current.size());
  for (const Span& span : current) {
    pieces->push_back(text.substr(t.offset[span.begin], t.offset[span.end] - t.offset[span.begin]));
  }
}

}  // namespace stepserve::tokenizer
