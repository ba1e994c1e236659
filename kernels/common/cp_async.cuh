// Asynchronous global -> shared copies (cp.async, sm_80+), shared by the kernels that stage
// weights or K/V tiles in shared memory (the tensor-core GEMV / GEMM, the prefill attention).
#ifndef STEPSERVE_KERNELS_COMMON_CP_ASYNC_CUH_
#define STEPSERVE_KERNELS_COMMON_CP_ASYNC_CUH_

#include <cstdint>

namespace stepserve::kernels {

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes, both addresses 16-byte aligned; cached in L2 only (.cg).
__device__ __forceinline__ void CopyAsync16(void* smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SharedAddress(smem)), "l"(global)
               : "memory");
}
// 8 bytes, both addresses 8-byte aligned (.ca: the only cp.async form below 16 bytes); for the
// 136-byte IQ4_XS blocks, which are 8-byte aligned in a row.
__device__ __forceinline__ void CopyAsync8(void* smem, const void* global) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(SharedAddress(smem)), "l"(global)
               : "memory");
}
__device__ __forceinline__ void CommitCopies() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most the most recently committed group of this thread's copies is in flight.
__device__ __forceinline__ void WaitCopiesButOne() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_COMMON_CP_ASYNC_CUH_
