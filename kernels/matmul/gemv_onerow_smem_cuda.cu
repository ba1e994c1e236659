// The one-row IQ4_XS GEMV with its activations staged in shared memory (opt-in while it is being
// measured: STEPSERVE_GEMV_ACT_SMEM=1). Same per-lane arithmetic in the same order as
// GemvIq4XsOneRowKernel (gemv_q8x_cuda.cu), so the same bits; two changes aimed at what bounds
// that kernel (v7 profile: 46% of a warp's cycles wait on long-scoreboard loads - the int8
// activation loads issued in the step that uses them, 17% of them missing L1 - and the weight
// ring starts only after the wait for the kernel that writes the activations):
//  - the CTA copies the row's int8 activations and their scales once into shared memory; every
//    step then reads them with LDS (no L1 misses, shorter latency). The 16-byte halves of each
//    32-value piece go to two arrays so a quarter-warp's 128-bit reads hit distinct banks;
//  - the first D ring steps of weights are loaded before WaitForPrimaryGrid (weights never depend
//    on an earlier kernel), so they are in flight while the producer finishes.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"

// Shared memory of one CTA: `in` int8 activations as in / 32 pieces of 2 x 16 bytes (first halves,
// then second halves), then in / 32 float scales.
size_t StagedBytes(int64_t in) { return static_cast<size_t>(in + in / 32 * 4); }

template <int D>
__global__ void __launch_bounds__(kThreads)
    GemvIq4XsOneRowSmemKernel(const __grid_constant__ GemvParams p) {
  using P = PieceIQ4_XS;
  constexpr int kGroups = 32 / P::kLanes;  // blocks per warp step (lane group g = lane / 8)
  constexpr int kPieces = P::kElems / 32;  // 32-value pieces per block (one per lane of a group)
  extern __shared__ uint4 staged[];
  const int lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  // Every warp takes part in the copy and the barrier; one past the last row only copies.
  const bool active = o < p.out;
  const int g = lane / P::kLanes, ib = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  const uint8_t* wp = p.w + (active ? o : 0) * p.w_row_bytes + g * P::kBytes;
  typename P::Raw ring[D];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    if (active && g + k * kGroups < nb) ring[k] = P::LoadRaw(wp + k * kGroups * P::kBytes, ib);
  }
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int pieces = static_cast<int>(p.in / 32);
  uint4* first = staged;
  uint4* second = staged + pieces;
  auto* scales = reinterpret_cast<float*>(staged + 2 * pieces);
  const auto* xq = reinterpret_cast<const uint4*>(p.xq);
  for (int i = static_cast<int>(threadIdx.x); i < 2 * pieces; i += kThreads) {
    const uint4 v = __ldg(xq + i);
    if (i & 1) {
      second[i >> 1] = v;
    } else {
      first[i >> 1] = v;
    }
  }
  for (int i = static_cast<int>(threadIdx.x); i < pieces; i += kThreads) {
    scales[i] = __ldg(&p.xd[i].x);
  }
  __syncthreads();
  if (!active) return;
  int piece = g * kPieces + ib;  // this lane's piece of block b = g, g + kGroups, ...
  float acc = 0.0f;
  for (int b0 = g; b0 < nb; b0 += D * kGroups) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int b = b0 + k * kGroups;
      if (b < nb) {
        const typename P::W wv = P::Decode(ring[k], b, ib, p);
        if (b + D * kGroups < nb) {
          ring[k] = P::LoadRaw(wp + (k + D) * kGroups * P::kBytes, ib);
        }
        const int at = piece + k * kGroups * kPieces;
        typename P::X x;
        x.a = first[at];
        x.b = second[at];
        x.d = scales[at];
        acc += P::Dot(wv, x, ib);
      }
    }
    wp += D * kGroups * P::kBytes;
    piece += D * kGroups * kPieces;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  if (lane == 0) p.y[o] = acc;
}

}  // namespace

std::atomic<int>& GemvActivationsSmemSetting() {
  static std::atomic<int> setting{[] {
    const char* v = std::getenv("STEPSERVE_GEMV_ACT_SMEM");
    return v != nullptr && v[0] == '1' ? 1 : 0;
  }()};
  return setting;
}

cudaError_t LaunchGemvIq4XsOneRowSmem(const GemvParams& p, bool overlap_previous,
                                      cudaStream_t stream) {
  // The default (48 KiB) dynamic shared memory limit: rows up to ~46k weights.
  if (p.rows != 1 || p.in % PieceIQ4_XS::kElems != 0 || StagedBytes(p.in) > 48 * 1024 ||
      reinterpret_cast<uintptr_t>(p.xq) % 16 != 0) {
    return cudaErrorNotSupported;
  }
  const dim3 grid(static_cast<unsigned>((p.out + kWarpsPerBlock - 1) / kWarpsPerBlock));
  return LaunchOverlapping(overlap_previous || PdlEnabled(),
                           GemvIq4XsOneRowSmemKernel<PieceIQ4_XS::kDepth1>, grid, dim3(kThreads),
                           StagedBytes(p.in), stream, p);
}

}  // namespace stepserve::kernels::gemv_internal
