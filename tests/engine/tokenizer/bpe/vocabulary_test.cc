#include "engine/tokenizer/vocabulary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer/bpe/test_vocab.h"

namespace stepserve::tokenizer {
namespace {

using testing::Bool;
using testing::ExtraToken;
using ::testing::HasSubstr;
using testing::MakeMetadata;
using testing::U32;

// "Ġ" is the byte-alphabet spelling of the space byte.
gguf::Metadata GoodMetadata() {
  gguf::Metadata md =
      MakeMetadata({{"he"}, {"hel"}, {"<|im_end|>", 3}, {"<tool>", 4}}, {"h e", "he l"});
  md.Set("tokenizer.ggml.bos_token_id", U32(256));
  md.Set("tokenizer.ggml.eos_token_id", U32(258));
  md.Set("tokenizer.ggml.add_bos_token", Bool(true));
  return md;
}

TEST(VocabularyTest, LoadsTokensTypesMergesAndSpecialIds) {
  absl::StatusOr<Vocabulary> vocab = Vocabulary::FromMetadata(GoodMetadata());
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->size(), 260);
  EXPECT_EQ(vocab->text(256), "he");
  EXPECT_EQ(vocab->type(258), TokenType::kControl);
  EXPECT_EQ(vocab->type(259), TokenType::kUserDefined);
  EXPECT_EQ(vocab->Find("hel"), 257);
  EXPECT_EQ(vocab->Find("nope"), std::nullopt);
  ASSERT_EQ(vocab->merges().size(), 2u);
  EXPECT_EQ(vocab->merges()[0].left, 'h');
  EXPECT_EQ(vocab->merges()[0].right, 'e');
  EXPECT_EQ(vocab->merges()[0].result, 256);
  EXPECT_EQ(vocab->merges()[1].left, 256);
  EXPECT_EQ(vocab->merges()[1].result, 257);
  EXPECT_EQ(vocab->special().bos, 256);
  EXPECT_EQ(vocab->special().eos, 258);
  EXPECT_EQ(vocab->special().eot, -1);
  EXPECT_TRUE(vocab->add_bos());
  EXPECT_FALSE(vocab->add_eos());
  EXPECT_EQ(vocab->pre(), "deepseek-v3");
}

TEST(VocabularyTest, RejectsOtherModelNamingIt) {
  gguf::Metadata md = GoodMetadata();
  md.Set("tokenizer.ggml.model", gguf::Value("llama"));
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.model"));
  EXPECT_THAT(st.message(), HasSubstr("\"llama\""));
}

TEST(VocabularyTest, RejectsMissingModelKey) {
  gguf::Metadata md = GoodMetadata();
  md.Erase("tokenizer.ggml.model");
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.model"));
}

TEST(VocabularyTest, RejectsTokenTypeLengthMismatch) {
  gguf::Metadata md = GoodMetadata();
  md.Set("tokenizer.ggml.token_type", gguf::Value::Int32Array({1, 1, 1}));
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.token_type: has 3 entries"));
  EXPECT_THAT(st.message(), HasSubstr("260"));
}

TEST(VocabularyTest, RejectsUnknownTokenTypeNamingIndex) {
  gguf::Metadata md = GoodMetadata();
  std::vector<int32_t> types(260, 1);
  types[7] = 9;
  md.Set("tokenizer.ggml.token_type", gguf::Value::Int32Array(types));
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.token_type[7]: unknown token type 9"));
}

TEST(VocabularyTest, RejectsMergeNamingUnknownToken) {
  gguf::Metadata md = MakeMetadata({{"he"}}, {"h e", "he zz"});
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.merges[1]"));
  EXPECT_THAT(st.message(), HasSubstr("right part \"zz\""));
}

TEST(VocabularyTest, RejectsMergeWhoseResultIsNotAToken) {
  gguf::Metadata md = MakeMetadata({{"he"}}, {"h e", "e h"});
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.merges[1]: merged token \"eh\""));
}

TEST(VocabularyTest, RejectsMalformedMerge) {
  gguf::Metadata md = MakeMetadata({{"he"}}, {"he"});
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.merges[0]"));
  EXPECT_THAT(st.message(), HasSubstr("left right"));
}

TEST(VocabularyTest, RejectsOutOfRangeSpecialId) {
  gguf::Metadata md = GoodMetadata();
  md.Set("tokenizer.ggml.eos_token_id", U32(260));
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.eos_token_id: token id 260 is out of range"));
}

TEST(VocabularyTest, RejectsWrongValueTypes) {
  gguf::Metadata md = GoodMetadata();
  md.Set("tokenizer.ggml.tokens", U32(3));
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.tokens"));

  md = GoodMetadata();
  md.Set("tokenizer.ggml.add_bos_token", gguf::Value("yes"));
  st = Vocabulary::FromMetadata(md).status();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.add_bos_token"));
}

TEST(VocabularyTest, RejectsEmptyVocabulary) {
  gguf::Metadata md = GoodMetadata();
  md.Set("tokenizer.ggml.tokens", gguf::Value::StringArray({}));
  md.Erase("tokenizer.ggml.token_type");
  absl::Status st = Vocabulary::FromMetadata(md).status();
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.tokens: the vocabulary is empty"));
}

TEST(TokenizerLoadTest, RejectsUnknownPreTokenizerNamingIt) {
  gguf::Metadata md = GoodMetadata();
  md.Set("tokenizer.ggml.pre", gguf::Value("qwen9"));
  absl::Status st = Tokenizer::FromMetadata(md).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("tokenizer.ggml.pre"));
  EXPECT_THAT(st.message(), HasSubstr("\"qwen9\""));
}

TEST(TokenizerLoadTest, RejectsVocabularyWithoutAllByteTokens) {
  gguf::Metadata md = GoodMetadata();
  std::vector<std::string> tokens = testing::ByteTokens();
  tokens[0x41] = "not-A";
  tokens.insert(tokens.end(), {"he", "hel", "<|im_end|>", "<tool>"});
  md.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
  absl::Status st = Tokenizer::FromMetadata(md).status();
  EXPECT_THAT(st.message(), HasSubstr("no token for byte 0x41"));
}

}  // namespace
}  // namespace stepserve::tokenizer
