// The tall tensor-core GEMV: IQ4_XS weights x 2-16 rows of int8 activations (plain mode,
// GemvCudaActivations::kQ8), 64 output rows per CTA, under STEPSERVE_GEMV_MMA_TALL (off until
// measured; LaunchGemvQ8xMma tries it first when it is on).
//
// Why: the tensor-core GEMV (gemv_mma_cuda.cu) gives a CTA 16 output rows whose warps split K,
// each lane loading its activation fragments and scales straight from global memory. At 16 rows
// the activations are ~2.4x the weight bytes per K column (16 int8 + 4 bytes of scales against
// 16 x 0.53), and every 16-row CTA reads all of them again: the 4096-row projections of a
// 16-stream step ran at 0.48 instructions issued per cycle, their warps stalled 2.3-2.5 cycles per
// issue on the long scoreboard (H100, session 41 ncu). Here the 4 warps of a CTA own 16 rows each
// and walk the same pairs of blocks (StagedPair, mma_iq4_staged.cuh: the prefill's grouped GEMM
// tile): one cp.async stage holds the 64 rows' 512 weights and the activation rows' 512 int8 and
// 16 scales, copied once for the 64 rows and read from shared memory; three stages in flight. The
// first stages' weights are issued before the programmatic-launch wait (they do not depend on the
// kernel before), the activations after it.
//
// A matrix with few 64-row tiles (the 4096-row output projections: 64 tiles) splits K over a
// thread-block cluster of 2 or 4 CTAs along y (cluster.cuh): each CTA multiplies its share of the
// pairs, the partial sums meet in distributed shared memory, and rank r adds, in rank order (the
// same bits every run), the tiles of the warps w with w % splits == r and stores them - no trip
// through global memory, no second kernel.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/cluster.cuh"
#include "kernels/common/dynamic_smem.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/mma_iq4_util.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/mma_iq4_staged.cuh"

constexpr int kTallWarps = 4;
constexpr int kTallRows = 16 * kTallWarps;  // output rows per CTA
// Stages of the cp.async ring: 3 (modes 1, 2: NT = 2 fits 2 CTAs a multiprocessor) or 2 (modes 3,
// 4: 3 CTAs), a measured choice.
constexpr int kTallMaxSplits = 4;  // cluster CTAs along K (a portable cluster holds up to 8)

template <int NT>
using TallStage = StagedPair<kTallRows, 8 * NT>;
static_assert(TallStage<1>::kThreads == 32 * kTallWarps, "the stage copies assume the launch's");

template <int NT, int kTallStages>
constexpr size_t TallSharedBytes() {
  return size_t{kTallStages} * TallStage<NT>::kBytes +
         size_t{kTallWarps} * NT * 32 * sizeof(float4);
}

// Stores a warp's accumulators (lane g, t: rows oa and oa + 8, activation columns 8j + 2t, + 1)
// into y, dropping activation rows past p.rows and output rows past p.out.
template <int NT>
__device__ __forceinline__ void StoreTile(const GemvParams& p, int64_t oa, int t,
                                          const float4 (&v)[NT]) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int r0 = 8 * j + 2 * t, r1 = r0 + 1;
    const int64_t ob = oa + 8;
    if (oa < p.out) {
      if (r0 < p.rows) p.y[r0 * p.y_stride + oa] = v[j].x;
      if (r1 < p.rows) p.y[r1 * p.y_stride + oa] = v[j].y;
    }
    if (ob < p.out) {
      if (r0 < p.rows) p.y[r0 * p.y_stride + ob] = v[j].z;
      if (r1 < p.rows) p.y[r1 * p.y_stride + ob] = v[j].w;
    }
  }
}

