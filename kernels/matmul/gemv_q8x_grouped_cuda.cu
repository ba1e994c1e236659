// Grouped int8-activation GEMV (LaunchGemvQ8xGrouped, gemv_cuda_internal.h): the MoE expert
// projections of 3-64 decode tokens. The grouping kernel (moe_gemv_cuda.cu) sorts the (token,
// slot) pairs by expert into slots; each slot's matrix is streamed once per chunk of up to four of
// its pairs with the warp pieces of gemv_q8x_rows.cuh. For IQ4_XS the warps loop over row blocks
// under a register cap, each chunk's dot loop compiled for its own pair count (the measurements
// are at GroupedRowCtasPerSlot, GroupedMinCtasPerSm and GroupedExactRows).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/gemv_q8x_pieces_low_bit.cuh"
#include "kernels/matmul/gemv_q8x_rows.cuh"

// Groups c0 .. c0 + n_rows - 1 of the slot's order (n_rows <= RN; the rows past n_rows repeat the
// last one and are not stored) dotted with the warp's rows of `w` from o0. Called with n_rows ==
// RN, a compile-time constant once inlined, no per-row guard is left (kExactRows).
template <class P, int RN, int NR, int D, bool kShort, int kFixedBlocks>
__device__ __forceinline__ void GroupChunk(const GemvParams& p, const uint8_t* w, int64_t o0,
                                           int lane, int c0, int n_rows, int64_t y_row_offset) {
  int x_rows[RN];
  int64_t y_rows[RN];
#pragma unroll
  for (int r = 0; r < RN; ++r) {
    const int group = p.group_order[c0 + (r < n_rows ? r : n_rows - 1)];
    x_rows[r] = group / p.x_group_div;
    y_rows[r] = group + y_row_offset;
  }
  DotAndStore<P, RN, NR, D, kShort, false, kFixedBlocks>(p, w, o0, lane, x_rows, y_rows, n_rows);
}

// Grouped mode (MoE with several tokens): grid y = slots; slot s holds the groups that picked one
// expert, so its matrix is streamed once per R of them instead of once per group. Slot arrays
// come from the grouping kernel, which may still run when this one starts: read after the wait.
// kRowLoop (GroupedRowCtasPerSlot): fewer CTAs per slot, each warp taking output rows o0, o0 +
// the grid's rows, ...; otherwise one warp per kRows rows. (An L2 prefetch of the warp's next
// rows before each row block measured no gain on the H200: 16 / 64 streams 26.04 / 70.24 ms vs
// 26.06 / 70.25, bench/gpu/results-h200-v13.txt; removed.) kMinBlocks: CTAs per SM the register
// budget must allow (GroupedMinCtasPerSm). kExactRows: each chunk of n groups runs the dot loop
// compiled for exactly n activation rows (GroupChunk), not R rows with run-time guards.
// kFixedBlocks > 0: the launcher guarantees rows of exactly that many blocks, so the dot loops
// run unguarded (AccumulateShortRowsPointers, AccumulateRowsPointers; STEPSERVE_GROUPED_WHOLE).
// With p.w2 (a matrix pair, GemvIndexedCudaTakesMatrixPair) grid y is twice the slots: the second
// half multiplies the same slots' matrices of w2 and writes rows y2_row_offset further on. Only the
// long-row kernels of the types without a 2-3 bit piece have that code (kPairForm): in the others
// (the experts' down, the low-bit types under their 4-CTA cap) its two registers spilled.
template <class P, bool kShort>
inline constexpr bool kPairForm = !kShort && !kLowBitPiece<P>;

