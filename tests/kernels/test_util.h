// Helpers shared by the kernel tests: seeded random data, NaN poisoning, relative error.
#ifndef STEPSERVE_TESTS_KERNELS_TEST_UTIL_H_
#define STEPSERVE_TESTS_KERNELS_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace stepserve::kernels::testing {

inline std::vector<float> RandomVector(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> Poisoned(int64_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// ||out - ref|| / ||ref||; NaN anywhere in out gives +inf so the bound check fails.
inline double RelError(const std::vector<float>& out, const std::vector<float>& ref) {
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    diff += (double{out[i]} - ref[i]) * (double{out[i]} - ref[i]);
    norm += double{ref[i]} * ref[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

}  // namespace stepserve::kernels::testing

#endif  // STEPSERVE_TESTS_KERNELS_TEST_UTIL_H_
