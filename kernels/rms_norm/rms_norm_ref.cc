// Scalar reference for RMSNorm: the formula with a double sum of squares.
#include <cmath>

#include "kernels/rms_norm/rms_norm.h"

namespace stepserve::kernels {

KernelStatus ValidateRmsNorm(const RmsNormArgs& a) {
  if (a.x == nullptr || a.y == nullptr || a.weight == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.rows < 0 || a.heads <= 0 || a.n <= 0 || !(a.eps >= 0.0f)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.x_stride < a.heads * a.n || a.y_stride < a.heads * a.n) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

KernelStatus RmsNormRef(const RmsNormArgs& a) {
  if (KernelStatus s = ValidateRmsNorm(a); s != KernelStatus::kOk) return s;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* x = a.x + r * a.x_stride + h * a.n;
      float* y = a.y + r * a.y_stride + h * a.n;
      double sum_sq = 0.0;
      for (int64_t i = 0; i < a.n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
      const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(a.n) + a.eps);
      for (int64_t i = 0; i < a.n; ++i) y[i] = static_cast<float>(x[i] * inv * a.weight[i]);
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