template <class P, int R, int NR, int D, bool kShort, bool kRowLoop = false, int kMinBlocks = 1,
          bool kExactRows = false, int kFixedBlocks = 0>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    GemvQ8GroupedKernel(const __grid_constant__ GemvParams p) {
  constexpr int kRows = kShort ? kShortRowsPerWarp<P> : NR;  // output rows per warp
  const int lane = threadIdx.x & 31;
  const int64_t first =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * kRows;
  if (first >= p.out) return;
  int slot = static_cast<int>(blockIdx.y);
  const uint8_t* matrices = p.w;
  int64_t y_row_offset = 0;
  if constexpr (kPairForm<P, kShort>) {
    if (p.w2 != nullptr && slot >= p.w2_first_slot) {
      slot -= p.w2_first_slot;
      matrices = p.w2;
      y_row_offset = p.y2_row_offset;
    }
  }
  WaitForPrimaryGrid();  // the grouping kernel that writes the slot arrays may still run
  AllowDependentLaunch();
  const int32_t id = p.slot_matrix[slot];
  if (id == kSlotUnused) return;
  const int begin = p.slot_begin[slot], end = p.slot_begin[slot + 1];
  // Output rows o0 .. o0 + kRows - 1 of every group of the slot, then the warp's next rows.
  auto for_each_row_block = [&](auto&& rows) {
    if constexpr (kRowLoop) {
      const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock * kRows;
      for (int64_t o0 = first; o0 < p.out; o0 += stride) rows(o0);
    } else {
      rows(first);
    }
  };
  if (id < 0) {  // ids outside [0, n_matrices): zero rows, as the indexed mode writes
    for_each_row_block([&](int64_t o0) {
      for (int i = begin; i < end; ++i) {
        if (lane < kRows && o0 + lane < p.out) {
          p.y[(p.group_order[i] + y_row_offset) * p.y_stride + o0 + lane] = 0.f;
        }
      }
    });
    return;
  }
  const uint8_t* w = matrices + id * p.w_matrix_bytes;
  for_each_row_block([&](int64_t o0) {
    for (int c0 = begin; c0 < end; c0 += R) {
      const int n_rows = end - c0 < R ? end - c0 : R;
      if constexpr (kExactRows) {
        static_assert(R == 4, "one case per chunk size");
        switch (n_rows) {
          case 1:
            GroupChunk<P, 1, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, 1, y_row_offset);
            break;
          case 2:
            GroupChunk<P, 2, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, 2, y_row_offset);
            break;
          case 3:
            GroupChunk<P, 3, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, 3, y_row_offset);
            break;
          default:
            GroupChunk<P, 4, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, 4, y_row_offset);
            break;
        }
      } else {
        GroupChunk<P, R, NR, D, kShort, kFixedBlocks>(p, w, o0, lane, c0, n_rows, y_row_offset);
      }
    }
  });
}

// CTAs per slot of the grouped GEMV (0: one warp per row pair; N: at most N CTAs per slot, each
// warp looping over row pairs). STEPSERVE_GROUPED_ROW_CTAS=N fixes N (0: no loop); by default
// kGroupedRowCtas from kGroupedLoopMinSlots slots (16+ streams of 8 routed + 1 shared expert),
// none below. Measured on the H200 (45 layers IQ4_XS, ms per step; bench/gpu/results-h200-v12.txt):
// 64 streams (289 slots) 76.7 with no loop, 74.2 / 71.5-71.8 / 70.2 / 69.9 at 16 / 24 / 32 / 48
// per slot, 8 per slot 84.0; 32 streams 53.0 -> 49.9 at 24; 16 streams (144 slots) 26.8 -> 25.9
// at 49; but 4 and 8 streams (36 / 72 slots) 11.18 -> 11.54 and 16.93 -> 17.19 at 193 / 97. One
// warp per row pair is ~46k CTAs of 4 warps per projection at 64 streams: CTA launch and drain,
// not bytes, limit it there.
// IQ4_XS (session 15, with the 5-CTA register cap and the exact-rows dispatch of the loop form):
// the loop form at every slot count, at least kGroupedRowCtasIq4Xs per slot and
// kGroupedRowCtaBudget CTAs in all (36 slots: 192, 72+: 96; a cap at or above what one warp per
// row block needs leaves each warp one row block). Measured on the H200 before this rule, with the
// cap and exact rows (bench/gpu/results-h200-v14.txt, call 4): 4 streams 11.50-11.57 -> 11.06 ms at
// 193 per slot, 8 streams 18.57-18.67 -> 16.00 at 97. With the split one-row lookup (session 16,
// bench/gpu/results-h200-v15.txt calls 5-6), at least 96 per slot instead of 48: 16 / 32 / 64
// streams 22.69-22.78 / 41.94-41.95 / 66.21-66.26 ms -> 22.80 / 41.68-41.74 / 64.20-64.33 (32 per
// slot: 23.26 / 42.72 / 67.77; 128: 23.14 / 42.66 / 64.83; 192: 23.82 / 44.14 / 66.87). Other types
// keep 48 (not measured again).
constexpr int64_t kGroupedRowCtas = 48;
constexpr int64_t kGroupedRowCtasIq4Xs = 96;
constexpr int64_t kGroupedLoopMinSlots = 128;
constexpr int64_t kGroupedRowCtaBudget = 6912;
// IQ4_XS gate / up pairs past ~72 slots (LaunchGrouped). Measured (H100, session 40, 24 layers,
// F16 cache, two alternating rounds, ms per step at 16 / 32 / 64 streams): unpaired 9.959 / 16.194
// / 24.308 and 9.909 / 16.218 / 24.264; paired at 96 a slot 9.948 / 16.211 / 24.334 and 9.928 /
// 16.173 / 24.221; paired at 48 (STEPSERVE_GROUPED_ROW_CTAS=48, the down kept at 96) 9.735 /
// 15.935 / 24.345 and 9.712 / 15.926 / 24.371 (-2.1% / -1.7% / +0.3%). Its test case (moe_gemv
// long rows at 16 tokens, 128 slots) passed on the H100 in session 41; the default pairs up to 32
// tokens (kMoeGemvGateUpPairTokens).
constexpr int64_t kPairRowCtasIq4Xs = 48;
// STEPSERVE_GROUPED_ROW_CTAS (read once), -1 when unset.
int64_t GroupedRowCtasFixed() {
  static const int64_t setting = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_ROW_CTAS");
    return v == nullptr ? int64_t{-1} : static_cast<int64_t>(std::atoll(v));
  }();
  return setting;
}
int64_t GroupedRowCtasPerSlot(int64_t slots, bool iq4_xs) {
  const int64_t setting = GroupedRowCtasFixed();
  if (setting >= 0) return setting;
  if (iq4_xs) {
    const int64_t spread = (kGroupedRowCtaBudget + slots - 1) / slots;
    return spread > kGroupedRowCtasIq4Xs ? spread : kGroupedRowCtasIq4Xs;
  }
  return slots >= kGroupedLoopMinSlots ? kGroupedRowCtas : 0;
}

