# Builds <out>/kernels/... : host-compilable copies of the grouped GEMM kernels (int8:
# gemm_grouped_mma_cuda.cu, F16: gemm_grouped_f16_cuda.cu with gemm_f16_decoders.cuh) and their
# device headers, the inline-asm
# wrappers re-pointed at emu:: (everything else verbatim). Optional mutation:
#   transform.py OUT [FILE OLD NEW]   (FILE relative to kernels/, OLD replaced once, must exist)
import os, sys
M = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'kernels') + '/'
out = sys.argv[1]
files = ['matmul/gemm_grouped_mma_cuda.cu', 'matmul/gemm_grouped_f16_cuda.cu',
         'matmul/gemv_mma_cuda.cu', 'matmul/mma_iq4_staged.cuh',
         'matmul/gemm_f16_decoders.cuh', 'matmul/gemm_f16_decoders_grid.cuh',
         'matmul/mma_iq4_util.cuh', 'common/cp_async.cuh', 'common/arrival.cuh',
         'matmul/gemv_q8x_pieces.cuh', 'matmul/gemv_q8x_pieces_low_bit.cuh',
         'matmul/gemv_q8x_piece_q6k8.cuh',
         'matmul/gemv_q8x_rows.cuh',
         'matmul/gemv_q8x_grouped_cuda.cu',
         'matmul/gemv_q8x_cuda.cu', 'matmul/q8_quantize.cuh',
         'matmul/gemv_block_util.cuh', 'matmul/gemv_cuda_internal.h',
         'matmul/moe_decode_cuda.cu', 'matmul/moe_decode_cuda.h',
         'matmul/moe_down_lean.cuh', 'matmul/moe_two_rows.cuh', 'matmul/moe_swiglu_f16.cuh',
         'matmul/dequant_cuda.cu',
         'matmul/dequant_cuda.cuh', 'matmul/gemm_grouped_wgmma_cuda.cu']
def replace_fn(text, signature_start, new):
    i = text.index(signature_start)
    j = text.index('{', i)
    depth, k = 0, j
    while True:
        if text[k] == '{': depth += 1
        elif text[k] == '}':
            depth -= 1
            if depth == 0: break
        k += 1
    return text[:i] + new + text[k + 1:]
