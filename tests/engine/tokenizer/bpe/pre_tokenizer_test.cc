#include "engine/tokenizer/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer/unicode_props.h"

namespace stepserve::tokenizer {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(PreTokenizerType type, std::string_view text) {
  std::vector<std::string_view> views;
  PreTokenizer(type).Split(text, &views);
  std::string joined;
  for (std::string_view v : views) joined.append(v);
  EXPECT_EQ(joined, text) << "pieces must cover the input exactly";
  return std::vector<std::string>(views.begin(), views.end());
}

std::vector<std::string> V3(std::string_view text) {
  return Split(PreTokenizerType::kDeepseekV3, text);
}

TEST(UnicodePropsTest, Categories) {
  EXPECT_EQ(CodePointFlags('a'), kLetter);
  EXPECT_EQ(CodePointFlags(U'世'), kLetter);
  EXPECT_EQ(CodePointFlags('7'), kNumber);
  EXPECT_EQ(CodePointFlags(U'½'), kNumber);
  EXPECT_EQ(CodePointFlags(','), kPunct);
  EXPECT_EQ(CodePointFlags('_'), kPunct);
  EXPECT_EQ(CodePointFlags('+'), kSymbol);
  EXPECT_EQ(CodePointFlags(U'🦙'), kSymbol);  // U+1F999, outside the BMP table
  EXPECT_EQ(CodePointFlags(0x0301), kMark);
  EXPECT_EQ(CodePointFlags(' '), kSpace);
  EXPECT_EQ(CodePointFlags(0x3000), kSpace);
  EXPECT_EQ(CodePointFlags(0x1C), 0);  // not White_Space even though Python's isspace() says so
  EXPECT_EQ(CodePointFlags(0x10FFFF), 0);
  EXPECT_EQ(CodePointFlags(kInvalidCodePoint), 0);
  EXPECT_EQ(CodePointFlags(0x20000), kLetter);  // CJK Extension B
  EXPECT_FALSE(UnicodeTableVersion().empty());
}

TEST(UnicodePropsTest, DecodeUtf8RejectsMalformedSequences) {
  char32_t cp;
  EXPECT_EQ(DecodeUtf8At("\xF0\x9F\xA6\x99", 0, &cp), 4u);
  EXPECT_EQ(cp, 0x1F999u);
  EXPECT_EQ(DecodeUtf8At("\xC0\x80", 0, &cp), 1u);  // overlong
  EXPECT_EQ(cp, kInvalidCodePoint);
  EXPECT_EQ(DecodeUtf8At("\xED\xA0\x80", 0, &cp), 1u);  // surrogate
  EXPECT_EQ(cp, kInvalidCodePoint);
  EXPECT_EQ(DecodeUtf8At("\xE4\xB8", 0, &cp), 1u);  // truncated
  EXPECT_EQ(cp, kInvalidCodePoint);
  EXPECT_EQ(DecodeUtf8At("\x80", 0, &cp), 1u);
  EXPECT_EQ(cp, kInvalidCodePoint);
}

TEST(PreTokenizerTest, ParsesNames) {
  EXPECT_EQ(*ParsePreTokenizerType("deepseek-v3"), PreTokenizerType::kDeepseekV3);
  EXPECT_EQ(*ParsePreTokenizerType("gpt-2"), PreTokenizerType::kGpt2);
  EXPECT_EQ(PreTokenizerName(PreTokenizerType::kDeepseekCoder), "deepseek-coder");
  EXPECT_FALSE(ParsePreTokenizerType("llama3").ok());
}

// Expected pieces below are derived by hand from the deepseek-v3 regexes (spec 7.2):
// 1) \p{N}{1,3}  2) [一-龥぀-ゟ゠-ヿ]+  3) the six-way alternation.
TEST(DeepseekV3PreTokenizerTest, DigitsGroupInThreesFromTheLeft) {
  EXPECT_THAT(V3("1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(V3("abc12345def"), ElementsAre("abc", "123", "45", "def"));
  // The digit split isolates "a " and " b"; the third regex then splits "a " further.
  EXPECT_THAT(V3("a 2024 b"), ElementsAre("a", " ", "202", "4", " b"));
  EXPECT_THAT(V3("x١٢٣٤"), ElementsAre("x", "١٢٣", "٤"));  // Arabic-Indic digits are \p{N}
}

TEST(DeepseekV3PreTokenizerTest, CjkAndKanaRuns) {
  EXPECT_THAT(V3("你好世界abc"), ElementsAre("你好世界", "abc"));
  EXPECT_THAT(V3("我爱Rust语言"), ElementsAre("我爱", "Rust", "语言"));
  EXPECT_THAT(V3("こんにちは世界"), ElementsAre("こんにちは世界"));
  EXPECT_THAT(V3("カタカナと漢字"), ElementsAre("カタカナと漢字"));
  // Hangul is outside regex 2; as letters it stays one run with its leading space.
  EXPECT_THAT(V3("hi 안녕하세요"), ElementsAre("hi", " 안녕하세요"));
  // The space before CJK is cut off by regex 2, then stands alone.
  EXPECT_THAT(V3("ok 你好"), ElementsAre("ok", " ", "你好"));
}

TEST(DeepseekV3PreTokenizerTest, PunctuationAndLetters) {
  EXPECT_THAT(V3("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(V3(".NET is"), ElementsAre(".NET", " is"));
  EXPECT_THAT(V3("foo.bar()"), ElementsAre("foo", ".bar", "()"));
  EXPECT_THAT(V3("don't"), ElementsAre("don", "'t"));
  EXPECT_THAT(V3("a+=b"), ElementsAre("a", "+=", "b"));
  EXPECT_THAT(V3("x;\n\ny"), ElementsAre("x", ";\n\n", "y"));
  EXPECT_THAT(V3("hi 🦙🦙 x"), ElementsAre("hi", " 🦙🦙", " x"));
  // Non-ASCII punctuation does not take the ASCII-only first alternative.
  EXPECT_THAT(V3("«word»"), ElementsAre("«", "word", "»"));
}

TEST(DeepseekV3PreTokenizerTest, MarksJoinLetters) {
  EXPECT_THAT(V3("cafe\xCC\x81s ok"), ElementsAre("cafe\xCC\x81s", " ok"));
}

TEST(DeepseekV3PreTokenizerTest, NewlinesAndSpaces) {
  EXPECT_THAT(V3("a  \n\n  b"), ElementsAre("a", "  \n\n", " ", " b"));
  EXPECT_THAT(V3("hello   "), ElementsAre("hello", "   "));
  EXPECT_THAT(V3("a\tb"), ElementsAre("a", "\tb"));
  EXPECT_THAT(V3("   "), ElementsAre("   "));
  EXPECT_THAT(V3("a\r\nb"), ElementsAre("a", "\r\n", "b"));
  EXPECT_THAT(V3("a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(V3(""), ElementsAre());
}

TEST(DeepseekV3PreTokenizerTest, MalformedUtf8IsKeptByteForByte) {
  EXPECT_THAT(V3("ab\xFF\xFEz"), ElementsAre("ab", "\xFF", "\xFEz"));
}

TEST(Gpt2PreTokenizerTest, Pieces) {
  EXPECT_THAT(Split(PreTokenizerType::kGpt2, "Hello world's  test\n"),
              ElementsAre("Hello", " world", "'s", " ", " test", "\n"));
  EXPECT_THAT(Split(PreTokenizerType::kGpt2, "abc123 456!!"),
              ElementsAre("abc", "123", " 456", "!!"));
  EXPECT_THAT(Split(PreTokenizerType::kGpt2, "I'll\t\tgo"),
              ElementsAre("I", "'ll", "\t", "\t", "go"));
}

TEST(DeepseekCoderPreTokenizerTest, Pieces) {
  EXPECT_THAT(Split(PreTokenizerType::kDeepseekCoder, "int x = 10;\n"),
              ElementsAre("int", " x", " = ", "1", "0", ";", "\n"));
}

TEST(DeepseekLlmPreTokenizerTest, Pieces) {
  EXPECT_THAT(Split(PreTokenizerType::kDeepseekLlm, "Hello 世界 123!\n"),
              ElementsAre("Hello", " ", "世界", " ", "123", "!", "\n"));
  // Trailing whitespace of a piece is split off by \s+$.
  EXPECT_THAT(Split(PreTokenizerType::kDeepseekLlm, "42  "), ElementsAre("42", "  "));
}

TEST(DefaultPreTokenizerTest, Pieces) {
  EXPECT_THAT(Split(PreTokenizerType::kDefault, "x 12345+y"),
              ElementsAre("x", " ", "123", "45", "+", "y"));
}

TEST(PreTokenizerTest, LongWhitespaceRunIsLinear) {
  std::string text(200000, ' ');
  text += "x";
  for (PreTokenizerType type :
       {PreTokenizerType::kDeepseekV3, PreTokenizerType::kDeepseekLlm, PreTokenizerType::kGpt2}) {
    std::vector<std::string_view> pieces;
    PreTokenizer(type).Split(text, &pieces);
    size_t total = 0;
    for (std::string_view p : pieces) total += p.size();
    EXPECT_EQ(total, text.size());
  }
}

}  // namespace
}  // namespace stepserve::tokenizer
