// Grouped tensor-core GEMM of a prefill's MoE experts: IQ4_XS weights x int8 activations
// (GemvParams grouped mode: slot s multiplies matrix slot_matrix[s] with the activation rows of
// its groups), on by default for many groups per matrix (GroupedGemmSetting;
// STEPSERVE_GROUPED_GEMM=0 off, =2 at any group count).
//
// Why: the grouped tensor-core GEMV (gemv_mma_cuda.cu) keeps the GEMV's shape - 16 weight rows per
// CTA, warps splitting K, each lane loading its activation fragments and their scales straight
// from global memory - and at a 2048-token prefill (16384 pairs over 288 experts) it ran at ~30
// int8 TOPS: gate 5.68 ms, down 7.92 ms per layer (ncu), 68% of warp cycles waiting on those
// loads, DRAM 3% busy. Here a CTA is a GEMM tile: 64 weight rows (16 per warp) x 32 pairs (four
// 8-column MMA tiles), K in pairs of IQ4_XS blocks. Every thread helps copy one stage - the 64
// rows' pair of blocks, the 32 pairs' 512 int8 activations and their 16 scales - into shared
// memory with cp.async, two stages in flight. Each warp decodes its rows' A fragments once per
// 32-weight sub-block (the table lookup of gemv_mma_cuda.cu) and reuses them for the four column
// tiles; B fragments and scales come from shared memory (row strides padded so the 8 rows one
// fragment load reads fall in distinct banks). K is not split across warps, so each warp's
// accumulators are final: no reduction through shared memory.
//
// Per MMA: one 8-byte and two 4-byte shared loads, the MMA, and the F32 scaling of its 4 int32
// sums (weight sub-block scale x activation block d): the int8 sums are exact within a 32-value
// sub-block, as in every int8 path here.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/dynamic_smem.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/mma_iq4_util.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/mma_iq4_staged.cuh"

constexpr int kWarps = 4;
constexpr int kTileRows = 16 * kWarps;  // weight (output) rows per CTA, 16 per warp
constexpr int kTilePairs = 32;          // activation rows (token, slot pairs) per chunk
constexpr int kColTiles = kTilePairs / 8;
constexpr int kStages = 2;
using Stage = StagedPair<kTileRows, kTilePairs>;
static_assert(Stage::kThreads == 32 * kWarps, "the stage copies assume the launch's threads");
constexpr size_t kSmemBytes = size_t{kStages} * Stage::kBytes + kTilePairs * sizeof(int);

// Copies pair of blocks `kp` of the CTA's 64 weight rows and of the chunk's 32 activation rows
// (pair_row: their rows in xq / xd) into `stage`.
__device__ __forceinline__ void CopyStage(uint8_t* stage, const GemvParams& p, const uint8_t* w,
                                          int64_t o0, int64_t kp, bool full_pair,
                                          const int* pair_row) {
  Stage::CopyPair(stage, p, w, o0, kp, full_pair, [&](int r) { return pair_row[r]; });
}

// Grid (64-row tiles, slots). A slot's groups run in chunks of 32 (the last one clamped to its
// last group: extra columns are computed and dropped).
__global__ void __launch_bounds__(32 * kWarps)
    GemmMmaIq4XsGroupedKernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(16) uint8_t gemm_smem[];
  int* pair_row = reinterpret_cast<int*>(gemm_smem + size_t{kStages} * Stage::kBytes);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const uint8_t* w = nullptr;
  int begin = 0, end = 0;
  if (!SlotGroups<kTileRows>(p, o0, &w, &begin, &end)) return;
  const int64_t nb = p.in / 256;
  const int64_t n_kp = (nb + 1) / 2;
  const uint32_t tbl[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
  for (int c0 = begin; c0 < end; c0 += kTilePairs) {
    const int cols = end - c0 < kTilePairs ? end - c0 : kTilePairs;
    __syncthreads();  // the previous chunk is done with pair_row and the stages
    LoadPairRows<kTilePairs>(p, c0, cols, pair_row);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s < n_kp) CopyStage(gemm_smem + s * Stage::kBytes, p, w, o0, s, 2 * s + 1 < nb, pair_row);
      CommitCopies();  // empty groups too: the wait below counts groups
    }
    float acc[kColTiles][4] = {};
    for (int64_t kp = 0; kp < n_kp; ++kp) {
      const int s = static_cast<int>(kp % kStages);
      uint8_t* stage = gemm_smem + s * Stage::kBytes;
      WaitCopiesButOne();  // this thread's copies of stage kp have landed
      __syncthreads();     // and everyone's
      Stage::MmaBlock<kColTiles>(stage, 0, warp, g, t, tbl, acc);
      if (2 * kp + 1 < nb) Stage::MmaBlock<kColTiles>(stage, 1, warp, g, t, tbl, acc);
      __syncthreads();  // every warp is done with the stage before it is refilled
      if (kp + kStages < n_kp) {
        CopyStage(stage, p, w, o0, kp + kStages, 2 * (kp + kStages) + 1 < nb, pair_row);
      }
      CommitCopies();
    }
    StoreGroupedTile(p, o0 + 16 * warp + g, c0, cols, t, acc);
  }
}

// 0 = off, 1 = for many groups per matrix (as the grouped tensor-core GEMV; the default since
// it was measured on the H200: 45-layer prefill 2048 tokens 1724 -> 2948 tok/s), 2 = always.
int SettingFromEnv() {
  const char* v = std::getenv("STEPSERVE_GROUPED_GEMM");
  if (v == nullptr || v[0] == '\0') return 1;
  return v[0] == '0' ? 0 : (v[0] == '2' ? 2 : 1);
}

}  // namespace

std::atomic<int>& GroupedGemmSetting() {
  static std::atomic<int> setting{SettingFromEnv()};
  return setting;
}

cudaError_t LaunchGemmQ8xMmaGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                    cudaStream_t stream) {
  if (GroupedGemmSetting().load(std::memory_order_relaxed) == 0 || type != GgmlType::kIQ4_XS ||
      !p.x_pair_order || p.in % 256 != 0 || p.slot_matrix == nullptr || p.slot_begin == nullptr ||
      p.group_order == nullptr || slots < 1 || slots > 65535) {
    return cudaErrorNotSupported;
  }
  static std::atomic<uint64_t> attribute_set{0};
  return LaunchGroupedTiles(GemmMmaIq4XsGroupedKernel, kTileRows, 32 * kWarps, kSmemBytes,
                            attribute_set, p, slots, stream);
}

}  // namespace stepserve::kernels::gemv_internal
