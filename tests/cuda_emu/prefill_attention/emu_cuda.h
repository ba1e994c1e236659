// Host emulation of the CUDA features prefill_attention_cuda.cu (and the q/k norm + RoPE + KV
// append kernels, tests/cuda_emu/rope_append) use: a CTA's "threads" (emu::threads, up to 256) as
// ucontext coroutines in one OS thread; warp collectives (shfl, redux, ldmatrix, mma, __syncwarp)
// and __syncthreads execute once every participant has arrived. Verification harness only.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "engine/quant/float16.h"

#define __launch_bounds__(...)
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
struct EmuDim {
  unsigned x = 0, y = 0, z = 0;
};
extern EmuDim threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
constexpr int kMaxThreads = 256;
extern int threads;  // of the CTA RunCta runs (a multiple of 32, up to kMaxThreads; default 128)
extern uint8_t* smem_base;
extern size_t smem_bytes;
extern bool copy_at_issue;  // cp.async performed at issue (early) or at the wait (late)
void Fail(const char* what);
uint32_t SharedOffset(const void* p);
void CopyAsync16(void* smem, const void* global);
void Commit();
void WaitButOne();
void LdMatrix(uint32_t addr, uint32_t (&r)[4], bool trans);
void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
float ShflXor(float v, int mask);
float ShflIdx(float v, int src_lane);
int ReduceMin(int v);
int ReduceMax(int v);
void SyncThreads();
void SyncWarp();
// Runs every CTA of the grid (blockIdx.y outer, or shuffled), block.x coroutine threads each
// (emu::threads), the shared memory at smem_base (smem bytes) poisoned with 0xFF before each;
// `ctas` counts them and `order_seed` varies the thread interleaving from CTA to CTA.
extern uint32_t order_seed;
extern int64_t ctas;
// CTAs in a shuffled order (seeded by order_seed) instead of blockIdx.y-major: a kernel whose
// CTAs meet at an arrival counter then sees any of them arrive last.
extern bool shuffle_ctas;
void RunGrid(dim3 grid, dim3 block, size_t smem, const std::function<void()>& kernel);
}  // namespace emu

inline float __shfl_xor_sync(unsigned, float v, int m) { return emu::ShflXor(v, m); }
inline float __shfl_sync(unsigned, float v, int src) { return emu::ShflIdx(v, src); }
inline int __reduce_min_sync(unsigned, int v) { return emu::ReduceMin(v); }
inline int __reduce_max_sync(unsigned, int v) { return emu::ReduceMax(v); }
inline void __syncthreads() { emu::SyncThreads(); }
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { emu::SyncWarp(); }
inline size_t __cvta_generic_to_shared(const void* p) { return emu::SharedOffset(p); }
