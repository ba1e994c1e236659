// RMSNorm, spec 4.2: y = x / sqrt(mean(x^2) + eps) * weight, applied to each `n`-vector.
// The input is `rows` rows (row stride in floats), each holding `heads` consecutive vectors of
// `n` elements: heads = 1 is the plain per-token norm (n = n_embd); heads = H with n = Dh is the
// per-head q/k norm with one shared [Dh] weight. y may alias x (in place) with equal strides.
#ifndef STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_H_
#define STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

struct RmsNormArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;  // floats between rows, >= heads * n
  float* y = nullptr;
  int64_t y_stride = 0;
  int64_t rows = 0;
  int64_t heads = 1;
  int64_t n = 0;
  const float* weight = nullptr;  // [n]
  float eps = 1e-5f;
};

KernelStatus ValidateRmsNorm(const RmsNormArgs& args);
KernelStatus RmsNormRef(const RmsNormArgs& args);  // double accumulation
KernelStatus RmsNormCpu(const RmsNormArgs& args, ThreadPool* pool);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_H_