// Resident CTAs per SM the row-looping grouped IQ4_XS kernels' register cap allows: 5 (96
// registers, no spills), or none with STEPSERVE_GROUPED_MIN_CTAS=1. Why: at 64 streams ncu showed
// the gate / up and down kernels at 128 / 104 registers, 4 CTAs (16 warps) per SM, 0.61-0.63
// instructions issued per scheduler cycle with no warp eligible in 37-38% of cycles, DRAM at
// 18-24%. Measured on the H200 (45 layers IQ4_XS, ms per step at 16 / 32 / 64 streams,
// bench/gpu/results-h200-v14.txt): none 27.33-27.36 / 48.14-48.20 / 73.71-73.87, 5 CTAs 26.04 /
// 46.25 / 70.63, 6 (spills) 27.16 / 48.04 / 73.75, 8 (more spills) 31.86 / 55.83 / 86.07.
constexpr int kGroupedMinCtasPerSm = 5;
int GroupedMinCtasPerSm() {
  static const int ctas = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_MIN_CTAS");
    return v != nullptr && std::atoi(v) == 1 ? 1 : kGroupedMinCtasPerSm;
  }();
  return ctas;
}

// The row-looping grouped IQ4_XS kernels with kExactRows, unless STEPSERVE_GROUPED_EXACT_ROWS=0.
// (The kernels without the loop and register cap lost with it at 3 / 4 / 8 streams: 9.72 / 11.54
// / 18.62 ms against 9.56 / 11.41 / 18.34, results-h200-v14.txt call 4; not kept.)
// Measured on the H200 (45 layers IQ4_XS, ms per step at 16 / 32 / 64 streams, two runs each,
// bench/gpu/results-h200-v14.txt): 26.11 / 46.19 / 70.53 and 26.09 / 46.17 / 70.44 without,
// 24.11 / 44.30 / 68.23 and 24.09 / 44.21 / 68.33 with; ncu at 64 streams (base clocks): gate /
// up 408 -> 390 us, down 484 -> 466 us. The guarded form branches around every activation row's
// loads, dots and reduction in each step; the exact forms' code is 2.5x larger (4 copies).
bool GroupedExactRows() {
  static const bool on = EnvSwitchOn("STEPSERVE_GROUPED_EXACT_ROWS");
  return on;
}

