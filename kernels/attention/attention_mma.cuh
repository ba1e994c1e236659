// The warp-level tensor-core operations of the attention kernels (the prefill kernel,
// prefill_attention_cuda.cu, and the decode one, paged_attention_cuda_mma.cuh; include from .cu
// files only): F16 packing, ldmatrix and mma.sync.m16n8k16 with F32 accumulators. Kept apart so
// the host emulations (tests/cuda_emu/prefill_attention, paged_attention) swap exactly these
// inline-asm wrappers for emulated ones (emu_mma_wrappers.py).
#ifndef STEPSERVE_KERNELS_ATTENTION_ATTENTION_MMA_CUH_
#define STEPSERVE_KERNELS_ATTENTION_ATTENTION_MMA_CUH_

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace stepserve::kernels::attention_mma {

// Two floats as one .b32 register of F16 (round to nearest even), `lo` in the low 16 bits.
__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &h, sizeof(r));
  return r;
}

// ldmatrix m8n8 x4 (b16): lanes 8i..8i+7 give the shared-memory row addresses of matrix i; the
// lane gets, of matrix i, row gid, elements 2tig and 2tig+1 (.trans: rows 2tig and 2tig+1 of
// column gid) in r[i].
__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += A B: A 16 x 16 F16 (row-major fragments a), B 16 x 8 F16 ("col": b0, b1), F32 c.
// Fragment layouts (PTX ISA, lane = 4 * gid + tig): a0 = (row gid, cols 2tig, 2tig+1),
// a1 = (row gid+8, same cols), a2 = (row gid, cols 2tig+8, 2tig+9), a3 = (row gid+8, those);
// b0 = (rows 2tig, 2tig+1; col gid), b1 = (rows 2tig+8, 2tig+9; col gid); c0, c1 = (row gid,
// cols 2tig, 2tig+1), c2, c3 = (row gid+8, same cols). The lower index in the low 16 bits.
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace stepserve::kernels::attention_mma

#endif  // STEPSERVE_KERNELS_ATTENTION_ATTENTION_MMA_CUH_
