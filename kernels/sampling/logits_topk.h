// Row reductions of a logits matrix for decode steps: per row of a row-major F32 matrix
// [rows][vocab] (rows `row_stride` floats apart), the argmax, the maximum, the log-sum-exp and the
// K largest entries, so a step can download a few numbers per row instead of the whole row.
//
// Semantics (the same on every implementation; the CPU reference is logits_topk_ref.cc):
//  - Order: entries are ranked by value, largest first; equal values (also -0.0 and +0.0) rank by
//    the lower token id first; NaN ranks below every number, -inf included (NaNs among themselves
//    by lower id). This is a total order, so the top K is unique and implementations agree
//    exactly.
//  - argmax[r]: the lowest index holding the largest non-NaN value; 0 when no entry exceeds -inf
//    (all -inf and/or NaN). Same rule as engine/sampling/logits_ops.h Argmax.
//  - row_max[r]: logits[argmax[r]] when that exceeds -inf (so a -0.0 stays -0.0), else -inf.
//  - log_sum_exp[r]: log(sum over non-NaN x of exp(x)); NaN and -inf entries add nothing; -inf when
//    every entry is -inf or NaN; +inf when an entry is +inf. Written as float.
//  - top_ids[r * k + j], top_logits[r * k + j] for j < min(k, vocab): the j-th entry of the order
//    above and its logit, copied bit for bit (NaN payloads and -0.0 kept). When vocab < k the
//    tail j >= vocab of each row's k slots is left untouched. NaN entries appear only when fewer
//    than min(k, vocab) entries are non-NaN.
// Every output pointer may be null (that output is not computed); with top_ids and top_logits both
// null, implementations may skip the top-K work (argmax / row_max / log_sum_exp stay exact).
#ifndef STEPSERVE_KERNELS_SAMPLING_LOGITS_TOPK_H_
#define STEPSERVE_KERNELS_SAMPLING_LOGITS_TOPK_H_

#include <cstdint>

#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Largest k any implementation accepts (the GPU kernel sorts the k survivors in one CTA).
inline constexpr int32_t kLogitsTopKMaxK = 256;

struct LogitsTopKArgs {
  const float* logits = nullptr;  // [rows][row_stride], the first vocab floats of a row are read
  int64_t rows = 0;               // >= 0; 0 is a no-op
  int64_t vocab = 0;              // 1 .. INT32_MAX - 1
  int64_t row_stride = 0;         // floats between rows, >= vocab
  int32_t k = 1;                  // 1 .. kLogitsTopKMaxK; outputs hold k slots per row
  int32_t* top_ids = nullptr;     // [rows][k] or null
  float* top_logits = nullptr;    // [rows][k] or null
  int32_t* argmax = nullptr;      // [rows] or null
  float* row_max = nullptr;       // [rows] or null
  float* log_sum_exp = nullptr;   // [rows] or null
};

// kInvalidArgument: null logits, rows < 0, vocab < 1, row_stride < vocab, k < 1;
// kTooLarge: vocab >= INT32_MAX or k > kLogitsTopKMaxK.
KernelStatus ValidateLogitsTopK(const LogitsTopKArgs& args);

// The plain CPU reference: a partial sort per row with the comparator above, double-precision
// log-sum-exp (exp(double(x) - max) summed in double).
KernelStatus LogitsTopKRef(const LogitsTopKArgs& args);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_SAMPLING_LOGITS_TOPK_H_
