#include "engine/tokenizer/streaming_decoder.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_unicode.h"
#include "tests/engine/tokenizer/bpe/test_vocab.h"

namespace stepserve::tokenizer {
namespace {

constexpr char kFffd[] = "\xEF\xBF\xBD";

// Byte tokens (id == byte) plus multi-byte tokens that cut characters in awkward places.
std::unique_ptr<Tokenizer> MakeTokenizer() {
  gguf::Metadata md =
      testing::MakeMetadata({{BytesToVocabText("\xF0\x9F")},   // 256: first half of an emoji
                             {BytesToVocabText("\xA6\x99!")},  // 257: second half + '!'
                             {BytesToVocabText("a\xE4\xB8")},  // 258: 'a' + 2/3 of 世
                             {"<|im_end|>", 3}},               // 259
                            {});
  auto tok = Tokenizer::FromMetadata(md);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::string StreamAll(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                      std::vector<std::string>* chunks = nullptr) {
  StreamingDecoder decoder(tok, skip_special);
  std::string out;
  for (int32_t id : ids) {
    std::string chunk = decoder.Push(id);
    if (chunks) chunks->push_back(chunk);
    out += chunk;
  }
  out += decoder.Flush();
  return out;
}

TEST(StreamingDecoderTest, HoldsEmojiSplitAcrossTokens) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> chunks;
  EXPECT_EQ(StreamAll(*tok, {'H', 256, 257}, false, &chunks), "H\xF0\x9F\xA6\x99!");
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], "H");
  EXPECT_EQ(chunks[1], "");  // incomplete emoji held back
  EXPECT_EQ(chunks[2], "\xF0\x9F\xA6\x99!");
}

TEST(StreamingDecoderTest, EmojiByteByByte) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  StreamingDecoder decoder(*tok, false);
  EXPECT_EQ(decoder.Push(0xF0), "");
  EXPECT_EQ(decoder.Push(0x9F), "");
  EXPECT_EQ(decoder.Push(0xA6), "");
  EXPECT_EQ(decoder.pending_bytes(), 3u);
  EXPECT_EQ(decoder.Push(0x99), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(StreamingDecoderTest, CjkCompletedByLaterToken) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  StreamingDecoder decoder(*tok, false);
  EXPECT_EQ(decoder.Push(258), "a");
  EXPECT_EQ(decoder.Push(0x96), "世");
}

TEST(StreamingDecoderTest, FlushReplacesDanglingBytes) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  StreamingDecoder decoder(*tok, false);
  EXPECT_EQ(decoder.Push(258), "a");
  EXPECT_EQ(decoder.Flush(), kFffd);
  EXPECT_EQ(decoder.Flush(), "");
  EXPECT_EQ(decoder.Push('b'), "b");  // reusable after Flush
}

TEST(StreamingDecoderTest, InvalidBytesComeOutAsReplacementAtOnce) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  StreamingDecoder decoder(*tok, false);
  EXPECT_EQ(decoder.Push(0xFF), kFffd);                       // never valid
  EXPECT_EQ(decoder.Push(0x80), kFffd);                       // stray continuation
  EXPECT_EQ(decoder.Push(0xC0), kFffd);                       // overlong lead
  EXPECT_EQ(decoder.Push(0xE0), "");                          // may still become valid
  EXPECT_EQ(decoder.Push(0x80), std::string(kFffd) + kFffd);  // E0 80 is not: both replaced
  EXPECT_EQ(decoder.Push(0xE4), "");
  EXPECT_EQ(decoder.Push('x'), std::string(kFffd) + "x");  // interrupted sequence
  EXPECT_EQ(decoder.Push(-1), kFffd);
}

TEST(StreamingDecoderTest, SkipSpecial) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(StreamAll(*tok, {'o', 'k', 259}, true), "ok");
  EXPECT_EQ(StreamAll(*tok, {'o', 'k', 259}, false), "ok<|im_end|>");
}

TEST(StreamingDecoderTest, RandomTokenizationsOfValidTextMatchWholeDecode) {
  auto tok = MakeTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string text = "Grüße 世界 🦙🦙 — naïve Ωmega 한국어 ok";
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    // Random mix of the multi-byte tokens where they fit and single bytes otherwise.
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      if (rng() % 2 == 0 && text.compare(i, 2, "\xF0\x9F") == 0) {
        ids.push_back(256);
        i += 2;
      } else {
        ids.push_back(static_cast<uint8_t>(text[i]));
        ++i;
      }
    }
    const std::string whole = tok->Decode(ids, false);
    ASSERT_EQ(whole, text);
    EXPECT_EQ(StreamAll(*tok, ids, false), whole);
  }
}

TEST(DrainCompleteUtf8Test, KeepsOnlyIncompleteTail) {
  std::string pending = "ab\xE4\xB8";
  std::string out;
  DrainCompleteUtf8(&pending, &out);
  EXPECT_EQ(out, "ab");
  EXPECT_EQ(pending, "\xE4\xB8");
  pending += "\x96";
  DrainCompleteUtf8(&pending, &out);
  EXPECT_EQ(out, "ab世");
  EXPECT_TRUE(pending.empty());
  pending = "\xED\xA0";  // would be a surrogate: invalid now
  out.clear();
  DrainCompleteUtf8(&pending, &out);
  EXPECT_EQ(out, std::string(kFffd) + kFffd);
}

}  // namespace
}  // namespace stepserve::tokenizer
