// Host emulation of the CUDA features the grouped GEMMs GemmMmaIq4XsGroupedKernel
// (gemm_grouped_mma_cuda.cu, 128 threads) and GemmF16Iq4XsGroupedKernel (gemm_grouped_f16_cuda.cu,
// 256 threads) use: a CTA's threads (the launch's blockDim, up to kMaxThreads) as ucontext
// coroutines in one OS thread; warp collectives (mma.sync s8 / f16) and __syncthreads / __syncwarp
// execute once every participant has arrived. cp.async copies (16 or 8 bytes) land at issue
// (copy_at_issue) or at the latest legal moment (the issuing thread's wait_group).
// Adapted from the prefill attention emulator (../prefill_attention). Verification harness only.
#pragma once
#include <cuda_runtime_api.h>
#include <ucontext.h>
#include <vector_functions.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "engine/quant/float16.h"

#undef __launch_bounds__
#define __launch_bounds__(...)
namespace emu {
// A global load's address must be aligned to its size (as the hardware requires) and, once a test
// turns check_global_loads on, lie inside a buffer given to AddGlobal.
void CheckGlobalLoad(const void* p, size_t bytes);
}  // namespace emu
template <class T>
inline T __ldg(const T* p) {
  emu::CheckGlobalLoad(p, sizeof(T));
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  emu::CheckGlobalLoad(p, sizeof(T));
  return *p;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
struct EmuDim {
  unsigned x = 0, y = 0, z = 0;
};
extern EmuDim threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
constexpr int kMaxThreads = 384;  // the F16 GEMMs' 8 warps, the wgmma one's 12
extern uint8_t* smem_base;
extern size_t smem_bytes;
extern bool copy_at_issue;  // cp.async performed at issue (early) or at the wait (late)
extern long long n_mma, n_copies, n_bar, n_exit_pending;
void Fail(const char* what);
uint32_t SharedOffset(const void* p);
void CopyAsync16(void* smem, const void* global);
void CopyAsync8(void* smem, const void* global);
void Commit();
void WaitGroup(int n);
void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int (&c)[4]);
void MmaF16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&c)[4]);
// wgmma.mma_async m64nNk16 F32 += F16 x F16 with A in registers (gemm_grouped_wgmma_cuda.cu),
// emulated per warp at issue: each warp's 16 rows need only its own A fragment and the shared B,
// read from shared memory through the descriptor (K-major, no swizzle: start, LBO = the K-direction
// core matrix offset, SBO = the N-direction one, in 16-byte units). acc: the lane's n / 2 floats.
void WgmmaF16(int n, float* acc, const uint32_t (&a)[4], uint64_t desc);
// F16 arithmetic as the PTX .rn f16 instructions: round to nearest even, subnormals kept.
// F16Round rounds an exact double (a sum or product of two F16 values is exact in double).
uint16_t F16Round(double x);
float F16Value(uint32_t r, int hi);  // the F16 in the low (hi 0) or high half of r
uint32_t SubF16x2(uint32_t a, uint32_t b);
uint32_t MulF16x2(uint32_t a, uint32_t b);
uint32_t FmaF16x2(uint32_t a, uint32_t b, uint32_t c);
uint16_t F16FromF32(float x);
void SyncThreads();
void SyncWarp();
// shfl.sync of kind 0 (bfly), 1 (idx) or 2 (down) among the lanes of `member` (each calls it with
// the same mask, kind and width; the offset too except for idx), in `width`-lane segments; kind 3
// is vote.ballot (the mask of member lanes with a non-zero value; arg 0, width 32).
uint32_t Shfl(uint32_t member, int kind, uint32_t v, int arg, int width);
// Global buffers cp.async may read (each 16-byte source must lie inside one).
void ClearGlobals();
void AddGlobal(const void* p, size_t bytes);
extern bool check_global_loads;
// An L2 prefetch (PrefetchL2): its address checked as a one-byte load (a real prefetch past a
// buffer is silently dropped, so only here would a wrong address show).
void Prefetch(const void* p);
}  // namespace emu

inline void __syncthreads() { emu::SyncThreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::SyncWarp(); }
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = emu::Shfl(mask, 0, bits, lane_mask, 32);
  std::memcpy(&v, &bits, 4);
  return v;
}
inline int __shfl_xor_sync(unsigned mask, int v, int lane_mask) {
  return static_cast<int>(emu::Shfl(mask, 0, static_cast<uint32_t>(v), lane_mask, 32));
}
inline int __shfl_sync(unsigned mask, int v, int src_lane, int width = 32) {
  return static_cast<int>(emu::Shfl(mask, 1, static_cast<uint32_t>(v), src_lane, width));
}
inline unsigned __shfl_down_sync(unsigned mask, unsigned v, unsigned delta, int width = 32) {
  return emu::Shfl(mask, 2, v, static_cast<int>(delta), width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return emu::Shfl(mask, 3, predicate != 0 ? 1u : 0u, 0, 32);
}
inline int __ffs(unsigned v) { return __builtin_ffs(static_cast<int>(v)); }
inline size_t __cvta_generic_to_shared(const void* p) { return emu::SharedOffset(p); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }

// prmt.b32 generic mode (what __byte_perm compiles to): selector nibble n of the low 16 bits of s;
// its 3 lsbs pick one of the 8 bytes {y, x}; its msb replicates the picked byte's sign (PTX ISA,
// prmt). The CUDA doc of __byte_perm only defines s<2:0> etc., so a set msb is flagged.
extern long long g_byte_perm_msb;
namespace emu {
inline unsigned Prmt(unsigned x, unsigned y, unsigned s, long long* msb_uses = nullptr) {
  const uint64_t v = (uint64_t(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n) {
    const unsigned ctl = (s >> (4 * n)) & 0xF;
    uint32_t b = (v >> (8 * (ctl & 7))) & 0xFF;
    if (ctl & 8) {
      if (msb_uses != nullptr) ++*msb_uses;
      b = (b & 0x80) ? 0xFF : 0x00;
    }
    r |= b << (8 * n);
  }
  return r;
}
}  // namespace emu
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  return emu::Prmt(x, y, s, &g_byte_perm_msb);
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 4; ++k) c += int(int8_t(a >> (8 * k))) * int(int8_t(b >> (8 * k)));
  return c;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh) {
  sh &= 31;
  const uint64_t v = (uint64_t(hi) << 32) | lo;
  return unsigned(v >> sh);
}
inline unsigned __vsub4(unsigned a, unsigned b) {
  unsigned r = 0;
  for (int k = 0; k < 4; ++k) r |= (((a >> (8 * k)) - (b >> (8 * k))) & 0xFF) << (8 * k);
  return r;
}

// For moe_decode_cuda.cu (test_moe_down.cc, test_moe_gate_up.cc).
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((uint64_t(a) * b) >> 32);
}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p += v;
  return old;
}
inline void __threadfence() {}
template <class T>
inline T __ldcg(const T* p) {
  emu::CheckGlobalLoad(p, sizeof(T));
  return *p;
}
inline float __expf(float x) { return std::exp(x); }
