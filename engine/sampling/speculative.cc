#include "engine/sampling/speculative.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "engine/sampling/counter_rng.h"
#include "engine/sampling/logits_ops.h"

namespace stepserve {
namespace {

absl::Status CheckShapes(size_t rows_size, int vocab, std::span<const int32_t> drafts,
                         const char* rows_name) {
  if (vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("vocab must be positive, got %d", vocab));
  }
  const size_t expected = (drafts.size() + 1) * static_cast<size_t>(vocab);
  if (rows_size != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d entries, expected (k + 1) * vocab = (%d + 1) * %d", rows_name,
                        rows_size, drafts.size(), vocab));
  }
  for (size_t j = 0; j < drafts.size(); ++j) {
    if (drafts[j] < 0 || drafts[j] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("drafts[%d] = %d is not a token id in [0, %d)", j, drafts[j], vocab));
    }
  }
  return absl::OkStatus();
}

// Inverse CDF over max(0, p - q) (q null: one-hot at `draft`), ascending id, without a buffer.
int32_t SampleResidual(const float* p, const float* q, int32_t draft, int vocab, double u) {
  auto residual = [&](int32_t i) -> double {
    const double qi = q != nullptr ? q[i] : (i == draft ? 1.0 : 0.0);
    return std::max(0.0, static_cast<double>(p[i]) - qi);
  };
  double total = 0.0;
  for (int32_t i = 0; i < vocab; ++i) total += residual(i);
  if (!(total > 0.0)) {
    // Only reachable through rounding (a rejection needs p(d) < q(d), hence mass elsewhere);
    // p itself is then the exact residual up to that rounding.
    return InverseCdf(std::span<const float>(p, vocab), 1.0, u);
  }
  const double target = u * total;
  double running = 0.0;
  int32_t last = -1;
  for (int32_t i = 0; i < vocab; ++i) {
    const double r = residual(i);
    if (!(r > 0.0)) continue;
    running += r;
    last = i;
    if (running > target) return i;
  }
  return last;
}

}  // namespace

absl::StatusOr<VerifyOutcome> VerifyGreedy(std::span<const float> target_logits, int vocab,
                                           std::span<const int32_t> drafts) {
  if (absl::Status s = CheckShapes(target_logits.size(), vocab, drafts, "target_logits"); !s.ok()) {
    return s;
  }
  VerifyOutcome outcome;
  const int32_t k = static_cast<int32_t>(drafts.size());
  for (int32_t j = 0; j <= k; ++j) {
    const int32_t choice = Argmax(target_logits.subspan(size_t(j) * vocab, vocab));
    if (j == k || choice != drafts[j]) {
      outcome.accepted = j;
      outcome.token = choice;
      break;
    }
  }
  return outcome;
}

absl::StatusOr<VerifyOutcome> VerifySampled(std::span<const float> target_probs,
                                            std::span<const float> draft_probs, int vocab,
                                            std::span<const int32_t> drafts, uint64_t seed,
                                            uint64_t first_index) {
  if (absl::Status s = CheckShapes(target_probs.size(), vocab, drafts, "target_probs"); !s.ok()) {
    return s;
  }
  const size_t k = drafts.size();
  if (!draft_probs.empty() && draft_probs.size() != k * static_cast<size_t>(vocab)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("draft_probs has %d entries, expected empty (argmax drafts) or k * vocab "
                        "= %d * %d",
                        draft_probs.size(), k, vocab));
  }
  VerifyOutcome outcome;
  for (size_t j = 0; j < k; ++j) {
    const float* p = target_probs.data() + j * vocab;
    const float* q = draft_probs.empty() ? nullptr : draft_probs.data() + j * vocab;
    const int32_t d = drafts[j];
    const double q_d = q != nullptr ? q[d] : 1.0;
    if (!(q_d > 0.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "draft_probs row %d gives its own draft token %d probability %g; the draft cannot have "
          "been drawn from it",
          j, d, q_d));
    }
    const double u = CounterUniform(seed, first_index + j, RngStream::kAccept);
    if (u < std::min(1.0, static_cast<double>(p[d]) / q_d)) continue;  // accepted
    outcome.accepted = static_cast<int32_t>(j);
    outcome.token =
        SampleResidual(p, q, d, vocab, CounterUniform(seed, first_index + j, RngStream::kResidual));
    return outcome;
  }
  const std::span<const float> last = target_probs.subspan(k * vocab, vocab);
  double total = 0.0;
  for (float v : last) total += std::max(0.0f, v);
  outcome.accepted = static_cast<int32_t>(k);
  outcome.token =
      InverseCdf(last, total, CounterUniform(seed, first_index + k, RngStream::kSample));
  if (outcome.token < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target_probs row %d has no positive probability", k));
  }
  return outcome;
}

absl::StatusOr<int> VerifyWithSampler(Sampler& sampler, std::span<const float> target_logits,
                                      std::span<const int32_t> drafts,
                                      std::span<SampleResult> out) {
  const int vocab = sampler.vocab_size();
  if (absl::Status s = CheckShapes(target_logits.size(), vocab, drafts, "target_logits"); !s.ok()) {
    return s;
  }
  if (out.size() < drafts.size() + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "out has room for %d results, expected k + 1 = %d", out.size(), drafts.size() + 1));
  }
  const size_t k = drafts.size();
  for (size_t j = 0; j <= k; ++j) {
    absl::StatusOr<SampleResult> result = sampler.Sample(target_logits.subspan(j * vocab, vocab));
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrFormat("verification row %d: %s", j, result.status().message()));
    }
    out[j] = *result;
    if (j == k || result->token != drafts[j]) return static_cast<int>(j + 1);
  }
  return static_cast<int>(k + 1);  // not reached: row k always returns
}

}  // namespace stepserve