// Resident CTAs per SM the register cap of the 2-3 bit types' row-looping grouped kernels allows:
// 4 by default (128 registers: no spills, but Q3_K's long rows, which spill 148 / 344 bytes there
// and stay uncapped; at 5 CTAs, IQ4_XS's cap, all but IQ2_XXS spill 20-992 bytes), or none with
// STEPSERVE_GROUPED_LOW_BIT_MIN_CTAS=1 (ptxas: 135-213 registers, so 2-3 CTAs of 4 warps per SM).
// Measured on an H100 (session 21 call 1, ms per step at 16 / 64 streams, two alternating pairs):
// Step-5 shapes (20 layers step5-q2) 17.18 / 39.15 uncapped, 16.03 / 36.91 capped; Step-3.5-Flash
// with IQ3_S expert gate/up (24 layers) 15.14 / 41.79 and 14.50 / 40.55.
int GroupedLowBitMinCtasPerSm() {
  static const int ctas = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_LOW_BIT_MIN_CTAS");
    return v != nullptr && std::atoi(v) == 1 ? 1 : 4;
  }();
  return ctas;
}

// The row-looping grouped kernel with the register cap of GroupedMinCtasPerSm and the exact-rows
// dispatch of GroupedExactRows (IQ4_XS only; other types were not measured with them).
template <class P, int R, int NR, int D, bool kShort>
auto RowLoopGroupedKernel() -> void (*)(GemvParams) {
  // The 2-3 bit types: the exact-rows form, uncapped unless GroupedLowBitMinCtasPerSm (their
  // guarded-rows form without the loop spilled 24-400 bytes under ptxas, 255 registers).
  if constexpr (kLowBitPiece<P>) {
    if constexpr (!(std::is_same_v<P, PieceQ3_K> && !kShort)) {
      if (GroupedLowBitMinCtasPerSm() == 4) {
        return GemvQ8GroupedKernel<P, R, NR, D, kShort, true, 4, true>;
      }
    }
    return GemvQ8GroupedKernel<P, R, NR, D, kShort, true, 1, true>;
  } else {
    if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
      if (GroupedExactRows()) {
        return GroupedMinCtasPerSm() > 1
                   ? GemvQ8GroupedKernel<P, R, NR, D, kShort, true, kGroupedMinCtasPerSm, true>
                   : GemvQ8GroupedKernel<P, R, NR, D, kShort, true, 1, true>;
      }
      if (GroupedMinCtasPerSm() > 1) {
        return GemvQ8GroupedKernel<P, R, NR, D, kShort, true, kGroupedMinCtasPerSm>;
      }
    }
    return GemvQ8GroupedKernel<P, R, NR, D, kShort, true>;
  }
}

// One warp per row block, launched without a cap: GemvQ8GroupedKernel's guarded form, except for
// the 2-3 bit types, whose loop form then runs its loop once (their guarded form spilled 24-400
// bytes at 255 registers under ptxas, so it is never built).
template <class P, int R, int NR, int D, bool kShort>
auto NoLoopGroupedKernel() -> void (*)(GemvParams) {
  if constexpr (kLowBitPiece<P>) {
    return RowLoopGroupedKernel<P, R, NR, D, kShort>();
  } else {
    return GemvQ8GroupedKernel<P, R, NR, D, kShort>;
  }
}

