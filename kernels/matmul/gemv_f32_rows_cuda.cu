// GemvF32RowsCuda (gemv_f32_rows_cuda.h): the F32 GEMV of 2-16 activation rows - the MoE router
// (288 x 4096 F32) at 2-16 decode streams - with each activation row read once per K slice
// instead of once per output row.
//
// Why: GemvGenericKernel gives each output row a CTA whose eight warps split K, so every CTA reads
// all activation rows: at 16 rows 288 CTAs x 256 KB = 75 MB of L2 reads for a 4.7 MB matrix (27.7
// us a MoE layer at 16 streams on the H100, session 36's timeline; 8.6 us at 4). Measured on the
// H100 (session 37, 24 layers IQ4_XS, two alternating rounds, ms per step at 4 / 8 / 16 streams):
// 4.976 / 7.784 / 11.181 and 4.986 / 7.829 / 11.252 -> 4.914 / 7.610 / 10.727 and 4.908 / 7.618 /
// 10.763 (-1.4% / -2.5% / -4.2%); at 16 streams the router adds 6.5 us a MoE layer, not 27.7.
//
// Here a cluster of C CTAs (sm_90 thread-block cluster, C = 1..8) shares 16 output rows and splits
// K in C slices. Each CTA stages its K slice of the activation rows in shared memory once (at 16
// rows and K = 4096: 32 KB a CTA, 4.7 MB over the 144 CTAs) and each of its eight warps dots two
// output rows' weights (float4 loads, the first ones issued before the programmatic-launch wait)
// with every staged row. A warp reduces its 2 x T sums by a reduce-scatter across lanes (each lane
// ends with one complete sum); the C CTAs' partial sums are added through distributed shared
// memory in rank order, so the result is deterministic.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_f32_rows_cuda.h"

namespace stepserve::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 2;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // output rows a cluster shares
constexpr int kMaxCluster = 8;                     // the portable cluster size limit
// float4 columns of a staged piece: four per lane. A slice longer than this (K > 8 x 512) is
// staged piece by piece.
constexpr int kPiece4 = 4 * 32;

struct GemvF32RowsParams {
  const float* w;
  int64_t w_row_floats;  // a multiple of 4
  int64_t in4;           // in / 4
  int64_t out;
  const float* x;
  int64_t x_stride;  // a multiple of 4
  int rows;
  float* y;
  int64_t y_stride;
  int64_t slice4;  // float4 columns of K per cluster rank
};

// Sums v[0..N) over the 32 lanes and leaves sum N * lane / 32 in v[0] of every lane whose low
// 5 - log2(N) bits are zero (others hold a duplicate): each halving step sends half of the values
// to the partner lane, so N = 32 sums take 31 shuffles instead of 160. Fixed order: deterministic.
template <int N>
__device__ __forceinline__ void ReduceScatterWarp(float (&v)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "N: a power of two up to 32");
  int n = N;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    if (n > 1) {
      const bool upper = (lane & offset) != 0;
      const int half = n / 2;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        if (i < half) {
          const float send = upper ? v[i] : v[i + half];
          const float keep = upper ? v[i + half] : v[i];
          v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
        }
      }
      n = half;
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], offset);
    }
  }
}

