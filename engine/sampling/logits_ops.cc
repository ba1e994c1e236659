#include "engine/sampling/logits_ops.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace stepserve {

int32_t Argmax(std::span<const float> row) {
  if (row.empty()) return -1;
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  const int32_t n = static_cast<int32_t>(row.size());
  for (int32_t i = 0; i < n; ++i) {
    // Strict > keeps the first of equal values and rejects NaN.
    if (row[i] > best_value) {
      best_value = row[i];
      best = i;
    }
  }
  return best;
}

absl::Status ArgmaxRows(std::span<const float> logits, int vocab, std::span<int32_t> out) {
  if (vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("vocab must be positive, got %d", vocab));
  }
  if (logits.size() != out.size() * static_cast<size_t>(vocab)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logits has %d entries, expected rows (%d) * vocab (%d)", logits.size(),
                        out.size(), vocab));
  }
  for (size_t r = 0; r < out.size(); ++r) {
    out[r] = Argmax(logits.subspan(r * vocab, vocab));
  }
  return absl::OkStatus();
}

double LogSumExp(std::span<const float> row) {
  // Float exp (the vocabulary-wide cost), double accumulation (the precision-relevant part).
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float max = kNegInf;
  double sum = 0.0;
  for (float x : row) {
    if (!(x > kNegInf)) continue;  // -inf (and NaN) add nothing
    if (x > max) {
      sum = sum * std::exp(static_cast<double>(max) - x) + 1.0;  // rare: the running max moves
      max = x;
    } else {
      sum += std::exp(x - max);
    }
  }
  return sum > 0.0 ? max + std::log(sum) : -std::numeric_limits<double>::infinity();
}

int TopLogprobs(std::span<const float> row, double log_norm, int n, TokenLogprob* out) {
  const int count = static_cast<int>(std::min<size_t>(n < 0 ? 0 : n, row.size()));
  if (count == 0) return 0;
  // out[0..filled) is kept sorted by (value desc, index asc); a new entry enters only when it
  // beats the current last, so after the first few entries the loop is a single compare.
  int filled = 0;
  const int32_t size = static_cast<int32_t>(row.size());
  for (int32_t i = 0; i < size; ++i) {
    const float x = row[i];
    if (std::isnan(x)) continue;
    if (filled == count && !(x > out[count - 1].logprob)) continue;
    int pos = filled < count ? filled++ : count - 1;
    // Shift smaller entries down; equal values stay ahead because they have lower indices.
    while (pos > 0 && out[pos - 1].logprob < x) {
      out[pos] = out[pos - 1];
      --pos;
    }
    out[pos] = TokenLogprob{i, x};
  }
  for (int i = 0; i < filled; ++i) {
    out[i].logprob = static_cast<float>(out[i].logprob - log_norm);
  }
  return filled;
}

int32_t InverseCdf(std::span<const float> weights, double total, double u) {
  const double target = u * total;
  double running = 0.0;
  int32_t last_positive = -1;
  const int32_t n = static_cast<int32_t>(weights.size());
  for (int32_t i = 0; i < n; ++i) {
    if (!(weights[i] > 0.0f)) continue;
    running += weights[i];
    last_positive = i;
    if (running > target) return i;
  }
  return last_positive;
}

}  // namespace stepserve
