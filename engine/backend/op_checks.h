// Operand checks shared by every Backend implementation, so the CPU and CUDA backends reject bad
// shapes with the same precise messages ("RmsNorm: out is [4096, 3], expected [4096, 2]"). Host
// only: the checks read the views, never the memory behind them.
#ifndef STEPSERVE_ENGINE_BACKEND_OP_CHECKS_H_
#define STEPSERVE_ENGINE_BACKEND_OP_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"

namespace stepserve {

// `t` is a non-null F32 activation with a valid shape and row stride.
inline absl::Status CheckF32(const TensorView& t, const char* op, const char* operand) {
  if (t.data == nullptr)
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is null", op, operand));
  if (t.type != GgmlType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must be F32, is %s", op, operand, GgmlTypeName(t.type)));
  }
  if (t.ne[0] <= 0 || t.ne[1] < 0 || t.ne[2] < 1 || t.ne[3] < 1 ||
      (t.row_stride != 0 && (t.row_stride % 4 != 0 || t.row_stride < t.ne[0] * 4))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s has bad shape [%d, %d, %d, %d] / row stride %d", op, operand,
                        t.ne[0], t.ne[1], t.ne[2], t.ne[3], t.row_stride));
  }
  return absl::OkStatus();
}

// `t` is [cols, rows].
inline absl::Status CheckShape(const TensorView& t, int64_t cols, int64_t rows, const char* op,
                               const char* operand) {
  if (t.cols() != cols || t.rows() != rows) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is [%d, %d], expected [%d, %d]", op,
                                                      operand, t.cols(), t.rows(), cols, rows));
  }
  return absl::OkStatus();
}

// `w` is a non-null F32 vector of `n` (norm weights).
inline absl::Status CheckF32Weight(const WeightView& w, int64_t n, const char* op,
                                   const char* operand) {
  if (w.data == nullptr || w.type != GgmlType::kF32 || w.ne[0] != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must be an F32 vector of %d (is %s [%d])", op, operand, n,
                        GgmlTypeName(w.type), w.ne[0]));
  }
  return absl::OkStatus();
}

}  // namespace stepserve

#endif  // STEPSERVE_ENGINE_BACKEND_OP_CHECKS_H_