// NT = activation-row tiles of 8 (rows <= 8 * NT). Grid (64-row tiles, K splits); the K splits of
// a tile form one cluster (launched with cluster y = gridDim.y). A split takes a contiguous range
// of pairs of blocks, the ranges as even as whole pairs allow.
template <int NT, int kTallStages>
__global__ void __launch_bounds__(32 * kTallWarps)
    GemvMmaIq4XsTallKernel(const __grid_constant__ GemvParams p) {
  using Stage = TallStage<NT>;
  extern __shared__ __align__(16) uint8_t tall_smem[];
  float4(*partial)[NT][32] =
      reinterpret_cast<float4(*)[NT][32]>(tall_smem + size_t{kTallStages} * Stage::kBytes);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kTallRows;
  const int64_t nb = p.in / 256, n_kp = (nb + 1) / 2;
  const int splits = static_cast<int>(gridDim.y);
  const int64_t kp0 = blockIdx.y * n_kp / splits;  // splits of n_kp / splits pairs, +1 for some
  const int64_t n_mine = (blockIdx.y + 1) * n_kp / splits - kp0;
  const int last = p.rows - 1;  // activation rows past it repeat it: computed, dropped
  const auto row_of = [last](int r) { return r < last ? r : last; };
  const auto full = [nb](int64_t kp) { return 2 * kp + 1 < nb; };

#pragma unroll
  for (int s = 0; s < kTallStages; ++s) {
    uint8_t* stage = tall_smem + s * Stage::kBytes;
    if (s >= n_mine) break;
    if (full(kp0 + s)) {
      Stage::template CopyWeights<true>(stage, p, p.w, o0, kp0 + s);
    } else {
      Stage::template CopyWeights<false>(stage, p, p.w, o0, kp0 + s);
    }
  }
  WaitForPrimaryGrid();  // the kernel writing xq / xd may still run
  AllowDependentLaunch();
#pragma unroll
  for (int s = 0; s < kTallStages; ++s) {
    uint8_t* stage = tall_smem + s * Stage::kBytes;
    if (s < n_mine) {
      if (full(kp0 + s)) {
        Stage::template CopyActivations<true>(stage, p, kp0 + s, row_of);
      } else {
        Stage::template CopyActivations<false>(stage, p, kp0 + s, row_of);
      }
    }
    CommitCopies();  // empty groups too: the wait below counts groups (the first holds the weights)
  }

  const uint32_t tbl[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
  float acc[NT][4] = {};
  for (int64_t k = 0; k < n_mine; ++k) {
    const int s = static_cast<int>(k % kTallStages);
    uint8_t* stage = tall_smem + s * Stage::kBytes;
    if constexpr (kTallStages == 3) {
      WaitCopiesButTwo();  // this thread's copies of stage k have landed
    } else {
      WaitCopiesButOne();
    }
    __syncthreads();  // and everyone's
    const int64_t kp = kp0 + k;
    Stage::template MmaBlock<NT>(stage, 0, warp, g, t, tbl, acc);
    if (full(kp)) Stage::template MmaBlock<NT>(stage, 1, warp, g, t, tbl, acc);
    __syncthreads();  // every warp is done with the stage before it is refilled
    if (k + kTallStages < n_mine) {
      Stage::CopyPair(stage, p, p.w, o0, kp + kTallStages, full(kp + kTallStages), row_of);
    }
    CommitCopies();
  }

  const int64_t oa = o0 + 16 * warp + g;
  if (splits == 1) {
    float4 v[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) v[j] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    StoreTile<NT>(p, oa, t, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    partial[warp][j][lane] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  }
  ClusterSync();  // every split's partial sums are in its shared memory
  const int rank = ClusterRank();
  if (warp % splits == rank) {
    float4 v[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      v[j] = ClusterLoadFloat4(&partial[warp][j][lane], 0);
      for (int q = 1; q < splits; ++q) {
        const float4 u = ClusterLoadFloat4(&partial[warp][j][lane], q);
        v[j].x += u.x;
        v[j].y += u.y;
        v[j].z += u.z;
        v[j].w += u.w;
      }
    }
    StoreTile<NT>(p, oa, t, v);
  }
  ClusterSync();  // no CTA leaves while another still reads its shared memory
}

// 0 off (the default until measured); 1 / 2: a 3-stage ring, K split until at least one / two
// CTAs per multiprocessor; 3 / 4: the same with a 2-stage ring.
int TallModeFromEnv() {
  const char* v = std::getenv("STEPSERVE_GEMV_MMA_TALL");
  if (v == nullptr || v[0] < '1' || v[0] > '4') return 0;
  return v[0] - '0';
}

// Multiprocessors of the current device, cached per device (up to 64).
std::atomic<int> multiprocessor_cache[64];
int MultiprocessorCount() {
  std::atomic<int>* cache = multiprocessor_cache;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (device >= 0 && device < 64) {
    if (const int sms = cache[device].load(std::memory_order_relaxed); sms > 0) return sms;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
  if (device >= 0 && device < 64) cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

std::atomic<long long> tall_launches{0};

template <int NT, int kStages>
cudaError_t LaunchTall(bool overlap, dim3 grid, int splits, const GemvParams& p,
                       cudaStream_t stream) {
  constexpr size_t kSmem = TallSharedBytes<NT, kStages>();
  static std::atomic<uint64_t> attribute_set{0};
  if (const cudaError_t err =
          SetDynamicSharedOnce(GemvMmaIq4XsTallKernel<NT, kStages>, kSmem, attribute_set);
      err != cudaSuccess) {
    return err;
  }
  const cudaError_t err =
      LaunchOverlappingCluster(overlap, GemvMmaIq4XsTallKernel<NT, kStages>, grid,
                               dim3(32 * kTallWarps), kSmem, stream, splits, p);
  if (err == cudaSuccess) tall_launches.fetch_add(1, std::memory_order_relaxed);
  return err;
}

}  // namespace

std::atomic<int>& GemvMmaTallSetting() {
  static std::atomic<int> mode{TallModeFromEnv()};
  return mode;
}

long long GemvMmaTallLaunches() { return tall_launches.load(std::memory_order_relaxed); }

int GemvMmaTallSplits(int64_t out, int64_t in, int sms, int mode) {
  const int64_t tiles = (out + kTallRows - 1) / kTallRows, n_kp = (in / 256 + 1) / 2;
  const int64_t target = sms * static_cast<int64_t>(mode % 2 == 0 ? 2 : 1);
  int splits = 1;
  // Halve the pairs per CTA while the grid is short of the target and each split keeps 2 pairs.
  while (splits < kTallMaxSplits && tiles * splits < target && n_kp >= 4 * splits) splits *= 2;
  return tiles * splits >= sms ? splits : 0;
}

cudaError_t LaunchGemvQ8xMmaTall(GgmlType type, const GemvParams& p, bool overlap_previous,
                                 cudaStream_t stream) {
  const int mode = GemvMmaTallSetting().load(std::memory_order_relaxed);
  if (mode == 0 || type != GgmlType::kIQ4_XS || !p.x_pair_order || p.rows < 2 ||
      p.rows > kGemvMmaMaxRows || p.in % 256 != 0 || p.matrix_ids != nullptr ||
      p.slot_matrix != nullptr) {
    return cudaErrorNotSupported;
  }
  const int sms = MultiprocessorCount();
  const int splits = sms > 0 ? GemvMmaTallSplits(p.out, p.in, sms, mode) : 0;
  if (splits == 0) return cudaErrorNotSupported;  // under a CTA per multiprocessor
  const dim3 grid(static_cast<unsigned>((p.out + kTallRows - 1) / kTallRows),
                  static_cast<unsigned>(splits));
  const bool overlap = overlap_previous || PdlEnabled();
  if (mode >= 3) {
    return p.rows <= 8 ? LaunchTall<1, 2>(overlap, grid, splits, p, stream)
                       : LaunchTall<2, 2>(overlap, grid, splits, p, stream);
  }
  return p.rows <= 8 ? LaunchTall<1, 3>(overlap, grid, splits, p, stream)
                     : LaunchTall<2, 3>(overlap, grid, splits, p, stream);
}

}  // namespace stepserve::kernels::gemv_internal
