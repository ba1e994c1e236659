// Tokenizer throughput: encodes a few hundred KB of mixed text (English prose, code, CJK, digits,
// emoji) with a reference vocabulary and prints one JSON object per measurement.
// Usage: bench_tokenize [vocab.gguf] [target_kb]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/streaming_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string MixedText(size_t target_bytes) {
  const char* const kParts[] = {
      "The quick brown fox jumps over the lazy dog. It's 2024, and we've got 1,234,567 reasons "
      "to tokenize text quickly! ",
      "int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) printf(\"%s\\n\", "
      "argv[i]);\n  return 0;\n}\n",
      "机器学习是人工智能的一个分支。今日は良い天気ですね。한국어 텍스트도 있습니다. ",
      "Emoji: 🦙🚀✨ — naïve café résumé, Ωmega αβγ. ",
      "    indented line with trailing spaces   \n\n\t\ttabs\r\n",
      "3.14159265358979 + 2.71828 = 5.85987; 0xDEADBEEF; 1e-9\n",
  };
  std::string text;
  uint32_t state = 12345;
  while (text.size() < target_bytes) {
    state = state * 1664525u + 1013904223u;
    text += kParts[(state >> 16) % (sizeof(kParts) / sizeof(kParts[0]))];
  }
  return text;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1]
               : std::string(STEPSERVE_SHARED_DIR) + "/ref/vocab/ggml-vocab-deepseek-llm.gguf";
  const size_t target_kb = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 512;
  auto file = stepserve::gguf::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  const auto load_start = Clock::now();
  auto tok = stepserve::tokenizer::Tokenizer::FromMetadata((*file)->metadata());
  const auto load_end = Clock::now();
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  const std::string text = MixedText(target_kb * 1024);
  std::printf("{\"bench\":\"tokenizer_load\",\"vocab\":\"%s\",\"n_vocab\":%d,\"seconds\":%.4f}\n",
              path.substr(path.find_last_of('/') + 1).c_str(), (*tok)->vocab_size(),
              Seconds(load_start, load_end));

  constexpr int kReps = 5;
  double best_encode = 1e30;
  std::vector<int32_t> ids;
  for (int rep = 0; rep < kReps; ++rep) {
    const auto start = Clock::now();
    ids = (*tok)->Encode(text, false, true);
    best_encode = std::min(best_encode, Seconds(start, Clock::now()));
  }
  std::printf(
      "{\"bench\":\"tokenizer_encode\",\"bytes\":%zu,\"tokens\":%zu,\"best_seconds\":%.5f,"
      "\"mb_per_s\":%.2f,\"tokens_per_s\":%.0f}\n",
      text.size(), ids.size(), best_encode, text.size() / best_encode / 1e6,
      ids.size() / best_encode);

  double best_decode = 1e30;
  for (int rep = 0; rep < kReps; ++rep) {
    const auto start = Clock::now();
    stepserve::tokenizer::StreamingDecoder decoder(**tok, false);
    size_t out_bytes = 0;
    for (int32_t id : ids) out_bytes += decoder.Push(id).size();
    out_bytes += decoder.Flush().size();
    best_decode = std::min(best_decode, Seconds(start, Clock::now()));
    if (out_bytes != text.size()) {
      std::fprintf(stderr, "stream decode produced %zu bytes, expected %zu\n", out_bytes,
                   text.size());
      return 1;
    }
  }
  std::printf(
      "{\"bench\":\"tokenizer_stream_decode\",\"tokens\":%zu,\"best_seconds\":%.5f,"
      "\"mb_per_s\":%.2f}\n",
      ids.size(), best_decode, text.size() / best_decode / 1e6);
  return 0;
}
