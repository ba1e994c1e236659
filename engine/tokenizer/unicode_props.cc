#include "engine/tokenizer/unicode_props.h"

#include <algorithm>
#include <array>
#include <memory>

namespace stepserve::tokenizer {
namespace {

// The Basic Multilingual Plane covers nearly all text; a flat table there avoids a binary search
// per character. Built once from the run table.
struct BmpTable {
  std::array<uint8_t, 0x10000> flags{};
  BmpTable() {
    for (int i = 0; i < internal::kPropertyRunCount; ++i) {
      const uint32_t start = internal::kPropertyRuns[i].start;
      if (start >= 0x10000) break;
      const uint32_t end = i + 1 < internal::kPropertyRunCount
                               ? std::min<uint32_t>(internal::kPropertyRuns[i + 1].start, 0x10000)
                               : 0x10000;
      std::fill(flags.begin() + start, flags.begin() + end, internal::kPropertyRuns[i].flags);
    }
  }
};

const BmpTable& Bmp() {
  static const BmpTable* const table = new BmpTable();
  return *table;
}

}  // namespace

uint8_t CodePointFlags(char32_t cp) {
  if (cp < 0x10000) return Bmp().flags[cp];
  if (cp > 0x10FFFF) return 0;
  const internal::PropertyRun* begin = internal::kPropertyRuns;
  const internal::PropertyRun* end = begin + internal::kPropertyRunCount;
  // Last run whose start <= cp.
  const internal::PropertyRun* it = std::upper_bound(
      begin, end, static_cast<uint32_t>(cp),
      [](uint32_t value, const internal::PropertyRun& run) { return value < run.start; });
  return (it - 1)->flags;
}

std::string_view UnicodeTableVersion() { return internal::kUnicodeVersion; }

size_t DecodeUtf8At(std::string_view text, size_t pos, char32_t* cp) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  size_t length;
  char32_t value;
  char32_t min_value;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, min_value = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, min_value = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, min_value = 0x10000;
  } else {
    *cp = kInvalidCodePoint;
    return 1;
  }
  if (pos + length > text.size()) {
    *cp = kInvalidCodePoint;
    return 1;
  }
  for (size_t i = 1; i < length; ++i) {
    const auto next = static_cast<uint8_t>(text[pos + i]);
    if ((next & 0xC0) != 0x80) {
      *cp = kInvalidCodePoint;
      return 1;
    }
    value = (value << 6) | (next & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
    *cp = kInvalidCodePoint;
    return 1;
  }
  *cp = value;
  return length;
}

}  // namespace stepserve::tokenizer
