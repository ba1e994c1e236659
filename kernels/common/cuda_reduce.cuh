// Warp and block reductions for the CUDA kernels (include from .cu files only). Every lane / thread
// gets the result, so callers need no extra broadcast. No atomics: the order of the additions is
// fixed by the launch shape, so results are reproducible run to run.
#ifndef STEPSERVE_KERNELS_COMMON_CUDA_REDUCE_CUH_
#define STEPSERVE_KERNELS_COMMON_CUDA_REDUCE_CUH_

namespace stepserve::kernels::cuda_reduce {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// Sum over the whole block. blockDim.x must be a multiple of 32 (at most 1024) and every thread
// must call it. `scratch` holds 32 floats of shared memory; it may be reused once this returns.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // an earlier call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

}  // namespace stepserve::kernels::cuda_reduce

#endif  // STEPSERVE_KERNELS_COMMON_CUDA_REDUCE_CUH_
