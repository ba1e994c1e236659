// SwiGluRowsF16Kernel: a prefill's MoE SwiGLU rows written straight as the down projection's F16
// activations (moe_gemv_cuda.cu, STEPSERVE_MOE_SWIGLU_F16). Device code, included inside the
// kernel file's namespace (after pdl.cuh, cuda_fp16.h and moe_decode_cuda.h: ExpertSwiGlu); its
// own file so the host emulation (tests/cuda_emu/grouped_gemm/test_swiglu_f16.cc) compiles it
// beside ConvertActivationsF16Kernel, whose halves it must reproduce.
#ifndef STEPSERVE_KERNELS_MATMUL_MOE_SWIGLU_F16_CUH_
#define STEPSERVE_KERNELS_MATMUL_MOE_SWIGLU_F16_CUH_

// SwiGluRowsKernel's values straight into the down projection's F16 activations (its grouped F16
// GEMM then skips ConvertActivationsF16Kernel, and the F32 rows are never written): one thread per
// 16-byte chunk c of a row, in that kernel's order - pair order (IQ4_XS: elements 4i..4i+3 and
// 16+4i..16+4i+3 of a 32-value block interleaved) or natural - with its saturation at +-65504 and
// round-to-nearest, so the same halves. Needs n_ff % 32 == 0 and 16-byte aligned g / u.
__global__ void __launch_bounds__(256)
    SwiGluRowsF16Kernel(const float* g, const float* u, int64_t rows, int64_t n_ff, float limit,
                        bool clamp, bool pair_order, __half* xh) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = n_ff / 8;
  if (t >= rows * per_row) return;
  const int64_t r = t / per_row, c = t - r * per_row;
  // Element offsets of the chunk's two float4 halves in the row.
  const int64_t k0 = pair_order ? (c >> 2) * 32 + 4 * (c & 3) : 8 * c;
  const int64_t k1 = pair_order ? k0 + 16 : k0 + 4;
  const float4 ga = *reinterpret_cast<const float4*>(g + r * n_ff + k0);
  const float4 gb = *reinterpret_cast<const float4*>(g + r * n_ff + k1);
  const float4 ua = *reinterpret_cast<const float4*>(u + r * n_ff + k0);
  const float4 ub = *reinterpret_cast<const float4*>(u + r * n_ff + k1);
  auto half_of = [&](float gv, float uv) {
    const float z = gemv_internal::ExpertSwiGlu(gv, uv, limit, clamp);
    return __float2half_rn(fminf(fmaxf(z, -65504.f), 65504.f));
  };
  const __half a[4] = {half_of(ga.x, ua.x), half_of(ga.y, ua.y), half_of(ga.z, ua.z),
                       half_of(ga.w, ua.w)};
  const __half b[4] = {half_of(gb.x, ub.x), half_of(gb.y, ub.y), half_of(gb.z, ub.z),
                       half_of(gb.w, ub.w)};
  __half2 out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // Pair order interleaves the halves (a0 b0 a1 b1 ..); natural order is a0..a3 b0..b3.
    out[j] = pair_order ? __halves2half2(a[j], b[j])
                        : (j < 2 ? __halves2half2(a[2 * j], a[2 * j + 1])
                                 : __halves2half2(b[2 * j - 4], b[2 * j - 3]));
  }
  *reinterpret_cast<uint4*>(xh + r * n_ff + 8 * c) = *reinterpret_cast<const uint4*>(out);
}

// rows x n_ff values of g and u (row-major, n_ff apart) -> xh (rows x n_ff halves).
inline cudaError_t LaunchSwiGluRowsF16(const float* g, const float* u, int64_t rows, int64_t n_ff,
                                       float limit, bool clamp, bool pair_order, __half* xh,
                                       cudaStream_t stream) {
  const int64_t chunks = rows * (n_ff / 8);
  return LaunchWithPdl(SwiGluRowsF16Kernel, static_cast<unsigned>((chunks + 255) / 256), 256, 0,
                       stream, g, u, rows, n_ff, limit, clamp, pair_order, xh);
}

#endif  // STEPSERVE_KERNELS_MATMUL_MOE_SWIGLU_F16_CUH_
