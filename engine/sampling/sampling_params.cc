#include "engine/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace stepserve {

absl::Status SamplingParams::Validate(int vocab_size) const {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocab_size must be positive, got %d", vocab_size));
  }
  // Every comparison is written so that NaN fails it.
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("temperature must be finite and >= 0, got %g", temperature));
  }
  if (top_k < 0 || top_k > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_k must be in [0, %d] (0 = off, at most the vocabulary size), got %d",
                        vocab_size, top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("top_p must be in (0, 1], got %g", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat("min_p must be in [0, 1], got %g", min_p));
  }
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "repetition_penalty must be finite and > 0 (1 = off), got %g", repetition_penalty));
  }
  if (!(presence_penalty >= -kMaxAbsPresenceFrequency &&
        presence_penalty <= kMaxAbsPresenceFrequency)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("presence_penalty must be in [-2, 2], got %g", presence_penalty));
  }
  if (!(frequency_penalty >= -kMaxAbsPresenceFrequency &&
        frequency_penalty <= kMaxAbsPresenceFrequency)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("frequency_penalty must be in [-2, 2], got %g", frequency_penalty));
  }
  if (penalty_last_n < -1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "penalty_last_n must be >= -1 (-1 = whole sequence, 0 = off), got %d", penalty_last_n));
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("logit_bias token id must be in [0, %d), got %d", vocab_size, token));
    }
    const bool ban = std::isinf(bias) && bias < 0.0f;
    if (!ban && !(bias >= -kMaxAbsLogitBias && bias <= kMaxAbsLogitBias)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("logit_bias[%d] must be in [-100, 100] or -inf, got %g", token, bias));
    }
  }
  if (n_logprobs < 0 || n_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n_logprobs must be in [0, %d], got %d", kMaxLogprobs, n_logprobs));
  }
  return absl::OkStatus();
}

}  // namespace stepserve
