// CUDA KV append (paged_attention_cuda.h): one CTA per token copies its K and V rows into the
// token's cache slot, converting to F16 for F16 caches. Bound by memory traffic of a few KiB per
// token, so a plain coalesced copy is all it needs.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/pdl.cuh"

namespace stepserve::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void Store(float* dst, float x) { *dst = x; }
__device__ __forceinline__ void Store(__half* dst, float x) { *dst = __float2half_rn(x); }

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

}  // namespace

KernelStatus KvAppendCuda(const KvAppendArgs& a, cudaStream_t stream) {
  const PagedKv& kv = a.kv;
  if (kv.k == nullptr || kv.v == nullptr) return KernelStatus::kInvalidArgument;
  if (kv.dtype != KvDtype::kF32 && kv.dtype != KvDtype::kF16) return KernelStatus::kUnsupportedType;
  if (kv.num_blocks <= 0 || kv.block_size <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.tokens < 0 || a.k == nullptr || a.v == nullptr || a.slots == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t width = kv.kv_heads * kv.head_dim;
  if (a.k_stride < width || a.v_stride < width) return KernelStatus::kInvalidArgument;
  if (a.tokens > 0x7FFFFFFF) return KernelStatus::kTooLarge;
  if (a.tokens == 0) return KernelStatus::kOk;
  const int64_t total_slots = kv.num_blocks * kv.block_size;
  const unsigned grid = static_cast<unsigned>(a.tokens);
  if (kv.dtype == KvDtype::kF16) {
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
