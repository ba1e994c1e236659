#include "engine/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_unicode.h"
#include "tests/engine/tokenizer/bpe/test_vocab.h"

namespace stepserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using testing::MakeMetadata;
using testing::U32;

// Ids: 0..255 bytes, then the extra tokens in order.
constexpr int32_t kHe = 256, kLl = 257, kHell = 258, kHello = 259, kSpaceW = 260, kImEnd = 261,
                  kThink = 262, kImStart = 263, kAa = 264, kImPrefix = 265, kUserByte = 266;

std::unique_ptr<Tokenizer> MakeTokenizer() {
  gguf::Metadata md =
      MakeMetadata({{"he"},
                    {"ll"},
                    {"hell"},
                    {"hello"},
                    {"Ġw"},
                    {"<|im_end|>", 3},
                    {"<think>", 4},
                    {"<|im_start|>", 3},
                    {"aa"},
                    {"<|im", 3},
                    {"ø", 4}},  // user-defined, spelled in the byte alphabet (byte 0xF8)
                   {"h e", "l l", "he ll", "hell o", "Ġ w", "a a"});
  md.Set("tokenizer.ggml.bos_token_id", U32(kImStart));
  md.Set("tokenizer.ggml.eos_token_id", U32(kImEnd));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromMetadata(md);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<int32_t> Bytes(std::string_view s) {
  std::vector<int32_t> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

TEST(TokenizerTest, MergesByRank) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(tok->Encode("hello", false, false), ElementsAre(kHello));
  EXPECT_THAT(tok->Encode("hell", false, false), ElementsAre(kHell));
  EXPECT_THAT(tok->Encode("helo", false, false), ElementsAre(kHe, 'l', 'o'));
  EXPECT_THAT(tok->Encode(" w", false, false), ElementsAre(kSpaceW));
  EXPECT_THAT(tok->Encode("hello world", false, false),
              ElementsAre(kHello, kSpaceW, 'o', 'r', 'l', 'd'));
}

TEST(TokenizerTest, EqualRanksMergeLeftmostFirst) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(tok->Encode("aaa", false, false), ElementsAre(kAa, 'a'));
  EXPECT_THAT(tok->Encode("aaaa", false, false), ElementsAre(kAa, kAa));
  EXPECT_THAT(tok->Encode("aaaaa", false, false), ElementsAre(kAa, kAa, 'a'));
}

TEST(TokenizerTest, AddsBos) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(tok->Encode("hello", true, false), ElementsAre(kImStart, kHello));
  EXPECT_THAT(tok->Encode("", true, false), ElementsAre(kImStart));
  EXPECT_THAT(tok->Encode("", false, true), ElementsAre());
}

TEST(TokenizerTest, SpecialTokensOnlyWithParseSpecial) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string text = "<|im_start|>hello<|im_end|>";
  EXPECT_THAT(tok->Encode(text, false, true), ElementsAre(kImStart, kHello, kImEnd));
  // Without parse_special the marker is ordinary text; no merges apply to its pieces.
  std::vector<int32_t> expected = Bytes("<|im_start|>");
  expected.push_back(kHello);
  for (int32_t id : Bytes("<|im_end|>")) expected.push_back(id);
  EXPECT_EQ(tok->Encode(text, false, false), expected);
  // User-defined tokens follow the same rule.
  EXPECT_THAT(tok->Encode("<think>hello", false, true), ElementsAre(kThink, kHello));
  EXPECT_EQ(tok->Encode("<think>", false, false), Bytes("<think>"));
}

TEST(TokenizerTest, SpecialMatchIsLongestAndSplitsSurroundingText) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(tok->Encode("<|im_end|>", false, true), ElementsAre(kImEnd));
  EXPECT_THAT(tok->Encode("<|imx", false, true), ElementsAre(kImPrefix, 'x'));
  EXPECT_THAT(tok->Encode("<|im_en", false, true), ElementsAre(kImPrefix, '_', 'e', 'n'));
  // Text on both sides is pre-tokenized separately: "he" and "llo" do not merge across.
  EXPECT_THAT(tok->Encode("he<|im_end|>llo", false, true), ElementsAre(kHe, kImEnd, kLl, 'o'));
  // A byte-alphabet user-defined token matches the byte it stands for.
  EXPECT_THAT(tok->Encode("\xF8", false, true), ElementsAre(kUserByte));
  EXPECT_EQ(tok->TokenBytes(kUserByte), "\xF8");
}

TEST(TokenizerTest, DecodeAndSkipSpecial) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = {kImStart, kThink, kHello, kSpaceW, kImEnd};
  EXPECT_EQ(tok->Decode(ids, false), "<|im_start|><think>hello w<|im_end|>");
  EXPECT_EQ(tok->Decode(ids, true), "<think>hello w");
  EXPECT_EQ(tok->TokenBytes(kSpaceW), " w");
  EXPECT_EQ(tok->TokenBytes(-1), "");
  EXPECT_EQ(tok->TokenBytes(100000), "");
  EXPECT_EQ(tok->Decode({kHe, 999999}, false), "he\xEF\xBF\xBD");
}

TEST(TokenizerTest, RoundTripsArbitraryBytes) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string texts[] = {"hello world",
                               "  leading and trailing  ",
                               "tabs\tand\nnewlines\r\n",
                               "数字123456 and 🦙",
                               std::string("nul\0byte", 8),
                               "bad \xFF\xC0 utf8 \xE4\xB8",
                               "<|im_end|> text <think>"};
  for (const std::string& text : texts) {
    EXPECT_EQ(tok->Decode(tok->Encode(text, false, false), false), text);
    EXPECT_EQ(tok->Decode(tok->Encode(text, false, true), false), text);
  }
}

TEST(TokenizerTest, EndOfGenerationAndLookups) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->IsEndOfGeneration(kImEnd));
  EXPECT_FALSE(tok->IsEndOfGeneration(kImStart));
  EXPECT_FALSE(tok->IsEndOfGeneration(-5));
  EXPECT_THAT(tok->end_of_generation_ids(), ElementsAre(kImEnd));
  EXPECT_EQ(tok->TokenId("<think>"), kThink);
  EXPECT_EQ(tok->TokenId("missing"), std::nullopt);
  EXPECT_EQ(tok->vocab_size(), 267);
  EXPECT_EQ(tok->bos_id(), kImStart);
  EXPECT_EQ(tok->eos_id(), kImEnd);
  EXPECT_EQ(tok->eot_id(), -1);
  EXPECT_TRUE(tok->IsControl(kImEnd));
  EXPECT_FALSE(tok->IsControl(kThink));
}

TEST(TokenizerTest, KnownTerminatorTextIsEndOfGenerationWithoutEosKey) {
  gguf::Metadata md = MakeMetadata({{"<|endoftext|>", 3}, {"<|im_end|>", 3}, {"<x>", 3}}, {});
  auto tok = Tokenizer::FromMetadata(md);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_TRUE((*tok)->IsEndOfGeneration(256));
  EXPECT_TRUE((*tok)->IsEndOfGeneration(257));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(258));
}

}  // namespace
}  // namespace stepserve::tokenizer
