// Shared between the GEMV .cu files (not a public header): the kernel parameter block and the
// per-path launchers. matmul_cuda.cu validates and dispatches; gemv_f32x_cuda.cu holds the exact
// F32-activation kernels, gemv_q8x_cuda.cu the int8-activation (dp4a) kernels and the activation
// quantizer, gemv_q8x_grouped_cuda.cu the grouped (MoE) dp4a GEMV. Split so they compile in
// parallel and each stays one job.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_CUDA_INTERNAL_H_
#define STEPSERVE_KERNELS_MATMUL_GEMV_CUDA_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels::gemv_internal {

inline constexpr int kWarpsPerBlock = 4;
inline constexpr int kThreads = 32 * kWarpsPerBlock;

// Quantized activations: for every activation row, `in` int8 values, then (after the int8 part of
// all rows, 16-byte aligned) one float2 {d, d * sum(q)} per 32 values. d = max|x| / 127. Within a
// 32-value block the values are in order, or in pair order for IQ4_XS (Q8ScratchPosition in
// matmul_cuda.h; GemvParams::x_pair_order).
inline constexpr int64_t kQ8BlockElems = 32;

inline int64_t Q8ScalesOffset(int64_t in, int64_t rows) { return (in * rows + 15) / 16 * 16; }

struct GemvParams {
  const uint8_t* w;
  int64_t w_row_bytes;
  int64_t in;
  int64_t out;
  const float* x;  // F32 activations (F32 path and quantizer input)
  int64_t x_stride;
  const int8_t* xq;  // int8 activations, row stride `in` (Q8 path)
  const float2* xd;  // {d, d * sum} per 32 activations, row stride in / 32 (Q8 path)
  int rows;
  bool x_pair_order;   // the quantizer writes, and the IQ4_XS piece reads, blocks in pair order
  const uint16_t* xh;  // F16 activations in pair order, row stride `in` (grouped F16 GEMM)
  float* y;
  int64_t y_stride;
  uint32_t iq4nl[4];  // kvalues_iq4nl as 16 int8 bytes, by value so no device-global state
  // The grids of the i-quant pieces (gemv_q8x_pieces_low_bit.cuh): device copies from
  // DeviceDequantTables, set by MakeGemvParams for those types only.
  const uint64_t* iq2xxs_grid;
  const uint64_t* iq2xs_grid;
  const uint64_t* iq2s_grid;
  const uint32_t* iq3xxs_grid;
  const uint32_t* iq3s_grid;
  // Indexed mode (MoE experts), on when `matrix_ids` is set; rows must be 1. Grid y = groups:
  // group g multiplies weight matrix matrix_ids[g] (w + id * w_matrix_bytes) with activation row
  // g / x_group_div and writes output row g. An id outside [0, n_matrices) writes zeros.
  const int32_t* matrix_ids;
  int64_t w_matrix_bytes;
  int64_t n_matrices;
  int x_group_div;
  // Grouped mode (slot_matrix set): grid y = slots; slot s multiplies matrix slot_matrix[s] with
  // the activation rows g / x_group_div of the groups g = group_order[slot_begin[s] ..
  // slot_begin[s + 1]) and writes their output rows g, streaming the matrix once per few groups.
  // slot_matrix -1: the slot's ids were out of range (zero rows); kSlotUnused: nothing.
  const int32_t* slot_matrix;
  const int32_t* slot_begin;
  const int32_t* group_order;
  // Grouped mode, a second set of matrices of the same type and shape (the MoE up projection beside
  // the gate; GemvIndexedCudaArgs::w2): grid y is then 2 x w2_first_slot, slots w2_first_slot and
  // up multiply w2's matrices and write output rows g + y2_row_offset.
  const uint8_t* w2;
  int64_t y2_row_offset;
  int w2_first_slot;
};

inline constexpr int32_t kSlotUnused = -2;

// The parameter block every entry point starts from: weights, activations (x_pair_order for
// IQ4_XS), outputs, the IQ4_NL table and, for the 2-3 bit i-quants, this device's grid tables
// (DeviceDequantTables: the first call for a device synchronizes it once); the other fields zero
// (matmul_cuda.cu). One function, so no launcher can leave the grids null - the fused MoE decode
// kernels did in session 19 (illegal address on the H200 in session 20).
KernelStatus MakeGemvParams(GgmlType type, const void* w, int64_t w_row_bytes, int64_t in,
                            int64_t out, const float* x, int64_t x_stride, float* y,
                            int64_t y_stride, GemvParams* p);