reps = {
 'matmul/mma_iq4_util.cuh': [
  ('__device__ __forceinline__ void MmaS8(', 'inline void MmaS8(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int c0, int (&c)[4]) { emu::MmaS8(a, b0, b1, c); for (int& v : c) v += c0; }'),
  ('__device__ __forceinline__ void MmaF16(', 'inline void MmaF16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, float (&c)[4]) { emu::MmaF16(a, b0, b1, c); }'),
 ],
 'common/cp_async.cuh': [
  ('__device__ __forceinline__ void CopyAsync16(', 'inline void CopyAsync16(void* smem, const void* global) { emu::CopyAsync16(smem, global); }'),
  ('__device__ __forceinline__ void CopyAsync8(', 'inline void CopyAsync8(void* smem, const void* global) { emu::CopyAsync8(smem, global); }'),
  ('__device__ __forceinline__ void CommitCopies(', 'inline void CommitCopies() { emu::Commit(); }'),
  ('__device__ __forceinline__ void WaitCopiesButOne(', 'inline void WaitCopiesButOne() { emu::WaitGroup(1); }'),
 ],
 'common/arrival.cuh': [
  ('__device__ __forceinline__ int ArriveRelease(', 'inline int ArriveRelease(int* counter, int amount = 1) { return atomicAdd(counter, amount); }'),
  ('__device__ __forceinline__ void AcquireAfterArrivals(', 'inline void AcquireAfterArrivals() {}'),
 ],
 'matmul/gemv_block_util.cuh': [
  ('__device__ __forceinline__ float F16Bits(', 'inline float F16Bits(uint32_t h) { return stepserve::F16ToF32(static_cast<unsigned short>(h)); }'),
 ],
 'matmul/gemv_q8x_pieces.cuh': [
  # A prefetch's address must lie in a registered buffer too (a real one past it is silently
  # dropped, so only here would a wrong address show).
  ('__device__ __forceinline__ void PrefetchL2(', 'inline void PrefetchL2(const void* p) { emu::Prefetch(p); }'),
  ('__device__ __forceinline__ uint32_t PrmtSignMode(', 'inline uint32_t PrmtSignMode(uint32_t a, uint32_t b, uint32_t s) { return emu::Prmt(a, b, s); }'),
 ],
 'matmul/gemm_grouped_mma_cuda.cu': [],
 'matmul/gemv_mma_cuda.cu': [],
 'matmul/mma_iq4_staged.cuh': [],
 'matmul/gemm_grouped_f16_cuda.cu': [],
 'matmul/gemm_f16_decoders.cuh': [
  ('__device__ __forceinline__ uint32_t FmaF16x2(', 'inline uint32_t FmaF16x2(uint32_t a, uint32_t b, uint32_t c) { return emu::FmaF16x2(a, b, c); }'),
  ('__device__ __forceinline__ uint32_t SubF16x2(', 'inline uint32_t SubF16x2(uint32_t a, uint32_t b) { return emu::SubF16x2(a, b); }'),
  ('__device__ __forceinline__ uint32_t MulF16x2(', 'inline uint32_t MulF16x2(uint32_t a, uint32_t b) { return emu::MulF16x2(a, b); }'),
  ('__device__ __forceinline__ uint16_t F16FromF32(', 'inline uint16_t F16FromF32(float x) { return emu::F16FromF32(x); }'),
 ],
 'matmul/gemv_cuda_internal.h': [],
 'matmul/gemv_q8x_rows.cuh': [],
 'matmul/gemv_q8x_pieces_low_bit.cuh': [],
 'matmul/gemv_q8x_piece_q6k8.cuh': [],
 'matmul/gemm_f16_decoders_grid.cuh': [],
 'matmul/gemv_q8x_grouped_cuda.cu': [],
 'matmul/gemv_q8x_cuda.cu': [],
 'matmul/q8_quantize.cuh': [],
 'matmul/moe_decode_cuda.cu': [],
 'matmul/moe_decode_cuda.h': [],
 'matmul/moe_down_lean.cuh': [],
 'matmul/moe_two_rows.cuh': [],
 'matmul/moe_swiglu_f16.cuh': [],
 'matmul/dequant_cuda.cu': [],
 'matmul/dequant_cuda.cuh': [],
 'matmul/gemm_grouped_wgmma_cuda.cu': [
  ('__device__ __forceinline__ void WgmmaFence(', 'inline void WgmmaFence() {}'),
  ('__device__ __forceinline__ void WgmmaCommit(', 'inline void WgmmaCommit() {}'),
  ('__device__ __forceinline__ void WgmmaWait(', 'inline void WgmmaWait() {}'),
  ('__device__ __forceinline__ void FenceProxyAsyncShared(', 'inline void FenceProxyAsyncShared() {}'),
 ],
}
mut = sys.argv[2:5] if len(sys.argv) >= 5 else None
# A mutation of a file the shadow does not copy would test the unmutated original (the real
# kernels/ tree is on the include path too): refuse it.
assert mut is None or mut[0] in files, 'not a shadowed file: ' + mut[0]
for f in files:
    s = open(M + f).read()
    for sig, new in reps[f]:
        s = replace_fn(s, sig, new)
    if f == 'matmul/gemm_grouped_wgmma_cuda.cu':
        old = 'extern __shared__ __align__(128) uint8_t wgmma_smem[];'
        assert s.count(old) == 1
        s = s.replace(old, 'uint8_t* const wgmma_smem = emu::smem_base;')
    elif f.startswith('matmul/gemm_grouped_'):
        old = 'extern __shared__ __align__(16) uint8_t gemm_smem[];'
        assert s.count(old) == 1
        s = s.replace(old, 'uint8_t* const gemm_smem = emu::smem_base;')
    if f == 'matmul/gemv_mma_cuda.cu':  # three kernels declare the dynamic area
        old = 'extern __shared__ __align__(16) uint8_t mma_smem[];'
        assert s.count(old) == 3
        s = s.replace(old, 'uint8_t* const mma_smem = emu::smem_base;')
    if f == 'matmul/moe_down_lean.cuh':  # static shared arrays: one copy for the CTA's threads
        assert s.count('__shared__ ') == 2
        s = s.replace('__shared__ ', 'static ')
    if f == 'matmul/moe_decode_cuda.cu':  # StoreAndQuantizeBlockCta's flag: one per CTA
        assert s.count('__shared__ ') == 1
        s = s.replace('__shared__ ', 'static ')
    if f == 'matmul/dequant_cuda.cu':  # the table and the staged blocks: one copy per CTA
        assert s.count('__shared__ ') == 2
        s = s.replace('__shared__ ', 'static ')
    if f == 'matmul/moe_decode_cuda.h':  # ExpertSwiGlu, compiled with the gate/up kernel
        assert s.count('#ifdef __CUDACC__') == 1
        s = s.replace('#ifdef __CUDACC__', '#if 1')
    if mut and mut[0] == f:
        assert s.count(mut[1]) >= 1, 'mutation target not found: ' + mut[1]
        s = s.replace(mut[1], mut[2], 1)
    assert 'asm(' not in s and 'asm volatile' not in s, f
    os.makedirs(os.path.dirname(f'{out}/kernels/{f}'), exist_ok=True)
    open(f'{out}/kernels/{f}', 'w').write(s)
# wgmma_f16_rs.cuh (inline asm per N): every N through emu::WgmmaF16.
open(f'{out}/kernels/matmul/wgmma_f16_rs.cuh', 'w').write(
    '#pragma once\n'
    'template <int N>\n'
    'struct WgmmaF16Rs {\n'
    '  template <int kTiles>\n'
    '  static void Run(float (&acc)[kTiles][4], const uint32_t (&a)[4], uint64_t desc) {\n'
    '    static_assert(kTiles * 8 >= N, "the accumulators cover N");\n'
    '    emu::WgmmaF16(N, &acc[0][0], a, desc);\n'
    '  }\n'
    '};\n')
# pdl.cuh: no-op PDL, and the launch runs every CTA through the emulator (emu_launch.h).
os.makedirs(f'{out}/kernels/common', exist_ok=True)
open(f'{out}/kernels/common/pdl.cuh', 'w').write('#pragma once\n#include "emu_launch.h"\n')
