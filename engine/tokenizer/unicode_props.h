// Unicode properties the pre-tokenizer regexes need (\p{L}, \p{N}, \p{P}, \p{S}, \p{M}, \s) and a
// strict UTF-8 decoder. The property table is generated (gen_unicode_tables.py ->
// unicode_tables.cc) from Python's unicodedata; see kUnicodeVersion.
#ifndef STEPSERVE_ENGINE_TOKENIZER_UNICODE_PROPS_H_
#define STEPSERVE_ENGINE_TOKENIZER_UNICODE_PROPS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stepserve::tokenizer {

// Property bits of one code point. The letter..mark bits are general-category majors and are
// mutually exclusive; kSpace is the White_Space property.
enum CodePointFlag : uint8_t {
  kLetter = 1,
  kNumber = 2,
  kPunct = 4,
  kSymbol = 8,
  kMark = 16,
  kSpace = 32,
};

// Stands for a byte that is not part of a well-formed UTF-8 sequence; it has no properties.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

// Property bits of `cp` (0 for unassigned, control, kInvalidCodePoint, ...).
uint8_t CodePointFlags(char32_t cp);

// Unicode version of the generated table ("14.0.0").
std::string_view UnicodeTableVersion();

// Decodes the sequence at text[pos] (pos < text.size()). Returns its length in bytes and sets
// *cp. Malformed input (bad lead, truncated, bad continuation, overlong, surrogate, > U+10FFFF)
// yields length 1 and kInvalidCodePoint, so every byte is accounted for.
size_t DecodeUtf8At(std::string_view text, size_t pos, char32_t* cp);

namespace internal {
struct PropertyRun {
  uint32_t start;
  uint8_t flags;
};
extern const char kUnicodeVersion[];
extern const int kPropertyRunCount;
extern const PropertyRun kPropertyRuns[];
}  // namespace internal

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_UNICODE_PROPS_H_
