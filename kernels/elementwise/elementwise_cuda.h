// The element-wise ops of elementwise.h (head gate, clamped SwiGLU, residual add) on a CUDA
// device: same argument structs and validation, every pointer in device memory, the work
// enqueued on `stream`. Outputs may alias inputs with equal strides (each element is read and
// written by the same thread). F32 arithmetic with the CPU kernels' formulas; sigmoid uses the
// device expf (within 2 ulp), so results match the CPU path to a few ulp.
#ifndef STEPSERVE_KERNELS_ELEMENTWISE_ELEMENTWISE_CUDA_H_
#define STEPSERVE_KERNELS_ELEMENTWISE_ELEMENTWISE_CUDA_H_

#include <cuda_runtime_api.h>

#include "kernels/common/kernel_status.h"
#include "kernels/elementwise/elementwise.h"

namespace stepserve::kernels {

// Each validates (Validate*), then enqueues; kInvalidArgument also when the launch fails (the
// CUDA error is cleared).
KernelStatus HeadGateCuda(const HeadGateArgs& args, cudaStream_t stream);
KernelStatus SwiGluCuda(const SwiGluArgs& args, cudaStream_t stream);
KernelStatus AddCuda(const AddArgs& args, cudaStream_t stream);

// Head gate / SwiGLU that also write their output as the GEMV's int8 activations in natural and
// IQ4_XS pair order (`natural`, `pair`: the layout of RmsNormQ8Outputs in rms_norm_cuda.h, the
// bytes the GEMV's quantizer would write), for fused quantization. Supported: 1..16 rows, an
// output width that is a multiple of 32, head_dim % 4 == 0, 16-byte aligned rows.
inline constexpr int64_t kElementwiseQ8MaxRows = 16;
bool HeadGateQ8CudaSupports(const HeadGateArgs& args);
bool SwiGluQ8CudaSupports(const SwiGluArgs& args);
KernelStatus HeadGateQ8Cuda(const HeadGateArgs& args, void* natural, void* pair,
                            cudaStream_t stream);
KernelStatus SwiGluQ8Cuda(const SwiGluArgs& args, void* natural, void* pair, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ELEMENTWISE_ELEMENTWISE_CUDA_H_