// The lean decode loops (session 23's STEPSERVE_LEAN_DECODE_LOOPS, the only form since session 24)
// of the int8-activation GEMVs (gemv_q8x_rows.cuh: AccumulateRowsPointers,
// AccumulateShortRowsPointers) and the MoE gate/up kernel (moe_decode_cuda.cu: DotTwoRowsPointers):
//  - addressed by pointers advanced by a constant each iteration, not by 64-bit products of the
//    block index at every load;
//  - long-row rings refilled unconditionally (past the row's end a slot reloads its own block):
//    a conditional refill is a join in the loop, and ptxas, which issues the refill before the
//    slot's decode, then copied the ring's registers back every step - 12 MOVs per step of two
//    IQ4_XS rows (SASS, scripts/sass.py). The price: the last D steps of a row issue loads whose
//    data is never used (L1 hits). Left conditional where the copies were not the cost:
//    GemvIq4XsOneRowKernel and the short-row loop;
//  - Q4_K / Q5_K scales gathered by lane-constant byte permutes (PieceQ4_K::SetScales).
// All the same bits as the index-addressed forms they replaced. Measured on an H100 (session 23,
// bench/gpu/results-v20.txt; 24 layers, ms per step, old / lean alternating, two rounds each):
// IQ4_XS 64 streams 35.40 / 35.32 -> 34.35 / 34.34, 16 streams 12.85 / 12.88 -> 12.80 / 12.75,
// 4 streams 5.54 / 5.59 -> 5.51 / 5.52, batch 1 2.686 / 2.711 -> 2.707 / 2.733 (within the
// rounds' spread; session 24's batch-1 runs of the lean default 2.674-2.712); the Q4_K_M mix
// batch 1 3.305 / 3.288 -> 3.110 / 3.137 and 2 streams 4.475 / 4.454 -> 4.217 / 4.221.

// Decode kernels whose weights do not depend on the kernel before them (the one-row IQ4_XS GEMV;
// the MoE down + combine kernel, whose expert ids come from the router two launches back) load
// their first weight blocks - and the down kernel all its rows into L2 - before the PDL wait
// instead of after it, for the uses whose bit is set in STEPSERVE_WEIGHTS_BEFORE_WAIT (read once):
// kEarlyOneRowGemv, kEarlyDownOneToken, kEarlyDownTokens (2-4 tokens). Default 3, the first two.
// Measured on the H200 (45 layers IQ4_XS, ms per step, session 18): batch 1 4.607 / 4.618 with
// none, 4.517 / 4.548 with 1, 4.593 / 4.572 with 2, 4.493 / 4.490 with 3 (call 4); with all three
// (7) 2 / 4 streams were 0.3-0.8% slower than with none (call 3), so 4 stays off.
// Bit 8, kEarlyOneRowOther: the one-row GEMV of the other types (GemvQ8Kernel: Q4_K, Q5_K, Q6_K,
// Q8_0 long rows) loads its first ring of weight words before the wait; bit 16,
// kEarlyGateUpShared: the MoE gate/up kernel's shared-expert warps prefetch their rows into L2
// before the wait - both off: on the H200 (session 20 call 3, one process each, batch 1 of the
// IQ4_XS mix) 11 took 4.545 and 19 4.505 ms against 4.542 with the default 3 (gemv_cuda_test
// passes with 11) - no gain beyond noise; the Q4_K_M mix, which bit 8 is for, was not measured
// with it.
enum EarlyWeights : int {
  kEarlyOneRowGemv = 1,
  kEarlyDownOneToken = 2,
  kEarlyDownTokens = 4,
  kEarlyOneRowOther = 8,
  kEarlyGateUpShared = 16,
};
bool WeightsBeforeWait(EarlyWeights use);

cudaError_t LaunchGemvF32x(GgmlType type, const GemvParams& p, cudaStream_t stream);

// Writes xq / xd from x for p.rows rows of p.in values (p.in a multiple of 32).
cudaError_t LaunchQuantizeQ8(const GemvParams& p, int8_t* xq, float2* xd, cudaStream_t stream);