// The short-row (expert down) launches of IQ4_XS in the exact-rows row loop (GroupedExactRows): a
// ring over the whole row (rows of up to kShortWholeRowDepth = 5 blocks, the experts' 1280-wide
// down) under a 4-CTA register cap.
// Why: in the 64-stream decode table (H100, ncu, session 30 call 1) the down launch took 386 us
// against the gate / up launches' 264 us for the same ~668 MB (240 experts x 2.8 MB): 1.73
// against 2.53 TB/s. With the one-row depth (4) the ring loads blocks 0-3, then block 4 only once
// block 0 is decoded, so each row block of a warp waits on memory twice; that kernel also spills
// 24 bytes under the 5-CTA cap (ptxas), the depth-5 one 56 (none under 4 CTAs).
// Measured (H100, 24 layers IQ4_XS, ms per step at 16 / 32 / 64 streams, session 30 calls 2-3):
// the depth-4 kernel 11.591 / 17.702 / 26.535 and 11.610 / 17.607 / 26.534; depth 5 11.438 /
// 17.541 / 26.068, 11.478 / 17.638 / 26.191, 11.484 / 17.571 / 26.165, 11.436 / 17.491 / 26.045
// (-1% to -2%); 4 / 8 streams 5.446 / 8.340 -> 5.390 / 8.224. Depth 4 under the 4-CTA cap (no
// spills) lost slightly: 11.703 / 17.869 / 26.515.
// STEPSERVE_GROUPED_SHORT_DEPTH=4: depth 4 under the 4-CTA cap; =1: the depth-4 kernel of the
// gate / up launches' cap (the former default). STEPSERVE_GROUPED_SHORT_ROW_CTAS=N (N > 0) sets
// the CTAs per slot of the short-row launches alone (by default GroupedRowCtasPerSlot's, shared
// with the gate / up launches): with depth 5, 64 measured 11.398 / 17.302 / 26.049, 11.376 /
// 17.301 / 26.048, 11.415 / 17.362 / 26.040 (32 streams -1%), 32 and 192 slower; not the default
// (4-8 streams, 36-72 slots, were not measured with it).
constexpr int kShortWholeRowDepth = 5;
constexpr int kShortRowMinCtas = 4;
int GroupedShortDepth() {
  static const int depth = EnvSwitchLevel("STEPSERVE_GROUPED_SHORT_DEPTH", kShortWholeRowDepth);
  return depth;
}
// STEPSERVE_GROUPED_WHOLE (a mask, 3 by default since session 45): IQ4_XS rows of a fixed block
// count through a kernel compiled for that count, whose iterations run without the per-step `b <
// nb` guard (a BSSY / BSYNC region each in SASS, which also keeps one step's loads from overlapping
// the step before) and the refill bound - the same arithmetic in the same order (bit-identical).
// Bit 1 (kGroupedWholeShort): short rows of exactly kShortWholeRowDepth blocks (the experts' down),
// one ring over the row; bit 2 (kGroupedWholeLong): long rows of kGroupedWholeLongBlocks (the
// experts' 4096-wide gate / up), two iterations of the two-step ring, the second without refills.
// SASS per row block's chunk of 1 / 2 / 4 activation rows (store included): down 547 / 689 / 948
// -> 386 / 561 / 806, gate / up (both iterations) ~855 / 1083 / 1452 -> 628 / 886 / 1245 (the
// grouped GEMV is issue-bound at 16-64 streams: ncu, session 15). Measured (H100, 24 layers, one
// round, bench/gpu/results-v39.txt, ms per step at 16 / 32 / 64 streams): 0 9.744 / 15.508 /
// 23.986, 2 9.251 / 15.066 / 23.069, 3 9.062 / 14.834 / 22.714 (-7.0% / -4.3% / -5.3%).
constexpr int kGroupedWholeShort = 1, kGroupedWholeLong = 2;
constexpr int kGroupedWholeLongBlocks = 16;
bool GroupedWhole(int bit) {
  return (GroupedWholeSetting().load(std::memory_order_relaxed) & bit) != 0;
}
int64_t GroupedShortRowCtas(int64_t fallback) {
  static const int64_t setting = [] {
    const char* v = std::getenv("STEPSERVE_GROUPED_SHORT_ROW_CTAS");
    return v == nullptr ? int64_t{-1} : static_cast<int64_t>(std::atoll(v));
  }();
  return setting >= 0 ? setting : fallback;
}

