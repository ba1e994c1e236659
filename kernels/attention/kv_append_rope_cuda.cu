// The fused q/k norm + RoPE + KV append kernel (kv_append_rope_cuda.h).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/kv_append_rope_cuda.h"
#include "kernels/attention/kv_append_store.cuh"
#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/common/cuda_reduce.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/rope/qk_norm_rope.cuh"

namespace stepserve::kernels {
namespace {

using cuda_reduce::kWarpSize;
using qk_norm_rope::kPerLane;

constexpr int kWarpsPerBlock = 8;

struct Params {
  QkNormRopeCudaArgs a;
  float tau;  // powf(base, -2 / n_rot) from the host, as QkNormRopeCuda passes it
  const float* v;
  int64_t v_stride;
  const int64_t* slots;
  int64_t total_slots;
  void* k_cache;
  void* v_cache;
  // The angle table, the slot and each warp's first norm weight before the programmatic-launch
  // wait (SetupBeforeWaitEnabled): positions and slots are staged by a host copy before the
  // step's kernels and the weights are never written, so only the q / k / v rows (the GEMV's
  // output) need the kernel before to finish.
  bool setup_before_wait;
};

// On unless STEPSERVE_ROPE_SETUP_BEFORE_WAIT=0 (read once). Why: at batch 1 the rope-and-append
// kernel sits alone between the q / k / gate GEMV and the attention, and its angle table (a serial
// product and cos / sin) and the norm weight's round trip after the head's reduction were on the
// step's critical path (graph profile, H100: 1.6 us a sliding-window layer, 3.4 us a
// full-attention one). Measured (H100, 24 layers, session 33 call 1, two alternating rounds, ms
// per step at 1 / 2 / 4 / 8 / 16 streams): off 2.399 / 3.282 / 5.080 / 7.935 / 11.391 and 2.408 /
// 3.287 / 5.086 / 7.966 / 11.402, on 2.401 / 3.264 / 5.050 / 7.887 / 11.345 and 2.388 / 3.250 /
// 5.029 / 7.887 / 11.368; its tests and the whole-model test pass both ways.
bool SetupBeforeWaitEnabled() {
  static const bool on = EnvSwitchOn("STEPSERVE_ROPE_SETUP_BEFORE_WAIT");
  return on;
}

// Head kh of the slot's K or V row: values[m] is element lane + 32 m (KvAppendKernel's and
// KvAppendQ8Kernel's element-to-byte mapping, so the same bytes).
template <KvDtype kDtype>
__device__ __forceinline__ void CacheHead(void* cache, int64_t slot, int64_t kh, int64_t dh,
                                          int64_t kv_heads, const float (&values)[kPerLane]) {
  const int lane = threadIdx.x % kWarpSize;
  if constexpr (kDtype == KvDtype::kQ8_0) {
    const int64_t row_blocks = kv_heads * dh / kKvQ8BlockElems;
    uint8_t* row = static_cast<uint8_t*>(cache) +
                   (slot * row_blocks + kh * dh / kKvQ8BlockElems) * kKvQ8BlockBytes;
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      if (m * kWarpSize < dh) kv_append::StoreQ8Block(row + m * kKvQ8BlockBytes, values[m], lane);
    }
  } else {
    using T = std::conditional_t<kDtype == KvDtype::kF16, __half, float>;
    T* dst = static_cast<T*>(cache) + slot * kv_heads * dh + kh * dh;
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int64_t i = lane + m * kWarpSize;
      if (i < dh) kv_append::Store(dst + i, values[m]);
    }
  }
}

