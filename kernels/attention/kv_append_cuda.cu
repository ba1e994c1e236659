// CUDA KV append (paged_attention_cuda.h): one CTA per token writes its K and V rows into the
// token's cache slot. F32 / F16 caches: a coalesced copy (converting to F16), bound by memory
// traffic of a few KiB per token. Q8_0 caches: one warp per 32-value block, quantized in registers
// with the same operations, in the same order, as engine/quant's QuantQ8_0, so the bytes equal
// the CPU append's.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention/kv_append_store.cuh"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/pdl.cuh"

namespace stepserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

using kv_append::Store;

template <typename KvT>
__global__ void __launch_bounds__(kThreads)
    KvAppendKernel(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                   const int64_t* slots, int64_t total_slots, int64_t width, KvT* k_cache,
                   KvT* v_cache) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= total_slots) return;  // -1: skipped token; beyond: never write
  const float* k_row = k + t * k_stride;
  const float* v_row = v + t * v_stride;
  KvT* k_dst = k_cache + slot * width;
  KvT* v_dst = v_cache + slot * width;
  for (int64_t i = threadIdx.x; i < width; i += kThreads) {
    Store(k_dst + i, k_row[i]);
    Store(v_dst + i, v_row[i]);
  }
}

// Q8_0: a slot's kv_heads vectors are contiguous, so its K (or V) row is `row_blocks` consecutive
// 34-byte blocks (F16 scale d, 32 int8 q). Warp w quantizes blocks w, w + kWarps, ... of K then V;
// lane j owns value j of the block.
__global__ void __launch_bounds__(kThreads)
    KvAppendQ8Kernel(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                     const int64_t* slots, int64_t total_slots, int row_blocks, uint8_t* k_cache,
                     uint8_t* v_cache) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0 || slot >= total_slots) return;
  const int lane = threadIdx.x & 31;
  for (int b = threadIdx.x >> 5; b < 2 * row_blocks; b += kWarps) {
    const bool is_k = b < row_blocks;
    const int blk = is_k ? b : b - row_blocks;
    const float x = (is_k ? k + t * k_stride : v + t * v_stride)[blk * kKvQ8BlockElems + lane];
    uint8_t* dst = (is_k ? k_cache : v_cache) + (slot * row_blocks + blk) * kKvQ8BlockBytes;
    kv_append::StoreQ8Block(dst, x, lane);
  }
}

}  // namespace

KernelStatus ValidateKvAppendCuda(const KvAppendArgs& a) {
  const PagedKv& kv = a.kv;
  if (KernelStatus s = ValidatePagedKvCuda(kv); s != KernelStatus::kOk) return s;
  if (a.tokens < 0 || a.k == nullptr || a.v == nullptr || a.slots == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t width = kv.kv_heads * kv.head_dim;
  if (a.k_stride < width || a.v_stride < width) return KernelStatus::kInvalidArgument;
  if (kv.dtype == KvDtype::kQ8_0) {
    // Whole blocks per vector; the scale stores need 2-byte aligned pages.
    if (KvVectorBytes(kv.dtype, kv.head_dim) == 0 || reinterpret_cast<uintptr_t>(kv.k) % 2 != 0 ||
        reinterpret_cast<uintptr_t>(kv.v) % 2 != 0) {
      return KernelStatus::kInvalidArgument;
    }
    if (width / kKvQ8BlockElems > 0x3FFFFFFF) return KernelStatus::kTooLarge;
  }
  if (a.tokens > 0x7FFFFFFF) return KernelStatus::kTooLarge;
  return KernelStatus::kOk;
}

KernelStatus KvAppendCuda(const KvAppendArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateKvAppendCuda(a); s != KernelStatus::kOk) return s;
  if (a.tokens == 0) return KernelStatus::kOk;
  const PagedKv& kv = a.kv;
  const int64_t width = kv.kv_heads * kv.head_dim;
  const int64_t total_slots = kv.num_blocks * kv.block_size;
  const unsigned grid = static_cast<unsigned>(a.tokens);
  if (kv.dtype == KvDtype::kQ8_0) {
    LaunchWithPdl(KvAppendQ8Kernel, grid, kThreads, 0, stream, a.k, a.k_stride, a.v, a.v_stride,
                  a.slots, total_slots, static_cast<int>(width / kKvQ8BlockElems),
                  static_cast<uint8_t*>(kv.k), static_cast<uint8_t*>(kv.v));
  } else if (kv.dtype == KvDtype::kF16) {
    LaunchWithPdl(KvAppendKernel<__half>, grid, kThreads, 0, stream, a.k, a.k_stride, a.v,
                  a.v_stride, a.slots, total_slots, width, static_cast<__half*>(kv.k),
                  static_cast<__half*>(kv.v));
  } else {
    LaunchWithPdl(KvAppendKernel<float>, grid, kThreads, 0, stream, a.k, a.k_stride, a.v,
                  a.v_stride, a.slots, total_slots, width, static_cast<float*>(kv.k),
                  static_cast<float*>(kv.v));
  }
  // cudaGetLastError also clears the launch error so it does not leak into the caller's checks.
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
