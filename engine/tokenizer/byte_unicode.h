// The byte-level BPE alphabet (GPT-2 convention): every byte 0..255 maps to one printable Unicode
// code point so that vocabulary entries are valid UTF-8 strings. Printable Latin-1 bytes map to
// themselves; the others to U+0100 and up, in byte order.
#ifndef STEPSERVE_ENGINE_TOKENIZER_BYTE_UNICODE_H_
#define STEPSERVE_ENGINE_TOKENIZER_BYTE_UNICODE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stepserve::tokenizer {

// Code point standing for `byte`.
char32_t ByteToCodePoint(uint8_t byte);
// The byte a code point stands for, or nullopt if it is not in the alphabet.
std::optional<uint8_t> CodePointToByte(char32_t code_point);

// Raw bytes -> UTF-8 of their alphabet code points (how a vocabulary entry is spelled).
std::string BytesToVocabText(std::string_view bytes);
// Inverse; nullopt if the text holds a code point outside the alphabet or invalid UTF-8.
std::optional<std::string> VocabTextToBytes(std::string_view text);

// Appends the UTF-8 encoding of a code point.
void AppendUtf8(char32_t code_point, std::string* out);

}  // namespace stepserve::tokenizer

#endif  // STEPSERVE_ENGINE_TOKENIZER_BYTE_UNICODE_H_
