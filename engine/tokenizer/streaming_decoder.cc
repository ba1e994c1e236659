#include "engine/tokenizer/streaming_decoder.h"

#include "engine/tokenizer/unicode_props.h"

namespace stepserve::tokenizer {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// True when rest (non-empty) is a proper prefix of some well-formed UTF-8 sequence, i.e. more
// bytes could still complete it. Follows the Unicode table of well-formed byte sequences.
bool IsIncompleteSequence(std::string_view rest) {
  const auto lead = static_cast<uint8_t>(rest[0]);
  size_t length;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return false;
  }
  if (rest.size() >= length) return false;
  for (size_t i = 1; i < rest.size(); ++i) {
    const auto b = static_cast<uint8_t>(rest[i]);
    const uint8_t min = i == 1 ? lo : 0x80;
    const uint8_t max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return false;
  }
  return true;
}

}  // namespace

void DrainCompleteUtf8(std::string* pending, std::string* out) {
  const std::string_view buffer = *pending;
  size_t pos = 0;
  while (pos < buffer.size()) {
    char32_t cp;
    const size_t length = DecodeUtf8At(buffer, pos, &cp);
    if (cp != kInvalidCodePoint) {
      out->append(buffer.substr(pos, length));
      pos += length;
      continue;
    }
    // Only a sequence cut off by the end of the buffer may still become valid.
    if (IsIncompleteSequence(buffer.substr(pos))) break;
    out->append(kReplacement);
    ++pos;
  }
  pending->erase(0, pos);
}

std::string StreamingDecoder::Push(int32_t id) {
  std::string out;
  if (id < 0 || id >= tokenizer_->vocab_size()) {
    // Keep byte order: whatever was pending cannot be completed across an invalid token.
    if (!pending_.empty()) out.append(kReplacement);
    pending_.clear();
    out.append(kReplacement);
    return out;
  }
  if (skip_special_ && tokenizer_->IsControl(id)) return out;
  pending_.append(tokenizer_->TokenBytesRef(id));
  DrainCompleteUtf8(&pending_, &out);
  return out;
}

std::string StreamingDecoder::Flush() {
  std::string out;
  if (!pending_.empty()) out.append(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace stepserve::tokenizer
