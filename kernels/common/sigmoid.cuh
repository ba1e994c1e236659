// The logistic function of the CUDA kernels that gate with it (the attention head gate in
// elementwise_cuda.cu and in the split-K combine of paged_attention_cuda.cu): one definition, so
// the fused and unfused paths compute the same floats. Include from .cu files only.
#ifndef STEPSERVE_KERNELS_COMMON_SIGMOID_CUH_
#define STEPSERVE_KERNELS_COMMON_SIGMOID_CUH_

namespace stepserve::kernels {

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_SIGMOID_CUH_
