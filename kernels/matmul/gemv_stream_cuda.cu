// One-activation-row int8 GEMV that streams the weights through shared memory with the Hopper
// bulk-copy engine (cp.async.bulk, "TMA" without a tensor map) - the batch-1 decode path.
//
// Why: the warp-per-row kernel (gemv_q8x_cuda.cu) holds a row's loads in registers, so the bytes
// in flight per SM are capped by registers and warps (one row of 2-7 KB per warp, 32 warps at the
// 64-register cap). Here one thread per CTA keeps up to ~200 KB per SM of contiguous weight rows
// in flight as bulk copies into a ring of shared-memory stages, and groups of eight consumer warps
// take turns decoding a stage (one row each, the same per-type decoders reading shared memory)
// while the next ones arrive. Per-lane arithmetic and its order are those of the warp-per-row
// kernel, so the two give the same sums.
// Measured on the H200 (docs/cuda-engine.md): more bytes in flight was not what the warp-per-row
// kernel lacked for the 4-bit types - both are issue-bound on the decode (~45% of a read-only
// kernel over the same bytes) - but this one is faster for Q6_K (24-27 us vs 30-34 for 41 MB) and
// for the 433 MB LM head, so GemvStreamMode::kAuto uses it there only.
//
// Work units are (group, chunk of kRowsPerStage rows); a persistent grid of one CTA per SM takes
// units in a stride, so a stage never straddles two matrices (indexed / MoE mode: group g reads
// matrix ids[g]). A unit whose id is out of range copies nothing and writes zero rows.
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/matmul_cuda.h"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/gemv_q8x_pieces_low_bit.cuh"  // (for Q6KPiece)

constexpr int kRowsPerStage = 8;  // one row per consumer warp of a group
// Groups of kRowsPerStage consumer warps take turns on the stages (group g consumes the stages of
// units g, g + kGroups, ...): more warps in flight to hide the shared-memory and activation load
// latency (ncu with one group: 2.2 warps per scheduler, 65% of cycles with none eligible).
constexpr int kConsumerGroups = 2;
constexpr int kConsumerWarps = kRowsPerStage * kConsumerGroups;
constexpr int kStreamThreads = 32 * (kConsumerWarps + 1);  // + one producer warp
constexpr int kMaxStages = 16;
// Shared memory the ring may use: leaves room under the 227 KB opt-in limit of sm_90.
constexpr int64_t kRingBudget = 200 * 1024;
constexpr int kBarrierBytes = 2 * kMaxStages * 8;

// ---- mbarrier and bulk-copy primitives (PTX ISA 8.0, sm_90) ----
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void BarrierInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(bar)), "r"(count));
}
// Arrival of the producer that also announces `bytes` of bulk copies completing on this barrier.
__device__ __forceinline__ void BarrierArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SharedAddress(bar)) : "memory");
}
// Spins until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void BarrierWait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = SharedAddress(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  }
}
// Global -> shared bulk copy of `bytes` (multiple of 16, both addresses 16-byte aligned) that
// completes its bytes on `bar`. The weights are read once: evict-first in L2.
__device__ __forceinline__ void BulkCopy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                         uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

struct StreamPlan {
  int64_t chunks_per_group;  // ceil(out / kRowsPerStage)
  int64_t units;             // groups * chunks_per_group
  int64_t stage_bytes;       // kRowsPerStage * w_row_bytes
  int stages;
};

// The weight matrix of `group` (plain mode: the only one), or null for an out-of-range id.
template <bool kIndexed>
__device__ __forceinline__ const uint8_t* UnitMatrix(const GemvParams& p, int64_t group) {
  if constexpr (kIndexed) {
    const int32_t id = p.matrix_ids[group];
    if (id < 0 || id >= p.n_matrices) return nullptr;
    return p.w + id * p.w_matrix_bytes;
  }
  return p.w;
}

// The warp's dot product of one weight row (in shared memory) with activation row x_row: the
// lane -> piece mapping, block order and accumulation of AccumulateRows<P, 1, 1, D>.
template <class P>
__device__ __forceinline__ float DotSharedRow(const GemvParams& p, const uint8_t* row, int x_row,
                                              int lane) {
  constexpr int kBlocksPerStep = 32 / P::kLanes;
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int64_t nb = p.in / P::kElems;
  float acc = 0.f;
#pragma unroll 4
  for (int64_t b = g; b < nb; b += kBlocksPerStep) {
    const typename P::Raw raw = P::template LoadRaw<PlainLoad>(row + b * P::kBytes, c);
    const typename P::W w = P::Decode(raw, b, c, p);
    acc += P::Dot(w, P::LoadX(p, x_row, b, c), c);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, off);
  return acc;
}