template <class P>
cudaError_t LaunchGrouped(const GemvParams& p, int64_t slots, bool overlap_previous,
                          cudaStream_t stream) {
  // The rows <= 4 shape of LaunchRows. One row per warp with the one-row ring depth (more warps,
  // more blocks in flight) measured slower on the H200: batch 16 / 64 decode 450.9 / 709.4 vs
  // 514.9 / 827.0 tok/s (bench/gpu/results-h200-ab-v5.txt).
  constexpr int kR = 4, kNR = 2, kD = 2;
  // IQ4_XS and the 2-3 bit types: the loop form (exact rows; IQ4_XS under its register cap) at
  // any cap and IQ4_XS's CTAs per slot. Others: the row loop where the cap is below the CTAs one
  // warp per row block would need.
  constexpr bool kLoopForm = std::is_same_v<P, PieceIQ4_XS> || kLowBitPiece<P>;
  // A matrix pair (p.w2): both matrices in one grid, each with GroupedRowCtasPerSlot's CTAs per
  // slot, but IQ4_XS's where that rule gives its floor of 96 (past ~72 slots) with
  // kPairRowCtasIq4Xs: the grid then holds what one unpaired launch held.
  int64_t max_blocks = GroupedRowCtasPerSlot(slots, kLoopForm);
  if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
    if (p.w2 != nullptr && GroupedRowCtasFixed() < 0 && max_blocks <= kGroupedRowCtasIq4Xs) {
      max_blocks = kPairRowCtasIq4Xs;
    }
  }
  const int64_t grid_y = p.w2 != nullptr ? 2 * slots : slots;
  auto loops = [&](int64_t rows_per_warp) {
    const int64_t warps = (p.out + rows_per_warp - 1) / rows_per_warp;
    return max_blocks > 0 &&
           (kLoopForm || max_blocks < (warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  };
  if (IsShortRow<P>(p.in)) {
    constexpr int kShortRows = kShortRowsPerWarp<P>;
    const int64_t short_blocks = GroupedShortRowCtas(max_blocks);
    const bool short_loops = short_blocks > 0 && kLoopForm;
    if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
      if (short_loops && GroupedExactRows()) {
        const int depth = GroupedShortDepth();
        if (depth == kShortWholeRowDepth && GroupedWhole(kGroupedWholeShort) &&
            p.in == kShortWholeRowDepth * P::kElems) {
          GroupedWholeLaunchCount().fetch_add(1, std::memory_order_relaxed);
          return LaunchWarpRows<kShortRows>(
              GemvQ8GroupedKernel<P, kR, 1, kShortWholeRowDepth, true, true, kShortRowMinCtas, true,
                                  kShortWholeRowDepth>,
              p, grid_y, overlap_previous, stream, short_blocks);
        }
        if (depth == kShortWholeRowDepth && p.in / P::kElems <= kShortWholeRowDepth) {
          return LaunchWarpRows<kShortRows>(GemvQ8GroupedKernel<P, kR, 1, kShortWholeRowDepth, true,
                                                                true, kShortRowMinCtas, true>,
                                            p, grid_y, overlap_previous, stream, short_blocks);
        }
        if (depth == P::kDepth1) {
          return LaunchWarpRows<kShortRows>(
              GemvQ8GroupedKernel<P, kR, 1, P::kDepth1, true, true, kShortRowMinCtas, true>, p,
              grid_y, overlap_previous, stream, short_blocks);
        }
      }
    }
    if (short_loops || loops(kShortRows)) {
      return LaunchWarpRows<kShortRows>(RowLoopGroupedKernel<P, kR, 1, P::kDepth1, true>(), p,
                                        grid_y, overlap_previous, stream,
                                        short_loops ? short_blocks : max_blocks);
    }
    return LaunchWarpRows<kShortRows>(NoLoopGroupedKernel<P, kR, 1, P::kDepth1, true>(), p, grid_y,
                                      overlap_previous, stream);
  }
  if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
    if (loops(kNR) && GroupedExactRows() && GroupedMinCtasPerSm() > 1 &&
        GroupedWhole(kGroupedWholeLong) && p.in == kGroupedWholeLongBlocks * P::kElems) {
      GroupedWholeLaunchCount().fetch_add(1, std::memory_order_relaxed);
      return LaunchWarpRows<kNR>(
          GemvQ8GroupedKernel<P, kR, kNR, kD, false, true, kGroupedMinCtasPerSm, true,
                              kGroupedWholeLongBlocks>,
          p, grid_y, overlap_previous, stream, max_blocks);
    }
  }
  if (loops(kNR)) {
    return LaunchWarpRows<kNR>(RowLoopGroupedKernel<P, kR, kNR, kD, false>(), p, grid_y,
                               overlap_previous, stream, max_blocks);
  }
  return LaunchWarpRows<kNR>(NoLoopGroupedKernel<P, kR, kNR, kD, false>(), p, grid_y,
                             overlap_previous, stream);
}

}  // namespace

std::atomic<int>& GroupedWholeSetting() {
  static std::atomic<int> mask{EnvSwitchLevel("STEPSERVE_GROUPED_WHOLE", 3) & 3};
  return mask;
}

std::atomic<int64_t>& GroupedWholeLaunchCount() {
  static std::atomic<int64_t> launches{0};
  return launches;
}

bool GroupedTakesMatrixPair(GgmlType type, int64_t in) {
  bool takes = false;
  WithQ8xPieceAll(type, [&](auto piece) {
    using P = decltype(piece);
    takes = !IsShortRow<P>(in) && kPairForm<P, false>;
    return cudaSuccess;
  });
  return takes;
}

cudaError_t LaunchGemvQ8xGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                 bool overlap_previous, cudaStream_t stream) {
  if (p.slot_matrix == nullptr || p.slot_begin == nullptr || p.group_order == nullptr ||
      slots < 1 || (p.w2 != nullptr ? 2 * slots : slots) > 65535 ||
      (p.w2 != nullptr && !GroupedTakesMatrixPair(type, p.in))) {
    return cudaErrorInvalidValue;
  }
  return WithQ8xPieceAll(type, [&](auto piece) {
    return LaunchGrouped<decltype(piece)>(p, slots, overlap_previous, stream);
  });
}

}  // namespace stepserve::kernels::gemv_internal
