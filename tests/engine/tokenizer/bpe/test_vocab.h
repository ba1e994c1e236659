// Hand-made byte-level BPE vocabularies for unit tests: the 256 byte-alphabet tokens first (id ==
// byte value), then the given extra tokens, plus merges.
#ifndef STEPSERVE_TESTS_ENGINE_TOKENIZER_BPE_TEST_VOCAB_H_
#define STEPSERVE_TESTS_ENGINE_TOKENIZER_BPE_TEST_VOCAB_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/gguf_value.h"
#include "engine/tokenizer/byte_unicode.h"

namespace stepserve::tokenizer::testing {

struct ExtraToken {
  std::string text;
  int32_t type = 1;  // NORMAL
};

inline std::vector<std::string> ByteTokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &text);
    tokens.push_back(text);
  }
  return tokens;
}

inline gguf::Metadata MakeMetadata(const std::vector<ExtraToken>& extra,
                                   const std::vector<std::string>& merges,
                                   const std::string& pre = "deepseek-v3") {
  std::vector<std::string> tokens = ByteTokens();
  std::vector<int32_t> types(tokens.size(), 1);
  for (const ExtraToken& t : extra) {
    tokens.push_back(t.text);
    types.push_back(t.type);
  }
  gguf::Metadata md;
  md.Set("tokenizer.ggml.model", gguf::Value("gpt2"));
  md.Set("tokenizer.ggml.pre", gguf::Value(pre.c_str()));
  md.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
  md.Set("tokenizer.ggml.token_type", gguf::Value::Int32Array(types));
  md.Set("tokenizer.ggml.merges", gguf::Value::StringArray(merges));
  return md;
}

inline gguf::Value U32(uint32_t v) { return gguf::Value(gguf::Value::Storage(v)); }
inline gguf::Value Bool(bool v) { return gguf::Value(gguf::Value::Storage(v)); }

}  // namespace stepserve::tokenizer::testing

#endif  // STEPSERVE_TESTS_ENGINE_TOKENIZER_BPE_TEST_VOCAB_H_
