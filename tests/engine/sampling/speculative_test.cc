#include "engine/sampling/speculative.h"

#include <cmath>
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
using ::testing::HasSubstr;

TEST(VerifyGreedyTest, MatchesPlainLoopOnRandomRowsAndDrafts) {
  std::mt19937_64 rng(1);
  const int vocab = 23;
  for (int trial = 0; trial < 200; ++trial) {
    const int k = trial % 4;  // 0..3 drafts
    std::vector<float> rows = RandomLogits(rng, (k + 1) * vocab, 1.0f);
    for (float& v : rows) v = std::round(v * 2.0f);  // ties
    std::vector<int32_t> drafts(k);
    std::vector<int32_t> argmax(k + 1);
    for (int j = 0; j <= k; ++j) {
      int32_t best = 0;
      for (int t = 1; t < vocab; ++t) {
        if (rows[j * vocab + t] > rows[j * vocab + best]) best = t;
      }
      argmax[j] = best;
    }
    for (int j = 0; j < k; ++j) drafts[j] = (rng() % 10 < 7) ? argmax[j] : int32_t(rng() % vocab);
    int expected_a = 0;
    while (expected_a < k && drafts[expected_a] == argmax[expected_a]) ++expected_a;
    absl::StatusOr<VerifyOutcome> outcome = VerifyGreedy(rows, vocab, drafts);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(outcome->accepted, expected_a);
    EXPECT_EQ(outcome->token, argmax[expected_a]);
  }
}

TEST(VerifyGreedyTest, ShapeAndIdErrorsNameTheField) {
  std::vector<float> rows(3 * 5, 0.0f);
  EXPECT_THAT(std::string(VerifyGreedy(rows, 5, std::vector<int32_t>{1}).status().message()),
              HasSubstr("target_logits has 15 entries"));
  EXPECT_THAT(std::string(VerifyGreedy(rows, 5, std::vector<int32_t>{1, 9}).status().message()),
              HasSubstr("drafts[1] = 9"));
}

std::vector<float> Normalised(std::vector<float> w) {
  double s = 0;
  for (float v : w) s += v;
  for (float& v : w) v = static_cast<float>(v / s);
  return w;
}

// Spec §6.8.6a: for hand-made (p, q) pairs, draft d ~ q, run the acceptance rule, and the emitted
// token at the first position (d if accepted, else the correction) must be distributed as p.
// Also the acceptance rate must be sum_x min(p(x), q(x)). Bins within 5 binomial sigmas.
TEST(VerifySampledTest, FirstTokenIsDistributedAsTargetForHandMadePairs) {
  const std::vector<float> p = Normalised({0.05f, 0.3f, 0.1f, 0.0f, 0.4f, 0.15f});
  const int vocab = static_cast<int>(p.size());
  struct Pair {
    std::string name;
    std::vector<float> q;  // empty: argmax draft (one-hot at argmax q... here token 1)
  };
  const std::vector<Pair> pairs = {
      {"one-hot", {}},
      {"q = p", p},
      {"disjoint", Normalised({0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f})},
      {"skewed", Normalised({0.4f, 0.05f, 0.05f, 0.2f, 0.1f, 0.2f})},
  };
  std::mt19937_64 rng(9);
  const int trials = 60000;
  for (const Pair& pair : pairs) {
    std::vector<float> target(p);
    target.insert(target.end(), p.begin(), p.end());  // row 1 (bonus) unused for the first token
    std::vector<int> counts(vocab, 0);
    int accepted = 0;
    std::discrete_distribution<int> draft_dist(pair.q.begin(), pair.q.end());
    for (int i = 0; i < trials; ++i) {
      const int32_t d = pair.q.empty() ? 1 : draft_dist(rng);
      std::vector<int32_t> drafts = {d};
      absl::StatusOr<VerifyOutcome> out = VerifySampled(target, pair.q, vocab, drafts, 1234, i * 7);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_GE(out->token, 0);
      accepted += out->accepted;
      ++counts[out->accepted == 1 ? d : out->token];
    }
    std::vector<float> q = pair.q.empty() ? std::vector<float>{0, 1, 0, 0, 0, 0} : pair.q;
    double accept_p = 0;
    for (int t = 0; t < vocab; ++t) accept_p += std::min(p[t], q[t]);
    accept_p = std::min(1.0, accept_p);  // float rounding of the normalised rows
    EXPECT_NEAR(accepted, trials * accept_p, 5 * std::sqrt(trials * accept_p * (1 - accept_p)) + 1)
        << pair.name;
    for (int t = 0; t < vocab; ++t) {
      const double sigma = std::sqrt(trials * p[t] * (1 - p[t]));
      EXPECT_NEAR(counts[t], trials * p[t], 5 * sigma + 1e-9) << pair.name << " token " << t;
    }
    EXPECT_EQ(counts[3], 0) << pair.name;  // p(3) = 0 is never emitted
  }
}

