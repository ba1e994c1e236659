// Helpers for the GPU matmul / embed / MoE tests: random GGUF weights on the host (the CPU
// backend's operand) and the relative error every comparison uses.
#ifndef STEPSERVE_TESTS_GPU_WEIGHT_TEST_UTIL_H_
#define STEPSERVE_TESTS_GPU_WEIGHT_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/base/check.h"
#include "engine/quant/ggml_type.h"
#include "engine/quant/quant.h"

namespace stepserve::gpu_testing {

// A packed host weight of `type`, ne = [in, out, experts], random valid blocks.
struct HostWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
};

inline HostWeight RandomHostWeight(GgmlType type, int64_t in, int64_t out, int64_t experts,
                                   uint64_t seed, float rms) {
  HostWeight w;
  const int64_t row_bytes = RowBytes(type, in);
  STEPSERVE_CHECK(row_bytes > 0);
  const int64_t rows = out * experts;
  w.bytes.resize(static_cast<size_t>(row_bytes * rows));
  const int64_t blocks = rows * (in / TypeInfo(type).block_elems);
  STEPSERVE_CHECK(quant::FillRandomBlocks(type, w.bytes.data(), blocks, seed, rms).ok());
  w.view.data = w.bytes.data();
  w.view.type = type;
  w.view.ne[0] = in;
  w.view.ne[1] = out;
  w.view.ne[2] = experts;
  return w;
}

inline std::vector<float> RandomNormal(size_t n, std::mt19937_64& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// ||got - want|| / ||want||; NaN anywhere in `got` gives NaN (which fails every bound).
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  STEPSERVE_CHECK(got.size() == want.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace stepserve::gpu_testing

#endif  // STEPSERVE_TESTS_GPU_WEIGHT_TEST_UTIL_H_
