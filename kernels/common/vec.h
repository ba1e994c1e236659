// Small float vector loops shared by the optimised CPU kernels. Written with independent partial
// sums in fixed-width groups so GCC vectorises them at -O2 without -ffast-math (a single running
// float sum is a serial dependency the compiler may not reorder).
#ifndef STEPSERVE_KERNELS_COMMON_VEC_H_
#define STEPSERVE_KERNELS_COMMON_VEC_H_

#include <cstdint>

namespace stepserve::kernels {

inline float VecDot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int l = 0; l < kLanes / 2; ++l) acc[l] += acc[l + kLanes / 2];
  for (int l = 0; l < kLanes / 4; ++l) acc[l] += acc[l + kLanes / 4];
  return (acc[0] + acc[2]) + (acc[1] + acc[3]) + tail;
}

inline float VecSumSquares(const float* a, int64_t n) { return VecDot(a, a, n); }

// y += alpha * x
inline void VecAxpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void VecScale(float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_VEC_H_