template <class P, bool kIndexed>
__global__ void __launch_bounds__(kStreamThreads, 1)
    GemvStreamKernel(const __grid_constant__ GemvParams p, const StreamPlan plan) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxStages;
  uint8_t* ring = smem + kBarrierBytes;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < plan.stages; ++s) {
      BarrierInit(&full[s], 1);               // the producer's arrive (+ the copy's bytes)
      BarrierInit(&empty[s], kRowsPerStage);  // one arrive per warp of the consuming group
    }
    // Make the initialised barriers visible to the bulk-copy (async) proxy.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: one thread issues every copy
    if (lane != 0) return;
    // Only weights are read before the previous grid (the quantizer) finishes; the router that
    // writes indexed ids may still run, so that mode waits first.
    if constexpr (kIndexed) WaitForPrimaryGrid();
    const uint64_t policy = EvictFirstPolicy();
    int64_t it = 0;
    for (int64_t u = blockIdx.x; u < plan.units; u += gridDim.x, ++it) {
      const int s = static_cast<int>(it % plan.stages);
      BarrierWait(&empty[s], static_cast<uint32_t>(((it / plan.stages) & 1) ^ 1));
      const int64_t group = u / plan.chunks_per_group, chunk = u % plan.chunks_per_group;
      const uint8_t* w = UnitMatrix<kIndexed>(p, group);
      const int64_t row0 = chunk * kRowsPerStage;
      const int64_t n = p.out - row0 < kRowsPerStage ? p.out - row0 : kRowsPerStage;
      if (w == nullptr) {
        BarrierArrive(&full[s]);  // nothing to copy: the consumers write zeros
      } else {
        const uint32_t bytes = static_cast<uint32_t>(n * p.w_row_bytes);
        BarrierArriveExpectTx(&full[s], bytes);
        BulkCopy(ring + s * plan.stage_bytes, w + row0 * p.w_row_bytes, bytes, &full[s], policy);
      }
    }
    return;
  }

  // Consumers: warp `warp` of group `cg` takes row `warp % kRowsPerStage` of every
  // kConsumerGroups-th stage.
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int cg = warp / kRowsPerStage, row_in_stage = warp % kRowsPerStage;
  int64_t it = cg;
  for (int64_t u = blockIdx.x + static_cast<int64_t>(cg) * gridDim.x; u < plan.units;
       u += static_cast<int64_t>(kConsumerGroups) * gridDim.x, it += kConsumerGroups) {
    const int s = static_cast<int>(it % plan.stages);
    const int64_t group = u / plan.chunks_per_group, chunk = u % plan.chunks_per_group;
    const int64_t row = chunk * kRowsPerStage + row_in_stage;
    const int x_row = kIndexed ? static_cast<int>(group / p.x_group_div) : 0;
    const int64_t y_row = kIndexed ? group : 0;
    const bool valid = UnitMatrix<kIndexed>(p, group) != nullptr;
    BarrierWait(&full[s], static_cast<uint32_t>((it / plan.stages) & 1));
    if (row < p.out) {
      const float v =
          valid ? DotSharedRow<P>(p, ring + s * plan.stage_bytes + row_in_stage * p.w_row_bytes,
                                  x_row, lane)
                : 0.f;
      if (lane == 0) p.y[y_row * p.y_stride + row] = v;
    }
    __syncwarp();
    if (lane == 0) BarrierArrive(&empty[s]);
  }
}

int StreamModeFromEnv() {
  const char* v = std::getenv("STEPSERVE_GEMV_STREAM");
  if (v == nullptr || v[0] < '0' || v[0] > '2') return 1;  // kAuto
  return v[0] - '0';
}

// The current device's limits, read once per device ordinal.
constexpr int kMaxDevices = 64;
struct DeviceLimits {
  int device = 0;
  int sms = 0;
  int64_t smem_optin = 0;
};
cudaError_t GetLimits(DeviceLimits* limits) {
  static DeviceLimits cache[kMaxDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 0 || device >= kMaxDevices) return cudaErrorNotSupported;
  if (cache[device].sms > 0) {
    *limits = cache[device];
    return cudaSuccess;
  }
  int sms = 0, smem = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (err != cudaSuccess) return err;
  limits->device = device;
  limits->sms = sms;
  limits->smem_optin = smem;
  cache[device] = *limits;  // a racing thread writes the same values
  return cudaSuccess;
}

