// Optimised RMSNorm: vectorised float sum of squares, threads over rows for prefill batches.
#include <cmath>

#include "kernels/common/vec.h"
#include "kernels/rms_norm/rms_norm.h"

namespace stepserve::kernels {

KernelStatus RmsNormCpu(const RmsNormArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateRmsNorm(a); s != KernelStatus::kOk) return s;
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t h = 0; h < a.heads; ++h) {
        const float* x = a.x + r * a.x_stride + h * a.n;
        float* y = a.y + r * a.y_stride + h * a.n;
        const float mean = VecSumSquares(x, a.n) / static_cast<float>(a.n);
        const float inv = 1.0f / std::sqrt(mean + a.eps);
        for (int64_t i = 0; i < a.n; ++i) y[i] = x[i] * inv * a.weight[i];
      }
    }
  };
  // Rows are cheap (a few microseconds); threads only pay off for prefill-sized batches.
  if (pool == nullptr || a.rows * a.heads * a.n < (1 << 16)) {
    body(0, a.rows);
  } else {
    pool->ParallelFor(a.rows, 4, body);
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
