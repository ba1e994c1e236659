#include "engine/model/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

namespace stepserve::model {
namespace {

constexpr int64_t kVocab = 7;

// Logits that put probability p on (previous token + 1) % vocab and spread the rest evenly:
// the NLL of each scored token is known in closed form.
ChunkLogitsFn SuccessorModel(double p, std::vector<std::vector<int32_t>>* seen_chunks) {
  return [p, seen_chunks](std::span<const int32_t> chunk, std::vector<float>* logits) {
    seen_chunks->emplace_back(chunk.begin(), chunk.end());
    logits->assign(chunk.size() * kVocab, 0.0f);
    const double rest = (1 - p) / (kVocab - 1);
    for (size_t i = 0; i < chunk.size(); ++i) {
      for (int64_t v = 0; v < kVocab; ++v) {
        const bool next = v == (chunk[i] + 1) % kVocab;
        (*logits)[i * kVocab + v] = static_cast<float>(std::log(next ? p : rest));
      }
    }
    return absl::OkStatus();
  };
}

TEST(PerplexityTest, ScoresSecondHalfOfEachChunkAndReplacesFirstTokenWithBos) {
  // 3 whole chunks of 8 plus a partial one; the text follows the successor rule except at
  // position 13 (chunk 1: row 4 predicts it and row 5 predicts from it, both scored) and position
  // 10 (rows 1 and 2 of chunk 1: unscored).
  std::vector<int32_t> tokens(30);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % kVocab);
  tokens[13] = (tokens[12] + 3) % kVocab;
  tokens[10] = (tokens[9] + 2) % kVocab;
  std::vector<std::vector<int32_t>> seen;
  PerplexityOptions options{.n_ctx = 8, .bos_token = 6};
  const double p = 0.6;
  absl::StatusOr<PerplexityResult> result =
      EvaluatePerplexity(tokens, kVocab, options, SuccessorModel(p, &seen));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->chunks, 3);
  EXPECT_EQ(result->scored_tokens, 3 * 3);  // rows 4, 5, 6 of each chunk
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& chunk : seen) EXPECT_EQ(chunk[0], 6);
  EXPECT_EQ(seen[1][1], tokens[9]);
  // 7 hits at p, two misses at (1-p)/6.
  const double nll = (7 * -std::log(p) - 2 * std::log((1 - p) / (kVocab - 1))) / 9;
  EXPECT_NEAR(result->perplexity, std::exp(nll), 1e-5);
  EXPECT_FALSE(result->has_kld);
}

TEST(PerplexityTest, SavedLogitsGiveZeroDivergenceAgainstThemselves) {
  std::mt19937 rng(7);
  std::vector<int32_t> tokens(64);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % kVocab);
  const std::string path =
      (std::filesystem::temp_directory_path() / "stepserve_perplexity_test.sslp").string();
  std::vector<std::vector<int32_t>> seen;
  PerplexityOptions save{.n_ctx = 16, .save_logits_path = path};
  ASSERT_TRUE(EvaluatePerplexity(tokens, kVocab, save, SuccessorModel(0.5, &seen)).ok());

  PerplexityOptions same{.n_ctx = 16, .kld_reference_path = path};
  absl::StatusOr<PerplexityResult> self =
      EvaluatePerplexity(tokens, kVocab, same, SuccessorModel(0.5, &seen));
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_TRUE(self->has_kld);
  EXPECT_NEAR(self->mean_kld, 0.0, 1e-6);
  EXPECT_DOUBLE_EQ(self->top1_agreement, 1.0);

  absl::StatusOr<PerplexityResult> other =
      EvaluatePerplexity(tokens, kVocab, same, SuccessorModel(0.3, &seen));
  ASSERT_TRUE(other.ok());
  // KL(P || Q) for P = (0.5, 0.5/6 x6), Q = (0.3, 0.7/6 x6); argmax unchanged.
  const double kld = 0.5 * std::log(0.5 / 0.3) + 0.5 * std::log((0.5 / 6) / (0.7 / 6));
  EXPECT_NEAR(other->mean_kld, kld, 1e-5);
  EXPECT_DOUBLE_EQ(other->top1_agreement, 1.0);

  PerplexityOptions wrong_ctx{.n_ctx = 8, .kld_reference_path = path};
  absl::StatusOr<PerplexityResult> mismatch =
      EvaluatePerplexity(tokens, kVocab, wrong_ctx, SuccessorModel(0.3, &seen));
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("ctx 16"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(PerplexityTest, TooFewTokensIsAClearError) {
  std::vector<int32_t> tokens(10, 1);
  std::vector<std::vector<int32_t>> seen;
  absl::StatusOr<PerplexityResult> result =
      EvaluatePerplexity(tokens, kVocab, {.n_ctx = 16}, SuccessorModel(0.5, &seen));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("10 tokens"), std::string::npos);
}

}  // namespace
}  // namespace stepserve::model
