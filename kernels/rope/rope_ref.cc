// Scalar reference for partial NeoX RoPE: the spec's formula with a double-precision angle.
#include <cmath>

#include "kernels/rope/rope.h"

namespace stepserve::kernels {

KernelStatus ValidateRope(const RopeArgs& a) {
  if (a.x == nullptr || a.positions == nullptr) return KernelStatus::kInvalidArgument;
  if (a.tokens < 0 || a.heads <= 0 || a.head_dim <= 0) return KernelStatus::kInvalidArgument;
  if (a.n_rot < 2 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.n_rot > kMaxRopeDims) return KernelStatus::kTooLarge;
  if (a.x_stride < a.heads * a.head_dim || !(a.base > 0.0f)) return KernelStatus::kInvalidArgument;
  for (int64_t t = 0; t < a.tokens; ++t) {
    if (a.positions[t] < 0) return KernelStatus::kOutOfRange;
  }
  return KernelStatus::kOk;
}

KernelStatus RopeNeoxRef(const RopeArgs& a) {
  if (KernelStatus s = ValidateRope(a); s != KernelStatus::kOk) return s;
  const int64_t half = a.n_rot / 2;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const double p = a.positions[t];
    for (int64_t h = 0; h < a.heads; ++h) {
      float* x = a.x + t * a.x_stride + h * a.head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const double ff = a.freq_factors != nullptr ? a.freq_factors[j] : 1.0;
        const double phi =
            p * std::pow(static_cast<double>(a.base), -2.0 * j / static_cast<double>(a.n_rot)) / ff;
        const double x0 = x[j];
        const double x1 = x[j + half];
        x[j] = static_cast<float>(x0 * std::cos(phi) - x1 * std::sin(phi));
        x[j + half] = static_cast<float>(x0 * std::sin(phi) + x1 * std::cos(phi));
      }
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
