#include "engine/synth/bpe_trainer.h"

#include <chrono>
#include <set>
#include <string>

#include "engine/synth/corpus.h"
#include "engine/synth/vocab.h"
#include "engine/tokenizer/byte_unicode.h"
#include "gtest/gtest.h"

namespace stepserve::synth {
namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += p;
  return out;
}

TEST(PreSplitTest, SplitsLikeDeepseekV3) {
  EXPECT_EQ(PreSplit("Hello world"), (std::vector<std::string>{"Hello", " world"}));
  EXPECT_EQ(
      PreSplit("in 2024, 1234567 cats!"),
      (std::vector<std::string>{"in", " ", "202", "4", ",", " ", "123", "456", "7", " cats", "!"}));
  EXPECT_EQ(PreSplit("a  b"), (std::vector<std::string>{"a", " ", " b"}));
  EXPECT_EQ(PreSplit("x.y\n\nz"), (std::vector<std::string>{"x", ".y", "\n\n", "z"}));
  EXPECT_EQ(PreSplit("say: \"hi\""), (std::vector<std::string>{"say", ":", " \"", "hi", "\""}));
  EXPECT_EQ(PreSplit("我们去 Tokyo東京"), (std::vector<std::string>{"我们去", " Tokyo", "東京"}));
}

TEST(PreSplitTest, ConcatenationGivesBackTheText) {
  const std::string_view corpus = TrainingCorpus();
  EXPECT_EQ(Join(PreSplit(corpus)), corpus);
  const std::string bad = "ok\xff\xc3 then \xe4\xb8";  // invalid and truncated UTF-8
  EXPECT_EQ(Join(PreSplit(bad)), bad);
}

TEST(BpeTrainerTest, MergesReencodeCorpusWordsExactly) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<BpeModel> model = TrainBpe(TrainingCorpus(), 3000, /*min_count=*/1);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_LT(secs, 1.0) << "training must stay fast";
  EXPECT_GE(model->merges.size(), 2000u);
  EXPECT_EQ(model->tokens.size(), 256 + model->merges.size());

  // Every merge is made of earlier tokens and every token text is unique.
  std::set<std::string> seen(model->tokens.begin(), model->tokens.begin() + 256);
  for (size_t r = 0; r < model->merges.size(); ++r) {
    const auto& [a, b] = model->merges[r];
    EXPECT_TRUE(seen.count(a) && seen.count(b)) << "merge " << r;
    EXPECT_EQ(model->tokens[256 + r], a + b);
    EXPECT_TRUE(seen.insert(a + b).second) << "duplicate token at merge " << r;
  }

  const BpeEncoder encoder(*model);
  size_t pieces = 0, bytes = 0, tokens = 0;
  for (const std::string& piece : PreSplit(TrainingCorpus())) {
    const std::vector<std::string> enc = encoder.Encode(piece);
    ASSERT_EQ(Join(enc), piece);
    std::string decoded;
    for (const std::string& t : enc) {
      ASSERT_TRUE(seen.count(t)) << "token not in vocabulary: " << t;
      // The vocabulary spelling decodes back to the same bytes.
      std::optional<std::string> raw = tokenizer::VocabTextToBytes(tokenizer::BytesToVocabText(t));
      ASSERT_TRUE(raw.has_value());
      decoded += *raw;
    }
    ASSERT_EQ(decoded, piece);
    ++pieces;
    bytes += piece.size();
    tokens += enc.size();
  }
  // The merges actually compress the training text (frequent words become single tokens).
  EXPECT_LT(tokens * 2, bytes) << pieces << " pieces";
  EXPECT_EQ(encoder.Encode(" the").size(), 1u);
}

TEST(BpeTrainerTest, IsDeterministicAndHonoursLimits) {
  absl::StatusOr<BpeModel> a = TrainBpe(TrainingCorpus(), 200);
  absl::StatusOr<BpeModel> b = TrainBpe(TrainingCorpus(), 200);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->merges, b->merges);
  EXPECT_EQ(a->merges.size(), 200u);
  // With min_count 2 training stops once every remaining pair is unique.
  absl::StatusOr<BpeModel> frequent = TrainBpe(TrainingCorpus(), 100000);
  ASSERT_TRUE(frequent.ok());
  EXPECT_GT(frequent->merges.size(), 300u);
  EXPECT_LT(frequent->merges.size(), 100000u);
  EXPECT_FALSE(TrainBpe("x", -1).ok());
  absl::StatusOr<BpeModel> tiny = TrainBpe("abab", 100);
  ASSERT_TRUE(tiny.ok());
  ASSERT_EQ(tiny->merges.size(), 1u);  // only "ab" occurs twice
  EXPECT_EQ(tiny->MergeStrings(), std::vector<std::string>{"a b"});
  // Merges are spelled in the byte alphabet: a leading space is "Ġ".
  absl::StatusOr<BpeModel> spaced = TrainBpe(" a a", 1);
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(spaced->MergeStrings(), std::vector<std::string>{"Ġ a"});
}

TEST(SynthVocabTest, CompactAndPaddedLayouts) {
  absl::StatusOr<SynthVocab> v = BuildSynthVocab(3000, 0);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->tokens.size(), v->token_types.size());
  EXPECT_EQ(v->tokens[0], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(v->bos_id, 0u);
  EXPECT_EQ(v->padding_id, 1u);
  EXPECT_EQ(v->tokens[v->eos_id], "<|im_end|>");
  EXPECT_EQ(v->token_types[v->eos_id], kControl);
  EXPECT_EQ(v->tokens[2 + 'A'], "A");
  EXPECT_EQ(v->tokens[2 + ' '], "Ġ");
  std::set<std::string> unique(v->tokens.begin(), v->tokens.end());
  EXPECT_EQ(unique.size(), v->tokens.size());
  for (const std::string& s : StepSpecialTokens()) EXPECT_TRUE(unique.count(s)) << s;

  absl::StatusOr<SynthVocab> p = BuildSynthVocab(3000, kStepVocabSize);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->tokens.size(), static_cast<size_t>(kStepVocabSize));
  EXPECT_EQ(p->eos_id, 128007u);
  EXPECT_EQ(p->tokens[128007], "<|im_end|>");
  EXPECT_EQ(p->tokens[128006], "<|im_start|>");
  EXPECT_EQ(p->token_types[128100], kUnused);
  EXPECT_EQ(p->merges, v->merges);
  std::set<std::string> unique_padded(p->tokens.begin(), p->tokens.end());
  EXPECT_EQ(unique_padded.size(), p->tokens.size());
}

}  // namespace
}  // namespace stepserve::synth