// `overlap_previous`: launched with programmatic stream serialization, so the kernel's blocks start
// (and prefetch weights into L2) while the quantizer before it is still running; they wait for it
// before reading xq / xd.
cudaError_t LaunchGemvQ8x(GgmlType type, const GemvParams& p, bool overlap_previous,
                          cudaStream_t stream);
// Indexed mode (p.matrix_ids set, p.rows == 1): `groups` groups, see GemvParams.
cudaError_t LaunchGemvQ8xIndexed(GgmlType type, const GemvParams& p, int64_t groups,
                                 bool overlap_previous, cudaStream_t stream);
// One activation row (p.rows == 1; plain, or indexed when p.matrix_ids is set, `groups` groups)
// through the bulk-copy streamed kernel (gemv_stream_cuda.cu). cudaErrorNotSupported, with
// nothing launched, when it does not apply (switched off, rows too long for two shared-memory
// stages, unaligned weights, another type): the caller then takes the warp-per-row kernel.
cudaError_t LaunchGemvQ8xStream(GgmlType type, const GemvParams& p, int64_t groups,
                                bool overlap_previous, cudaStream_t stream);
// The GemvStreamMode (matmul_cuda.h) in force: STEPSERVE_GEMV_STREAM at the first use, then
// whatever SetGemvCudaStreamMode set.
std::atomic<int>& GemvStreamModeSetting();

// 2..kGemvMmaMaxRows activation rows of IQ4_XS (plain mode, p.x_pair_order) through the
// tensor-core kernel (gemv_mma_cuda.cu); cudaErrorNotSupported, with nothing launched, for
// anything else: the caller then takes the dp4a kernels. LaunchGemvQ8x takes it from
// GemvMmaMinRows() rows: kGemvMmaMinRows, or per STEPSERVE_GEMV_MMA 0 = never, 2 = from 2 rows.
// From 8 rows by default: below that the dp4a kernels are as fast or faster (H200, bench_gemv
// --rows, IQ4_XS 4096x12288 at 2 / 4 / 8 / 16 rows: 26.8 / 27.3 / 30.4 / 26.1 us tensor-core vs
// 18.4 / 22.2 / 37.0 / 67.2 dp4a; 12288x4096: 18.9 / 21.2 / 22.8 / 28.4 vs 17.2 / 21.8 / 33.3 /
// 60.0; batch-4 decode 309.0 tok/s from 2 rows vs 314.6 from 8).
inline constexpr int kGemvMmaMinRows = 8;
inline constexpr int kGemvMmaMaxRows = 16;
int GemvMmaMinRows();
// The tensor-core kernel also takes 17..GemvMmaWideMaxRows() rows of IQ4_XS in one pass
// (GemvMmaIq4XsWideKernel; GemvCuda then takes them instead of dequantizing the weights to F16 for
// cuBLAS: at 32 decode streams the dense projections' F16 tiles are ~4x the IQ4_XS bytes, written
// and read again every step). STEPSERVE_GEMV_MMA_WIDE (read once): `0` never (16), else up to 32
// rows. Measured on the H200 (45 layers IQ4_XS, results-h200-v13.txt): 32 streams 49.39 -> 45.99
// ms per step. Past 32 rows (F16 tiles + cuBLAS) it lost twice: two passes of 32 rows, 64 streams
// 70.27 -> 77.65 ms (session 14), and one pass of 8 tiles (GemvMmaIq4XsWideKernel<8>), 48 / 64
// streams 59.1 -> 62.3 / 68.5 -> 76.6 ms (session 16, results-h200-v15.txt) - removed.
inline constexpr int kGemvMmaWideMaxRows = 32;
int GemvMmaWideMaxRows();
std::atomic<int>& GemvMmaWideMaxRowsSetting();  // from the variable, then SetGemvCudaMmaWideMaxRows
// The one-row IQ4_XS GEMV's whole-iteration form (gemv_q8x_cuda.cu): from
// STEPSERVE_GEMV_ONE_ROW_WHOLE, then SetGemvCudaOneRowWhole.
std::atomic<bool>& GemvOneRowWholeSetting();
// The grouped GEMV's IQ4_XS kernels compiled for a fixed block count (gemv_q8x_grouped_cuda.cu,
// kGroupedWholeShort / kGroupedWholeLong bits): from STEPSERVE_GROUPED_WHOLE, then
// SetGemvCudaGroupedWhole; and how many launches took one.
std::atomic<int>& GroupedWholeSetting();
std::atomic<int64_t>& GroupedWholeLaunchCount();
cudaError_t LaunchGemvQ8xMma(GgmlType type, const GemvParams& p, bool overlap_previous,
                             cudaStream_t stream);

