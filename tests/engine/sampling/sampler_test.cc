#include "engine/sampling/sampler.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling/logits_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/sampling/sampling_reference.h"

namespace stepserve {
namespace {

using ::stepserve::testing::RandomLogits;
using ::stepserve::testing::ReferenceDistribution;
using ::stepserve::testing::ReferencePenalised;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

Sampler MakeSampler(const SamplingParams& params, int vocab, std::vector<int32_t> prompt = {}) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params, vocab, prompt);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return *std::move(sampler);
}

TEST(ArgmaxTest, TiesGoToLowestIdAndMatchReference) {
  std::mt19937_64 rng(1);
  for (int vocab : {1, 2, 37, 1001}) {
    std::vector<float> row = RandomLogits(rng, vocab, 1.0f);
    // Quantise so ties are common.
    for (float& v : row) v = std::round(v * 2.0f);
    int32_t expected = 0;
    for (int i = 1; i < vocab; ++i) {
      if (row[i] > row[expected]) expected = i;
    }
    EXPECT_EQ(Argmax(row), expected) << vocab;
  }
  EXPECT_EQ(Argmax(std::vector<float>{3, 5, 5, -kInf, 5}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{std::nanf(""), 1, 2}), 2);
}

TEST(ArgmaxTest, RowsFillEveryPoisonedOutput) {
  std::mt19937_64 rng(2);
  const int rows = 5, vocab = 33;
  std::vector<float> logits = RandomLogits(rng, rows * vocab, 1.0f);
  std::vector<int32_t> out(rows, -77);
  ASSERT_TRUE(ArgmaxRows(logits, vocab, out).ok());
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(out[r], Argmax(std::span<const float>(logits).subspan(r * vocab, vocab)));
  }
  EXPECT_THAT(std::string(ArgmaxRows(logits, vocab + 1, out).message()), HasSubstr("logits has"));
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler = MakeSampler(params, 9);
  std::vector<float> logits = {0, 1, 4, 2, 4, 4, -1, 3, 0};
  absl::StatusOr<SampleResult> result = sampler.Sample(logits);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->token, 2);
  EXPECT_EQ(sampler.generation_index(), 1u);
}

TEST(SamplerTest, GreedyFollowsLogitBiasAndBans) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logit_bias = {{2, -kInf}, {4, -kInf}, {7, 0.5f}};
  Sampler sampler = MakeSampler(params, 9);
  std::vector<float> logits = {0, 1, 4, 2, 4, 3.9f, -1, 3.5f, 0};
  EXPECT_EQ(sampler.Sample(logits)->token, 7);  // 3.5 + 0.5 beats 3.9
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedsDiffer) {
  std::mt19937_64 rng(3);
  const int vocab = 257;
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 64; ++i) steps.push_back(RandomLogits(rng, vocab, 0.5f));
  SamplingParams params;
  params.top_k = 100;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.2f;
  params.seed = 42;
  auto run = [&](uint64_t seed) {
    SamplingParams p = params;
    p.seed = seed;
    Sampler sampler = MakeSampler(p, vocab, {1, 2, 3});
    std::vector<int32_t> tokens;
    for (const auto& logits : steps) tokens.push_back(sampler.Sample(logits)->token);
    return tokens;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
  EXPECT_NE(run(42), run(1ull << 40));
}

TEST(SamplerTest, DrawAtAnIndexCanBeRecomputedAndIsBatchInvariant) {
  std::mt19937_64 rng(4);
  const int vocab = 129, rows = 3, steps = 20;
  SamplingParams params;
  params.top_p = 0.9f;
  std::vector<Sampler> batched, alone;
  for (int r = 0; r < rows; ++r) {
    params.seed = 100 + r;
    batched.push_back(MakeSampler(params, vocab));
    alone.push_back(MakeSampler(params, vocab));
  }
  std::vector<Sampler*> pointers;
  for (Sampler& s : batched) pointers.push_back(&s);
  for (int step = 0; step < steps; ++step) {
    std::vector<float> logits = RandomLogits(rng, rows * vocab, 2.0f);
    std::vector<SampleResult> out(rows);
    for (SampleResult& r : out) r.token = -99;
    ASSERT_TRUE(SampleBatch(pointers, logits, out).ok());
    for (int r = 0; r < rows; ++r) {
      std::span<const float> row = std::span<const float>(logits).subspan(r * vocab, vocab);
      // The same row sampled on its own, and recomputed later from (seed, index).
      EXPECT_EQ(alone[r].Sample(row)->token, out[r].token);
      EXPECT_EQ(alone[r].SampleAt(row, step)->token, out[r].token);
    }
  }
}