// Grid: x = token, y = a chunk of kWarpsPerBlock heads: q heads, then k heads (normalised,
// rotated, written back and cached), then v heads (cached). A slot outside the cache (-1: a row
// of no sequence) skips the caching, as KvAppendCuda does.
template <KvDtype kDtype>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarpSize) QkNormRopeAppendKernel(Params params) {
  const bool early = params.setup_before_wait;
  if (!early) {
    WaitForPrimaryGrid();
    AllowDependentLaunch();
  }
  __shared__ qk_norm_rope::SharedTables<kWarpsPerBlock> shared;
  const QkNormRopeCudaArgs& a = params.a;
  const int64_t t = blockIdx.x;
  const int64_t dh = a.head_dim;
  qk_norm_rope::BuildAngles(a, params.tau, t, shared.cos, shared.sin);
  __syncthreads();
  const int64_t slot = params.slots[t];
  const bool cache = slot >= 0 && slot < params.total_slots;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t qk_heads = a.q_heads + a.k_heads, heads = qk_heads + a.k_heads;
  const int64_t first_head = int64_t{blockIdx.y} * kWarpsPerBlock + warp;
  // The norm weight of the warp's first head (q or k), loaded before the wait when `early`.
  float first_weight[kPerLane];
  if (early) {
    if (first_head < qk_heads) {
      qk_norm_rope::LoadHeadWeight(a, first_head < a.q_heads ? a.q_norm : a.k_norm, first_weight);
    }
    WaitForPrimaryGrid();  // the q / k / v rows come from the kernel before
    AllowDependentLaunch();
  }
  for (int64_t h = first_head; h < heads; h += int64_t{gridDim.y} * kWarpsPerBlock) {
    float values[kPerLane];
    if (h < qk_heads) {
      const bool is_q = h < a.q_heads;
      float* x = is_q ? a.q + t * a.q_stride + h * dh : a.k + t * a.k_stride + (h - a.q_heads) * dh;
      if (early && h == first_head) {
        qk_norm_rope::NormRopeHead(a, x, first_weight, shared.cos, shared.sin, shared.staged[warp],
                                   values);
      } else {
        qk_norm_rope::NormRopeHead(a, x, is_q ? a.q_norm : a.k_norm, shared.cos, shared.sin,
                                   shared.staged[warp], values);
      }
      if (!is_q && cache) {
        CacheHead<kDtype>(params.k_cache, slot, h - a.q_heads, dh, a.k_heads, values);
      }
    } else if (cache) {
      const int64_t kh = h - qk_heads;
      const float* x = params.v + t * params.v_stride + kh * dh;
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) {
        const int64_t i = lane + m * kWarpSize;
        values[m] = i < dh ? x[i] : 0.0f;
      }
      CacheHead<kDtype>(params.v_cache, slot, kh, dh, a.k_heads, values);
    }
  }
}

}  // namespace

bool QkNormRopeAppendCudaApplies(const QkNormRopeCudaArgs& rope, const KvAppendArgs& append) {
  return rope.k != nullptr && append.k == rope.k && append.k_stride == rope.k_stride &&
         append.tokens == rope.tokens && append.kv.head_dim == rope.head_dim &&
         append.kv.kv_heads == rope.k_heads;
}

KernelStatus QkNormRopeAppendCuda(const QkNormRopeCudaArgs& rope, const KvAppendArgs& append,
                                  cudaStream_t stream) {
  if (KernelStatus s = ValidateQkNormRopeCuda(rope); s != KernelStatus::kOk) return s;
  if (KernelStatus s = ValidateKvAppendCuda(append); s != KernelStatus::kOk) return s;
  if (!QkNormRopeAppendCudaApplies(rope, append)) return KernelStatus::kUnsupportedType;
  if (rope.tokens == 0) return KernelStatus::kOk;
  Params params;
  params.a = rope;
  params.tau = std::pow(rope.base, -2.0f / static_cast<float>(rope.n_rot));  // float: powf
  params.v = append.v;
  params.v_stride = append.v_stride;
  params.slots = append.slots;
  params.total_slots = append.kv.num_blocks * append.kv.block_size;
  params.k_cache = append.kv.k;
  params.v_cache = append.kv.v;
  params.setup_before_wait = SetupBeforeWaitEnabled();
  constexpr int64_t kMaxGridY = 65535;  // further head chunks are looped over in the kernel
  const int64_t heads = rope.q_heads + 2 * rope.k_heads;
  const int64_t chunks = (heads + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const dim3 grid(static_cast<unsigned>(rope.tokens),
                  static_cast<unsigned>(chunks < kMaxGridY ? chunks : kMaxGridY));
  const dim3 block(kWarpsPerBlock * kWarpSize);
  switch (append.kv.dtype) {
    case KvDtype::kQ8_0:
      LaunchWithPdl(QkNormRopeAppendKernel<KvDtype::kQ8_0>, grid, block, 0, stream, params);
      break;
    case KvDtype::kF16:
      LaunchWithPdl(QkNormRopeAppendKernel<KvDtype::kF16>, grid, block, 0, stream, params);
      break;
    default:
      LaunchWithPdl(QkNormRopeAppendKernel<KvDtype::kF32>, grid, block, 0, stream, params);
      break;
  }
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

}  // namespace stepserve::kernels