// Grouped mode of IQ4_XS (p.x_pair_order) through the tensor-core kernel, for many groups per
// matrix (a prefill's MoE): each slot's groups in chunks of 32 activation rows.
// cudaErrorNotSupported, with nothing launched, for anything else (or STEPSERVE_GEMV_MMA=0).
// GemvIndexedCuda takes it when the groups average kGroupedMmaMinPairs or more per matrix; below
// that (decode batches: 512 pairs over ~240 of 288 experts at 64 tokens) the dp4a grouped kernel.
inline constexpr int64_t kGroupedMmaMinPairs = 8;
cudaError_t LaunchGemvQ8xMmaGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                    cudaStream_t stream);

// The same through the grouped tensor-core GEMM (gemm_grouped_mma_cuda.cu: 64 weight rows x 32
// pairs per CTA, activations staged in shared memory), tried first when GroupedGemmSetting() is
// non-zero (STEPSERVE_GROUPED_GEMM at the first use, or SetGroupedGemmCuda): 1 = with many groups
// per matrix (the default), 2 = at any count (also decode batches, to measure it there), 0 = off.
std::atomic<int>& GroupedGemmSetting();
cudaError_t LaunchGemmQ8xMmaGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                    cudaStream_t stream);

// The grouped F16 GEMM (gemm_grouped_f16_cuda.cu: IQ4_XS, Q4_K or Q6_K weights decoded to F16,
// F16 activations in p.xh, 128 weight rows x 64 pairs per CTA), tried before the int8 one where
// it applies: GroupedGemmF16Setting() (STEPSERVE_GROUPED_GEMM_F16 at the first use: 0 off, 1
// IQ4_XS only, 2 IQ4_XS and Q4_K, 3 also Q6_K, the default), `in` a multiple of 256, 1..65535
// slots.
// LaunchConvertActivationsF16 writes xh from x (p.rows rows; pair order where p.x_pair_order,
// the IQ4_XS decoder's, else natural order); it needs 2 * in * rows bytes
// (GemvIndexedCudaScratchBytes). LaunchGemmF16Grouped: cudaErrorNotSupported for another type or
// an activation order the type's decoder does not read.
std::atomic<int>& GroupedGemmF16Setting();
bool GroupedGemmF16Applies(GgmlType type, int64_t in, int64_t slots);
cudaError_t LaunchConvertActivationsF16(const GemvParams& p, uint16_t* xh, cudaStream_t stream);
cudaError_t LaunchGemmF16Grouped(GgmlType type, const GemvParams& p, int64_t slots,
                                 cudaStream_t stream);

// The IQ4_XS grouped F16 GEMM on the warpgroup MMA (gemm_grouped_wgmma_cuda.cu), under
// STEPSERVE_GEMM_F16_WGMMA=1 or 2 (8 or 12 warps; GemmF16WgmmaOn, read once; off). Its activations
// are in another order (a word transpose of the pair order per 32 values): GemmF16WgmmaOrder(p)
// says whether xh for these parameters is written in it - LaunchConvertActivationsF16 then writes
// it so (through LaunchConvertActivationsWgmma), and LaunchGemmF16Grouped takes the wgmma kernel.
bool GemmF16WgmmaOn();
bool GemmF16WgmmaOrder(const GemvParams& p);
cudaError_t LaunchConvertActivationsWgmma(const GemvParams& p, uint16_t* xh, cudaStream_t stream);
cudaError_t LaunchGemmF16Wgmma(GgmlType type, const GemvParams& p, int64_t slots,
                               cudaStream_t stream);

// Whether the grouped GEMV streams a matrix pair (GemvParams::w2) for this type and row length:
// the long-row kernels of the int8 types without a 2-3 bit piece (kPairForm) only.
bool GroupedTakesMatrixPair(GgmlType type, int64_t in);
// Grouped mode (p.slot_matrix etc. set, p.matrix_ids unused): `slots` grid rows, see GemvParams.
cudaError_t LaunchGemvQ8xGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                 bool overlap_previous, cudaStream_t stream);

}  // namespace stepserve::kernels::gemv_internal

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_CUDA_INTERNAL_H_
