// Reproduces llama.cpp's tokenizer reference vectors (shared/ref/vocab: vocabulary-only GGUFs,
// .inp test strings, .out expected ids) for the gpt-2, deepseek-llm and deepseek-coder
// vocabularies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf_reader.h"
#include "engine/tokenizer/streaming_decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace stepserve::tokenizer {
namespace {

const std::string kVocabDir = std::string(STEPSERVE_SHARED_DIR) + "/ref/vocab/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The .inp format: every test string is followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> ReadInputs(const std::string& path) {
  const std::string data = ReadFile(path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t next = data.find(separator, pos);
    EXPECT_NE(next, std::string::npos) << path << ": no separator after offset " << pos;
    if (next == std::string::npos) break;
    inputs.push_back(data.substr(pos, next - pos));
    pos = next + separator.size();
  }
  return inputs;
}

std::vector<std::vector<int32_t>> ReadOutputs(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<int32_t>> outputs;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ss >> id) ids.push_back(id);
    outputs.push_back(ids);
  }
  return outputs;
}

class ReferenceVocabTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string path = kVocabDir + "ggml-vocab-" + GetParam() + ".gguf";
    auto file = gguf::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto tok = Tokenizer::FromMetadata((*file)->metadata());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    inputs_ = ReadInputs(path + ".inp");
    outputs_ = ReadOutputs(path + ".out");
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::string> inputs_;
  std::vector<std::vector<int32_t>> outputs_;
};

TEST_P(ReferenceVocabTest, EncodesEveryCaseExactly) {
  ASSERT_EQ(inputs_.size(), outputs_.size());
  ASSERT_GE(inputs_.size(), 40u);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    EXPECT_EQ(tokenizer_->Encode(inputs_[i], false, false), outputs_[i])
        << "case " << i << ": \"" << inputs_[i] << "\"";
  }
}

TEST_P(ReferenceVocabTest, DecodeInvertsEncode) {
  for (const std::string& text : inputs_) {
    EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(text, false, false), false), text);
    EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode(text, true, true), true), text);
  }
}

TEST_P(ReferenceVocabTest, StreamingDecodeMatchesWholeDecode) {
  for (const std::string& text : inputs_) {
    const std::vector<int32_t> ids = tokenizer_->Encode(text, false, false);
    StreamingDecoder decoder(*tokenizer_, false);
    std::string streamed;
    for (int32_t id : ids) streamed += decoder.Push(id);
    streamed += decoder.Flush();
    EXPECT_EQ(streamed, tokenizer_->Decode(ids, false)) << text;
  }
}

TEST_P(ReferenceVocabTest, SpecialTokensParsedOnlyOnRequest) {
  const int32_t eos = tokenizer_->eos_id();
  ASSERT_GE(eos, 0);
  const std::string eos_text = tokenizer_->TokenBytes(eos);
  const std::string text = "Hello" + eos_text + " world";
  const std::vector<int32_t> with = tokenizer_->Encode(text, false, true);
  EXPECT_EQ(std::count(with.begin(), with.end(), eos), 1);
  const std::vector<int32_t> without = tokenizer_->Encode(text, false, false);
  EXPECT_EQ(std::count(without.begin(), without.end(), eos), 0);
  EXPECT_EQ(tokenizer_->Decode(without, false), text);
  EXPECT_EQ(tokenizer_->Decode(with, true), "Hello world");
  EXPECT_TRUE(tokenizer_->IsEndOfGeneration(eos));
}

INSTANTIATE_TEST_SUITE_P(Vocabs, ReferenceVocabTest,
                         ::testing::Values("gpt-2", "deepseek-llm", "deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace stepserve::tokenizer