TEST(VerifySampledTest, AllAcceptedGivesBonusFromLastRowAndIsReproducible) {
  // Row 0 puts all mass on the draft, so it is always accepted; the bonus comes from row 1.
  const int vocab = 4;
  std::vector<float> rows = {0, 0, 1, 0, 0.5f, 0, 0, 0.5f};
  std::vector<int32_t> drafts = {2};
  int zeros = 0;
  for (int i = 0; i < 400; ++i) {
    absl::StatusOr<VerifyOutcome> a = VerifySampled(rows, {}, vocab, drafts, 5, i);
    absl::StatusOr<VerifyOutcome> b = VerifySampled(rows, {}, vocab, drafts, 5, i);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->accepted, 1);
    EXPECT_TRUE(a->token == 0 || a->token == 3);
    EXPECT_EQ(a->token, b->token);
    zeros += a->token == 0;
  }
  EXPECT_GT(zeros, 120);
  EXPECT_LT(zeros, 280);
}

TEST(VerifySampledTest, ImpossibleDraftIsAnError) {
  std::vector<float> rows = {0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> q = {1.0f, 0.0f};
  EXPECT_THAT(
      std::string(VerifySampled(rows, q, 2, std::vector<int32_t>{1}, 0, 0).status().message()),
      HasSubstr("draft_probs row 0"));
  EXPECT_THAT(
      std::string(VerifySampled(rows, std::vector<float>{1.0f}, 2, std::vector<int32_t>{0}, 0, 0)
                      .status()
                      .message()),
      HasSubstr("draft_probs has 1 entries"));
}

// With argmax drafts the engine path must emit exactly what plain decoding emits under the same
// seed, whatever the drafts: oracle drafts are all accepted, wrong drafts stop at once.
TEST(VerifyWithSamplerTest, EmitsExactlyWhatPlainDecodingEmits) {
  std::mt19937_64 rng(10);
  const int vocab = 97, k = 3;
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 6;
  params.repetition_penalty = 1.5f;
  params.presence_penalty = 0.5f;
  params.seed = 77;
  params.n_logprobs = 2;
  for (int mode = 0; mode < 3; ++mode) {  // 0 oracle, 1 adversarial, 2 random
    absl::StatusOr<Sampler> spec = Sampler::Create(params, vocab, std::vector<int32_t>{3, 5});
    absl::StatusOr<Sampler> plain = Sampler::Create(params, vocab, std::vector<int32_t>{3, 5});
    ASSERT_TRUE(spec.ok() && plain.ok());
    int total_accepted = 0;
    for (int step = 0; step < 30; ++step) {
      // Peaked rows so the oracle is also a plausible guess; logits do not depend on tokens here.
      std::vector<float> rows = RandomLogits(rng, (k + 1) * vocab, 3.0f);
      std::vector<int32_t> drafts(k);
      Sampler oracle = *plain;  // what plain decoding would emit next, without advancing it
      for (int j = 0; j < k; ++j) {
        const int32_t next =
            oracle.Sample(std::span<const float>(rows).subspan(j * vocab, vocab))->token;
        drafts[j] = mode == 0 ? next : mode == 1 ? (next + 1) % vocab : int32_t(rng() % vocab);
      }
      std::vector<SampleResult> out(k + 1);
      for (SampleResult& r : out) r.token = -5;
      absl::StatusOr<int> emitted = VerifyWithSampler(*spec, rows, drafts, out);
      ASSERT_TRUE(emitted.ok()) << emitted.status();
      if (mode == 0) {
        EXPECT_EQ(*emitted, k + 1);
      } else if (mode == 1) {
        EXPECT_EQ(*emitted, 1);
      }
      total_accepted += *emitted - 1;
      for (int j = 0; j < *emitted; ++j) {
        absl::StatusOr<SampleResult> expected =
            plain->Sample(std::span<const float>(rows).subspan(j * vocab, vocab));
        EXPECT_EQ(out[j].token, expected->token) << "mode " << mode << " row " << j;
        EXPECT_EQ(out[j].logprob, expected->logprob);
        if (j < *emitted - 1) {
          EXPECT_EQ(out[j].token, drafts[j]);
        }
      }
      EXPECT_EQ(spec->generation_index(), plain->generation_index());
    }
    if (mode == 0) {
      EXPECT_EQ(total_accepted, 30 * k);
    }
  }
}

}  // namespace
}  // namespace stepserve
