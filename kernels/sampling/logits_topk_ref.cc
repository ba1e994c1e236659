// Plain CPU reference for the logits row reductions (logits_topk.h): float comparisons written out
// (no bit tricks, unlike the CUDA kernel), std::partial_sort, double log-sum-exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/sampling/logits_topk.h"

namespace stepserve::kernels {

KernelStatus ValidateLogitsTopK(const LogitsTopKArgs& a) {
  if (a.logits == nullptr || a.rows < 0 || a.vocab < 1 || a.row_stride < a.vocab || a.k < 1) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.vocab >= std::numeric_limits<int32_t>::max() || a.k > kLogitsTopKMaxK) {
    return KernelStatus::kTooLarge;
  }
  return KernelStatus::kOk;
}

KernelStatus LogitsTopKRef(const LogitsTopKArgs& a) {
  if (KernelStatus s = ValidateLogitsTopK(a); s != KernelStatus::kOk) return s;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int32_t vocab = static_cast<int32_t>(a.vocab);
  const int32_t count = std::min<int32_t>(a.k, vocab);
  std::vector<int32_t> order(vocab);
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* row = a.logits + r * a.row_stride;

    // Argmax with the engine's rule: strict > from -inf keeps the first of equal values and never
    // takes NaN; 0 when nothing exceeds -inf.
    int32_t best = 0;
    float best_value = kNegInf;
    for (int32_t i = 0; i < vocab; ++i) {
      if (row[i] > best_value) {
        best_value = row[i];
        best = i;
      }
    }
    const float max = row[best] > kNegInf ? row[best] : kNegInf;
    if (a.argmax != nullptr) a.argmax[r] = best;
    if (a.row_max != nullptr) a.row_max[r] = max;

    if (a.log_sum_exp != nullptr) {
      double lse;
      if (max == kNegInf) {
        lse = -std::numeric_limits<double>::infinity();
      } else if (std::isinf(max)) {
        lse = std::numeric_limits<double>::infinity();
      } else {
        double sum = 0.0;
        for (int32_t i = 0; i < vocab; ++i) {
          if (std::isnan(row[i])) continue;
          sum += std::exp(static_cast<double>(row[i]) - static_cast<double>(max));
        }
        lse = static_cast<double>(max) + std::log(sum);
      }
      a.log_sum_exp[r] = static_cast<float>(lse);
    }

    if (a.top_ids == nullptr && a.top_logits == nullptr) continue;
    // a ranks before b: numbers before NaN, larger value first, then lower id.
    auto before = [row](int32_t x, int32_t y) {
      const bool x_nan = std::isnan(row[x]);
      const bool y_nan = std::isnan(row[y]);
      if (x_nan != y_nan) return y_nan;
      if (!x_nan && row[x] != row[y]) return row[x] > row[y];
      return x < y;
    };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + count, order.end(), before);
    for (int32_t j = 0; j < count; ++j) {
      if (a.top_ids != nullptr) a.top_ids[r * a.k + j] = order[j];
      if (a.top_logits != nullptr) a.top_logits[r * a.k + j] = row[order[j]];
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
