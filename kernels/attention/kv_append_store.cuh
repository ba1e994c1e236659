// Device pieces of the CUDA KV append (paged_attention_cuda.h), shared by KvAppendCuda's kernels
// and the fused q/k norm + RoPE + append (kv_append_rope_cuda.cu), so a cached value's bytes do
// not depend on which kernel wrote it.
#ifndef STEPSERVE_KERNELS_ATTENTION_KV_APPEND_STORE_CUH_
#define STEPSERVE_KERNELS_ATTENTION_KV_APPEND_STORE_CUH_

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/cuda_reduce.cuh"

namespace stepserve::kernels::kv_append {

// One F32 or F16 cache element (F16: round to nearest even, as F32ToF16).
__device__ __forceinline__ void Store(float* dst, float x) { *dst = x; }
__device__ __forceinline__ void Store(__half* dst, float x) { *dst = __float2half_rn(x); }

// One warp writes the 34-byte Q8_0 block `dst` (F16 scale d, 32 int8 q; 2-byte aligned) of the
// 32 values x, value `lane` in each lane, with the operations of engine/quant's QuantQ8_0 in its
// order, so the bytes equal the CPU append's.
__device__ __forceinline__ void StoreQ8Block(uint8_t* dst, float x, int lane) {
  // QuantQ8_0 step by step. Its amax starts at 0 and fmax skips NaN; fmaxf(0, |x|) per lane
  // keeps NaN out of the reduction the same way. The explicit _rn intrinsics pin IEEE division
  // and an unfused product whatever nvcc's flags.
  const float amax = cuda_reduce::WarpMax(fmaxf(0.0f, fabsf(x)));
  const __half d16 = __float2half_rn(__fdiv_rn(amax, 127.0f));
  // Divides by the stored (rounded) scale, as the CPU does.
  const float d = __half2float(d16);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  // rintf rounds half to even like std::nearbyint in the default rounding mode; fmaxf(-127, NaN)
  // is -127 as std::fmax is.
  const float q = fminf(127.0f, fmaxf(-127.0f, rintf(__fmul_rn(x, id))));
  dst[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
  if (lane == 0) *reinterpret_cast<uint16_t*>(dst) = __half_as_ushort(d16);  // 2-byte aligned
}

}  // namespace stepserve::kernels::kv_append

#endif  // STEPSERVE_KERNELS_ATTENTION_KV_APPEND_STORE_CUH_
