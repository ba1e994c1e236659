// Optimised partial NeoX RoPE with llama.cpp's F32 angle evaluation (spec 4.4 step 3), so the
// rotated values match llama.cpp's CPU path rather than an exact-arithmetic angle.
#include <cmath>

#include "kernels/rope/rope.h"

namespace stepserve::kernels {

KernelStatus RopeNeoxCpu(const RopeArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateRope(a); s != KernelStatus::kOk) return s;
  const int64_t half = a.n_rot / 2;
  const float tau = std::pow(a.base, -2.0f / static_cast<float>(a.n_rot));  // F32 powf
  auto body = [&](int64_t begin, int64_t end) {
    float cos_table[kMaxRopeDims / 2];
    float sin_table[kMaxRopeDims / 2];
    for (int64_t t = begin; t < end; ++t) {
      float theta = static_cast<float>(a.positions[t]);  // p * tau^j, running product
      for (int64_t j = 0; j < half; ++j) {
        const float phi = a.freq_factors != nullptr ? theta / a.freq_factors[j] : theta;
        cos_table[j] = std::cos(phi);
        sin_table[j] = std::sin(phi);
        theta *= tau;
      }
      for (int64_t h = 0; h < a.heads; ++h) {
        float* x0 = a.x + t * a.x_stride + h * a.head_dim;
        float* x1 = x0 + half;
        for (int64_t j = 0; j < half; ++j) {
          const float v0 = x0[j];
          const float v1 = x1[j];
          x0[j] = v0 * cos_table[j] - v1 * sin_table[j];
          x1[j] = v0 * sin_table[j] + v1 * cos_table[j];
        }
      }
    }
  };
  if (pool == nullptr || a.tokens * a.heads * a.n_rot < (1 << 15)) {
    body(0, a.tokens);
  } else {
    pool->ParallelFor(a.tokens, 4, body);
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
