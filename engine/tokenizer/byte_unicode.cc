#include "engine/tokenizer/byte_unicode.h"

#include <array>

namespace stepserve::tokenizer {
namespace {

// Bytes that are printable Latin-1 and keep their own code point.
constexpr bool IsSelfMapped(int byte) {
  return (byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) ||
         (byte >= 0xae && byte <= 0xff);
}

struct Tables {
  std::array<char32_t, 256> to_code_point{};
  std::array<int16_t, 0x200> to_byte{};  // every alphabet code point is below U+0200
};

constexpr Tables BuildTables() {
  Tables tables{};
  for (int16_t& entry : tables.to_byte) entry = -1;
  char32_t next = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    char32_t code_point = IsSelfMapped(byte) ? static_cast<char32_t>(byte) : next++;
    tables.to_code_point[byte] = code_point;
    tables.to_byte[code_point] = static_cast<int16_t>(byte);
  }
  return tables;
}
constexpr Tables kTables = BuildTables();

// Decodes one UTF-8 sequence at text[*pos]; nullopt on malformed input.
std::optional<char32_t> DecodeUtf8(std::string_view text, size_t* pos) {
  const auto lead = static_cast<uint8_t>(text[*pos]);
  int length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3
                                                      : (lead >> 3) == 0x1e ? 4 : 0;
  if (length == 0 || *pos + length > text.size()) return std::nullopt;
  char32_t code_point = length == 1 ? lead : lead & (0x7f >> length);
  for (int i = 1; i < length; ++i) {
    const auto next = static_cast<uint8_t>(text[*pos + i]);
    if ((next & 0xc0) != 0x80) return std::nullopt;
    code_point = (code_point << 6) | (next & 0x3f);
  }
  *pos += length;
  return code_point;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t byte) { return kTables.to_code_point[byte]; }

std::optional<uint8_t> CodePointToByte(char32_t code_point) {
  if (code_point >= kTables.to_byte.size() || kTables.to_byte[code_point] < 0) return std::nullopt;
  return static_cast<uint8_t>(kTables.to_byte[code_point]);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

std::string BytesToVocabText(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size() * 2);
  for (char byte : bytes) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(byte)), &text);
  return text;
}

std::optional<std::string> VocabTextToBytes(std::string_view text) {
  std::string bytes;
  size_t pos = 0;
  while (pos < text.size()) {
    std::optional<char32_t> code_point = DecodeUtf8(text, &pos);
    if (!code_point) return std::nullopt;
    std::optional<uint8_t> byte = CodePointToByte(*code_point);
    if (!byte) return std::nullopt;
    bytes.push_back(static_cast<char>(*byte));
  }
  return bytes;
}

}  // namespace stepserve::tokenizer