template <int kT>
__global__ void __launch_bounds__(kThreads) GemvF32RowsKernel(GemvF32RowsParams p) {
  __shared__ float4 xs[kT][kPiece4];
  __shared__ float partial[kBlockRows * kT];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int cluster_size = static_cast<int>(cluster.num_blocks());
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kBlockRows + warp * kRowsPerWarp;
  const int64_t k_begin = rank * p.slice4;
  const int64_t k_end = min(p.in4, k_begin + p.slice4);
  const float4* w_rows[kRowsPerWarp];
  bool row_ok[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row_ok[r] = row0 + r < p.out;
    w_rows[r] = reinterpret_cast<const float4*>(p.w + (row_ok[r] ? row0 + r : 0) * p.w_row_floats);
  }
  // The first piece's weights before the wait: no kernel writes them.
  float4 w[kRowsPerWarp][4];
  auto load_weights = [&](int64_t piece) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t c = piece + lane + 32 * j;
        w[r][j] = row_ok[r] && c < k_end ? __ldcs(w_rows[r] + c) : make_float4(0, 0, 0, 0);
      }
    }
  };
  load_weights(k_begin);
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  float acc[kRowsPerWarp * kT];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp * kT; ++i) acc[i] = 0.0f;
  for (int64_t piece = k_begin; piece < k_end; piece += kPiece4) {
    if (piece != k_begin) {
      __syncthreads();  // every warp is done with the previous piece's staged rows
      load_weights(piece);
    }
    const int n4 = static_cast<int>(min(static_cast<int64_t>(kPiece4), k_end - piece));
    for (int i = threadIdx.x; i < kT * kPiece4; i += kThreads) {
      const int t = i / kPiece4;
      const int c = i % kPiece4;
      xs[t][c] = t < p.rows && c < n4
                     ? reinterpret_cast<const float4*>(p.x + t * p.x_stride)[piece + c]
                     : make_float4(0, 0, 0, 0);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = lane + 32 * j;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const float4 xv = xs[t][c];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          float& a = acc[r * kT + t];
          a = fmaf(w[r][j].x, xv.x, a);
          a = fmaf(w[r][j].y, xv.y, a);
          a = fmaf(w[r][j].z, xv.z, a);
          a = fmaf(w[r][j].w, xv.w, a);
        }
      }
    }
  }
  ReduceScatterWarp(acc, lane);
  constexpr int kN = kRowsPerWarp * kT;
  constexpr int kLanesPerSum = 32 / kN;
  if (lane % kLanesPerSum == 0) {
    const int i = lane / kLanesPerSum;  // = r * kT + t
    partial[(warp * kRowsPerWarp + i / kT) * kT + i % kT] = acc[0];
  }
  cluster.sync();  // every rank's partial sums written and visible across the cluster
  // Rank c adds, in rank order, the elements e of the block with e % cluster_size == c.
  const int e = threadIdx.x;
  if (e < kBlockRows * kT && e % cluster_size == rank) {
    const int t = e % kT;
    const int64_t o = static_cast<int64_t>(blockIdx.y) * kBlockRows + e / kT;
    if (t < p.rows && o < p.out) {
      float v = 0.0f;
      for (int s = 0; s < cluster_size; ++s) v += cluster.map_shared_rank(partial, s)[e];
      p.y[t * p.y_stride + o] = v;
    }
  }
  cluster.sync();  // no CTA leaves while another still reads its shared memory
}

static_assert(kThreads >= kBlockRows * 16, "one thread per (output row, activation row)");

template <int kT>
cudaError_t LaunchRows(const GemvF32RowsParams& p, int cluster_size, int64_t row_blocks,
                       cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster_size), static_cast<unsigned>(row_blocks), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster_size);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = PdlEnabled() ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, GemvF32RowsKernel<kT>, p);
}

}  // namespace

bool GemvF32RowsEnabled() {
  static const bool on = EnvSwitchOn("STEPSERVE_GEMV_F32_ROWS");
  return on;
}

bool GemvF32RowsTakes(const MatmulCudaArgs& a) {
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return a.type == GgmlType::kF32 && a.rows >= 2 && a.rows <= kGemvGenericMaxRows &&
         a.in % 4 == 0 && a.w_row_bytes % 16 == 0 && a.x_stride % 4 == 0 && aligned16(a.w) &&
         aligned16(a.x) && a.out > 0;
}

KernelStatus GemvF32RowsCuda(const MatmulCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateMatmulCuda(a); s != KernelStatus::kOk) return s;
  if (!GemvF32RowsTakes(a)) return KernelStatus::kInvalidArgument;
  GemvF32RowsParams p{};
  p.w = static_cast<const float*>(a.w);
  p.w_row_floats = a.w_row_bytes / 4;
  p.in4 = a.in / 4;
  p.out = a.out;
  p.x = a.x;
  p.x_stride = a.x_stride;
  p.rows = static_cast<int>(a.rows);
  p.y = a.y;
  p.y_stride = a.y_stride;
  // About one staged piece (512 floats of K) a rank: 8 ranks at K = 4096.
  const int cluster_size =
      static_cast<int>(std::clamp<int64_t>((p.in4 + kPiece4 - 1) / kPiece4, 1, kMaxCluster));
  p.slice4 = (p.in4 + cluster_size - 1) / cluster_size;
  const int64_t row_blocks = (a.out + kBlockRows - 1) / kBlockRows;
  if (row_blocks > 65535) return KernelStatus::kTooLarge;  // gridDim.y
  cudaError_t e;
  if (a.rows <= 4) {
    e = LaunchRows<4>(p, cluster_size, row_blocks, stream);
  } else if (a.rows <= 8) {
    e = LaunchRows<8>(p, cluster_size, row_blocks, stream);
  } else {
    e = LaunchRows<16>(p, cluster_size, row_blocks, stream);
  }
  if (e != cudaSuccess || cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
