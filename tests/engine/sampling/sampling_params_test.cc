#include "engine/sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stepserve {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 1001;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingParamsTest, DefaultsAreValidAndOff) {
  SamplingParams params;
  EXPECT_TRUE(params.Validate(kVocab).ok());
  EXPECT_FALSE(params.IsGreedy());
  EXPECT_FALSE(params.HasPenalties());
  params.temperature = 0.0f;
  EXPECT_TRUE(params.IsGreedy());
  params.repetition_penalty = 1.1f;
  EXPECT_TRUE(params.HasPenalties());
  params.penalty_last_n = 0;  // a zero window turns every penalty off
  EXPECT_FALSE(params.HasPenalties());
}

TEST(SamplingParamsTest, BoundaryValuesAreAccepted) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = kVocab;
  params.top_p = 1.0f;
  params.min_p = 1.0f;
  params.repetition_penalty = 1e-3f;
  params.presence_penalty = -2.0f;
  params.frequency_penalty = 2.0f;
  params.penalty_last_n = -1;
  params.logit_bias = {{0, -kInf}, {kVocab - 1, 100.0f}, {5, -100.0f}};
  params.n_logprobs = kMaxLogprobs;
  EXPECT_TRUE(params.Validate(kVocab).ok()) << params.Validate(kVocab);
}

struct BadCase {
  std::string name;
  std::function<void(SamplingParams&)> mutate;
  std::string message;  // a substring the error must contain
};

TEST(SamplingParamsTest, EveryBadFieldIsNamedWithItsRange) {
  const std::vector<BadCase> cases = {
      {"negative temperature", [](auto& p) { p.temperature = -0.5f; },
       "temperature must be finite and >= 0, got -0.5"},
      {"nan temperature", [](auto& p) { p.temperature = kNaN; }, "temperature must be"},
      {"inf temperature", [](auto& p) { p.temperature = kInf; }, "temperature must be"},
      {"negative top_k", [](auto& p) { p.top_k = -1; }, "top_k must be in [0, 1001]"},
      {"top_k above vocab", [](auto& p) { p.top_k = kVocab + 1; }, "got 1002"},
      {"top_p above 1", [](auto& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {"top_p zero", [](auto& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {"top_p nan", [](auto& p) { p.top_p = kNaN; }, "top_p must be in (0, 1]"},
      {"min_p negative", [](auto& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1], got -0.1"},
      {"min_p above 1", [](auto& p) { p.min_p = 1.01f; }, "min_p must be in [0, 1]"},
      {"min_p nan", [](auto& p) { p.min_p = kNaN; }, "min_p must be in [0, 1]"},
      {"repetition zero", [](auto& p) { p.repetition_penalty = 0.0f; },
       "repetition_penalty must be finite and > 0"},
      {"repetition inf", [](auto& p) { p.repetition_penalty = kInf; }, "repetition_penalty"},
      {"presence high", [](auto& p) { p.presence_penalty = 2.5f; },
       "presence_penalty must be in [-2, 2], got 2.5"},
      {"presence nan", [](auto& p) { p.presence_penalty = kNaN; }, "presence_penalty"},
      {"frequency low", [](auto& p) { p.frequency_penalty = -3.0f; },
       "frequency_penalty must be in [-2, 2], got -3"},
      {"penalty_last_n", [](auto& p) { p.penalty_last_n = -2; }, "penalty_last_n must be >= -1"},
      {"bias token negative", [](auto& p) { p.logit_bias[-1] = 1.0f; },
       "logit_bias token id must be in [0, 1001), got -1"},
      {"bias token too big", [](auto& p) { p.logit_bias[kVocab] = 1.0f; },
       "logit_bias token id must be in [0, 1001), got 1001"},
      {"bias value", [](auto& p) { p.logit_bias[7] = 150.0f; },
       "logit_bias[7] must be in [-100, 100] or -inf, got 150"},
      {"bias +inf", [](auto& p) { p.logit_bias[8] = kInf; }, "logit_bias[8]"},
      {"bias nan", [](auto& p) { p.logit_bias[9] = kNaN; }, "logit_bias[9]"},
      {"n_logprobs negative", [](auto& p) { p.n_logprobs = -1; }, "n_logprobs must be in [0, 20]"},
      {"n_logprobs too many", [](auto& p) { p.n_logprobs = 21; }, "got 21"},
  };
  for (const BadCase& c : cases) {
    SamplingParams params;
    c.mutate(params);
    absl::Status status = params.Validate(kVocab);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.name;
  }
}

TEST(SamplingParamsTest, RejectsNonPositiveVocab) {
  SamplingParams params;
  EXPECT_THAT(std::string(params.Validate(0).message()), HasSubstr("vocab_size"));
}

}  // namespace
}  // namespace stepserve
