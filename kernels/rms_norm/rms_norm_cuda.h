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

// The residual update fused with the next norm: x += add (rows of `n`, add rows `add_stride`
// floats apart), then y = RMSNorm(x) - one kernel instead of AddCuda + RmsNormCuda, with the same
// float sums written back to x. `x` is args.x, writable; heads must be 1; add must not alias y.
// Only the float4 block kernel takes it: AddRmsNormCudaSupports says whether the shapes allow that
// (heads 1, 1024 < n <= 32768, n and strides multiples of 4, 16-byte aligned rows and weight);
// otherwise the caller runs the two ops (AddRmsNormCuda: kInvalidArgument, nothing enqueued).
// With `q8` (RmsNormQ8CudaSupports must hold too) y is also written in int8 form (below).
struct RmsNormQ8Outputs;
bool AddRmsNormCudaSupports(const RmsNormArgs& args, const float* add, int64_t add_stride);
KernelStatus AddRmsNormCuda(const RmsNormArgs& args, float* x, const float* add, int64_t add_stride,
                            cudaStream_t stream, const RmsNormQ8Outputs* q8 = nullptr);

// The norm's output also as the GEMV's int8 activations (the kQ8 scratch of
// kernels/matmul/matmul_cuda.h: `rows` rows of n int8 values, then each row's per-32 {d, d * sum}
// at the GEMV's scales offset), byte for byte what the GEMV's own quantizer would write, in
// natural order (`natural`) and in IQ4_XS's pair order (`pair`, Q8ScratchPosition); each area
// holds GemvCudaScratchBytes(n, rows) bytes, 16-byte aligned. Why: the GEMV that reads a norm's
// output then skips its quantizer kernel (x_prequantized), a launch of ~2.4 us at decode.
// RmsNormQ8CudaSupports: what AddRmsNormCudaSupports takes (for RmsNormQ8Cuda without the add)
// with n % 32 == 0 and 1..kRmsNormQ8MaxRows rows (the GEMV's activation rows).
inline constexpr int64_t kRmsNormQ8MaxRows = 16;
struct RmsNormQ8Outputs {
  void* natural = nullptr;
  void* pair = nullptr;
};
bool RmsNormQ8CudaSupports(const RmsNormArgs& args);
KernelStatus RmsNormQ8Cuda(const RmsNormArgs& args, const RmsNormQ8Outputs& q8,
                           cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_RMS_NORM_RMS_NORM_CUDA_H_
