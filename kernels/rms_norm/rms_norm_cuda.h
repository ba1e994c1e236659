// RMSNorm on a CUDA device: the contract of rms_norm.h (RmsNormArgs, ValidateRmsNorm) with x, y
// and weight in device memory and the work enqueued on `stream`. One (row, head) vector per warp
// when n is small (per-head norms), one per block otherwise; float sums of squares reduced across
// the warp / block (no atomics). y may alias x with equal strides (in place).
#ifndef STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_CUDA_H_
#define STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_CUDA_H_

#include <cuda_runtime_api.h>

#include "kernels/common/kernel_status.h"
#include "kernels/rms_norm/rms_norm.h"

namespace stepserve::kernels {

// Validates (ValidateRmsNorm), then enqueues. kInvalidArgument also when the launch fails (the
// CUDA error is cleared).
KernelStatus RmsNormCuda(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_CUDA_H_