template <class P, bool kIndexed>
cudaError_t LaunchStream(const GemvParams& p, int64_t groups, bool overlap_previous,
                         cudaStream_t stream) {
  DeviceLimits limits;
  cudaError_t err = GetLimits(&limits);
  if (err != cudaSuccess) return err;
  StreamPlan plan;
  plan.stage_bytes = kRowsPerStage * p.w_row_bytes;
  const int64_t budget = limits.smem_optin - kBarrierBytes < kRingBudget
                             ? limits.smem_optin - kBarrierBytes
                             : kRingBudget;
  const int64_t fit = budget / plan.stage_bytes;
  if (fit < 2) return cudaErrorNotSupported;  // rows too long to double-buffer: other kernel
  plan.stages = static_cast<int>(fit < kMaxStages ? fit : kMaxStages);
  plan.chunks_per_group = (p.out + kRowsPerStage - 1) / kRowsPerStage;
  plan.units = groups * plan.chunks_per_group;
  const int64_t smem = kBarrierBytes + plan.stages * plan.stage_bytes;
  // The attribute belongs to the kernel on one device: set once per device to the largest ring
  // (every later launch fits under it). Not a stream operation, so it is also safe while a graph
  // is being captured.
  static std::atomic<uint64_t> attribute_set{0};
  const uint64_t bit = uint64_t{1} << limits.device;
  if ((attribute_set.load(std::memory_order_acquire) & bit) == 0) {
    err = cudaFuncSetAttribute(GemvStreamKernel<P, kIndexed>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kBarrierBytes + budget));
    if (err != cudaSuccess) return err;
    attribute_set.fetch_or(bit, std::memory_order_release);
  }
  const dim3 grid(static_cast<unsigned>(plan.units < limits.sms ? plan.units : limits.sms));
  return LaunchOverlapping(overlap_previous || PdlEnabled(), GemvStreamKernel<P, kIndexed>, grid,
                           dim3(kStreamThreads), static_cast<size_t>(smem), stream, p, plan);
}

template <bool kIndexed>
cudaError_t LaunchStreamTyped(GgmlType type, const GemvParams& p, int64_t groups,
                              bool overlap_previous, cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchStream<PieceQ8_0, kIndexed>(p, groups, overlap_previous, stream);
    case GgmlType::kQ4_K:
      return LaunchStream<PieceQ4_K, kIndexed>(p, groups, overlap_previous, stream);
    case GgmlType::kQ5_K:
      return LaunchStream<PieceQ5_K, kIndexed>(p, groups, overlap_previous, stream);
    case GgmlType::kQ6_K:
      return LaunchStream<Q6KPiece, kIndexed>(p, groups, overlap_previous, stream);
    case GgmlType::kIQ4_XS:
      return LaunchStream<PieceIQ4_XS, kIndexed>(p, groups, overlap_previous, stream);
    default:
      return cudaErrorNotSupported;
  }
}

}  // namespace

std::atomic<int>& GemvStreamModeSetting() {
  static std::atomic<int> mode{StreamModeFromEnv()};
  return mode;
}

cudaError_t LaunchGemvQ8xStream(GgmlType type, const GemvParams& p, int64_t groups,
                                bool overlap_previous, cudaStream_t stream) {
  if (p.rows != 1 || groups < 1 || reinterpret_cast<uintptr_t>(p.w) % 16 != 0 ||
      p.w_row_bytes % 16 != 0 || (p.matrix_ids != nullptr && p.w_matrix_bytes % 16 != 0)) {
    return cudaErrorNotSupported;
  }
  // Auto: where the streamed kernel measured faster on the H200. bench_gemv --quick (26-53 MB):
  // Q6_K 25.8-28.3 us vs 30.1-33.9 warp-per-row, the 4-bit types and Q8_0 within +-10% either
  // way; in whole-model decode (many 1-8 MB matrices, where one CTA per SM and the ring's fill
  // cost more than they save) the warp-per-row kernel was 1.7% faster; the 433 MB Q6_K LM head
  // streams at 2.3 TB/s.
  const int mode = GemvStreamModeSetting().load(std::memory_order_relaxed);
  if (mode == static_cast<int>(GemvStreamMode::kNever)) return cudaErrorNotSupported;
  if (mode == static_cast<int>(GemvStreamMode::kAuto) && type != GgmlType::kQ6_K &&
      p.out * p.w_row_bytes * groups < kGemvStreamAutoBytes) {
    return cudaErrorNotSupported;
  }
  return p.matrix_ids != nullptr
             ? LaunchStreamTyped<true>(type, p, groups, overlap_previous, stream)
             : LaunchStreamTyped<false>(type, p, 1, overlap_previous, stream);
}

}  // namespace stepserve::kernels::gemv_internal