TEST(SamplerTest, EmpiricalFrequenciesMatchSoftmax) {
  // Temperature 1, no truncation: the inverse CDF over CounterUniform must reproduce softmax.
  // Tolerance: each bin within 5 standard deviations of the binomial count (a false failure has
  // probability < 1e-5 per bin; the seed is fixed, so the test is deterministic anyway).
  const std::vector<float> logits = {0.3f, -1.2f, 2.0f, 0.0f, -kInf, 1.1f, -0.4f};
  for (float temperature : {1.0f, 0.7f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 7;
    Sampler sampler = MakeSampler(params, logits.size());
    std::vector<double> p = ReferenceDistribution(logits, params, {});
    const int draws = 200000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++counts[sampler.SampleAt(logits, i)->token];
    for (size_t t = 0; t < logits.size(); ++t) {
      const double sigma = std::sqrt(draws * p[t] * (1 - p[t]));
      EXPECT_NEAR(counts[t], draws * p[t], 5 * sigma + 1e-9)
          << "token " << t << " T " << temperature;
    }
    EXPECT_EQ(counts[4], 0);
  }
}

struct TruncationCase {
  int vocab;
  float scale;
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

TEST(SamplerTest, TruncationMatchesReferenceExactlyAndNeverDrawsExcluded) {
  const std::vector<TruncationCase> cases = {
      {61, 2.0f, 1.0f, 5, 1.0f, 0.0f},      {61, 2.0f, 1.0f, 0, 0.8f, 0.0f},
      {61, 2.0f, 1.0f, 0, 1.0f, 0.1f},      {61, 2.0f, 0.6f, 10, 0.9f, 0.05f},
      {61, 2.0f, 1.5f, 60, 0.5f, 0.0f},     {61, 1.0f, 1.0f, 1, 0.3f, 0.5f},
      {1001, 0.3f, 1.0f, 0, 0.95f, 0.0f},  // flat: top-p needs several sort chunks
      {1001, 0.3f, 1.0f, 700, 0.99f, 0.0f}, {1001, 3.0f, 0.8f, 0, 0.9f, 0.02f},
      {7, 1.0f, 1.0f, 7, 1.0f, 1.0f},  // top_k == vocab is off; min_p 1 keeps only the max
  };
  std::mt19937_64 rng(5);
  for (const TruncationCase& c : cases) {
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    params.seed = 11;
    Sampler sampler = MakeSampler(params, c.vocab);
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<float> logits = RandomLogits(rng, c.vocab, c.scale);
      std::vector<double> expected = ReferenceDistribution(logits, params, {});
      std::vector<float> probs(c.vocab, -1.0f);  // poisoned
      ASSERT_TRUE(sampler.Distribution(logits, probs).ok());
      double sum = 0;
      for (int t = 0; t < c.vocab; ++t) {
        if (expected[t] == 0.0) {
          EXPECT_EQ(probs[t], 0.0f) << "vocab " << c.vocab << " token " << t;
        } else {
          EXPECT_NEAR(probs[t], expected[t], 1e-5) << "vocab " << c.vocab << " token " << t;
        }
        sum += probs[t];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      for (int i = 0; i < 300; ++i) {
        const int32_t token = sampler.SampleAt(logits, trial * 1000 + i)->token;
        EXPECT_GT(expected[token], 0.0) << "excluded token " << token << " drawn";
      }
    }
  }
}

TEST(SamplerTest, PenaltiesApplyTheDirectFormulaOverTheWindow) {
  std::mt19937_64 rng(6);
  const int vocab = 29;
  for (int32_t last_n : {-1, 0, 3, 8}) {
    SamplingParams params;
    params.repetition_penalty = 1.3f;
    params.presence_penalty = 0.4f;
    params.frequency_penalty = 0.25f;
    params.penalty_last_n = last_n;
    std::vector<int32_t> history = {4, 4, 9, 1, 4, 20, 9};  // the prompt
    Sampler sampler = MakeSampler(params, vocab, history);
    for (int step = 0; step < 12; ++step) {
      std::vector<float> logits = RandomLogits(rng, vocab, 2.0f);
      // Temperature 1, no truncation: probs = softmax(penalised), so log-ratios recover the
      // penalised logits up to a constant.
      std::vector<double> z = ReferencePenalised(logits, params, history);
      std::vector<float> probs(vocab, -1.0f);
      ASSERT_TRUE(sampler.Distribution(logits, probs).ok());
      for (int t = 1; t < vocab; ++t) {
        EXPECT_NEAR(std::log(probs[t]) - std::log(probs[0]), z[t] - z[0], 1e-4)
            << "last_n " << last_n << " step " << step << " token " << t;
      }
      absl::StatusOr<SampleResult> result = sampler.Sample(logits);
      ASSERT_TRUE(result.ok());
      history.push_back(result->token);
    }
  }
}

TEST(SamplerTest, BannedTokensAreNeverDrawnAndAllBannedIsAnError) {
  const int vocab = 11;
  SamplingParams params;
  params.logit_bias = {{0, -kInf}, {3, -kInf}, {10, -kInf}, {5, 100.0f}};
  params.logit_bias[5] = -kInf;
  Sampler sampler = MakeSampler(params, vocab);
  std::vector<float> logits(vocab, 0.0f);
  logits[3] = 10.0f;  // the favourite is banned
  for (int i = 0; i < 2000; ++i) {
    const int32_t token = sampler.SampleAt(logits, i)->token;
    EXPECT_TRUE(token != 0 && token != 3 && token != 5 && token != 10) << token;
  }
  SamplingParams all;
  for (int t = 0; t < vocab; ++t) all.logit_bias[t] = -kInf;
  for (float temperature : {0.0f, 1.0f}) {
    all.temperature = temperature;
    Sampler banned = MakeSampler(all, vocab);
    EXPECT_THAT(std::string(banned.Sample(logits).status().message()),
                HasSubstr("every logit is -inf"));
  }
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxSortedAndSumToOne) {
  std::mt19937_64 rng(8);
  const int vocab = 13;
  SamplingParams params;
  params.n_logprobs = vocab;
  params.temperature = 0.5f;
  params.top_k = 3;
  params.logit_bias = {{2, 5.0f}};
  Sampler sampler = MakeSampler(params, vocab);
  std::vector<float> logits = RandomLogits(rng, vocab, 2.0f);
  logits[6] = logits[7];  // a tie: 6 must come first
  double max = -kInf, sum = 0;
  for (float v : logits) max = std::max<double>(max, v);
  for (float v : logits) sum += std::exp(v - max);
  const double log_norm = max + std::log(sum);
  absl::StatusOr<SampleResult> result = sampler.Sample(logits);
  ASSERT_TRUE(result.ok());
  EXPECT_NEAR(result->logprob, logits[result->token] - log_norm, 1e-5);
  ASSERT_EQ(result->n_top, vocab);
  double total = 0;
  for (int i = 0; i < vocab; ++i) {
    const TokenLogprob& e = result->top[i];
    EXPECT_NEAR(e.logprob, logits[e.token] - log_norm, 1e-5);
    if (i > 0) {
      const TokenLogprob& prev = result->top[i - 1];
      EXPECT_TRUE(prev.logprob > e.logprob || (prev.logprob == e.logprob && prev.token < e.token));
    }
    total += std::exp(e.logprob);
  }
  EXPECT_NEAR(total, 1.0, 1e-5);

  params.n_logprobs = 2;
  Sampler two = MakeSampler(params, vocab);
  absl::StatusOr<SampleResult> fewer = two.Sample(logits);
  ASSERT_EQ(fewer->n_top, 2);
  EXPECT_EQ(fewer->top[0].token, result->top[0].token);
  EXPECT_EQ(fewer->top[1].token, result->top[1].token);
}

TEST(SamplerTest, BadInputsAreErrorsNotCrashes) {
  SamplingParams params;
  Sampler sampler = MakeSampler(params, 5);
  std::vector<float> short_row(4, 0.0f);
  EXPECT_THAT(std::string(sampler.Sample(short_row).status().message()),
              HasSubstr("logits has 4 entries, expected vocab_size 5"));
  std::vector<float> nan_row = {0, 1, std::nanf(""), 0, 0};
  EXPECT_THAT(std::string(sampler.Sample(nan_row).status().message()), HasSubstr("logits[2]"));
  std::vector<float> inf_row = {0, kInf, 0, 0, 0};
  EXPECT_THAT(std::string(sampler.Sample(inf_row).status().message()), HasSubstr("logits[1]"));
  EXPECT_FALSE(sampler.Accept(5).ok());
  EXPECT_EQ(sampler.generation_index(), 0u);
  EXPECT_THAT(
      std::string(Sampler::Create(params, 5, std::vector<int32_t>{1, 7}).status().message()),
      HasSubstr("prompt[1] = 7"));
  params.top_p = 2.0f;
  EXPECT_THAT(std::string(Sampler::Create(params, 5).status().message()), HasSubstr("top_p"));
}

}  // namespace
}  // namespace stepserve
