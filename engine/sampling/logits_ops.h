// Small row operations shared by the sampler, the batched entry points and speculative
// verification: argmax with a fixed tie rule, the log-softmax normaliser in one pass, top-n
// selection for logprobs, and the inverse-CDF draw.
#ifndef STEPSERVE_ENGINE_SAMPLING_LOGITS_OPS_H_
#define STEPSERVE_ENGINE_SAMPLING_LOGITS_OPS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace stepserve {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

// Index of the largest entry; ties go to the lowest index so CPU and GPU agree. NaN never wins.
// Returns 0 when no entry exceeds -inf and -1 for an empty row.
int32_t Argmax(std::span<const float> row);

// Argmax of each row of a row-major [rows, vocab] matrix; rows = out.size().
absl::Status ArgmaxRows(std::span<const float> logits, int vocab, std::span<int32_t> out);

// log(sum_i exp(row[i])) computed in one pass with a running maximum (online softmax).
// -inf entries contribute nothing; returns -inf when every entry is -inf.
double LogSumExp(std::span<const float> row);

// The n largest entries as (index, row[index] - log_norm), largest first, ties to the lower index.
// Writes min(n, row.size()) entries to out and returns that count. One pass, no allocation.
int TopLogprobs(std::span<const float> row, double log_norm, int n, TokenLogprob* out);

// Inverse CDF over non-negative weights in ascending index order: the first index whose running
// sum exceeds u * total (u in [0, 1), total = the weights' sum, computed by the caller in the same
// order). Rounding can leave the target unreached; the last positive weight is returned then.
// Returns -1 when no weight is positive.
int32_t InverseCdf(std::span<const float> weights, double total, double u);

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_SAMPLING_LOGITS_OPS_H_
