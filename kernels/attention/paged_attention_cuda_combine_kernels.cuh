// The split-K combine kernels of the decode attention (paged_attention_cuda.cu launches them;
// include from there only): one CTA per (row, head) after the attention kernel - plain
// (CombineSplitsKernel), with the head gate and the O projection's int8 rows
// (CombineSplitsGateKernel), and the gated one with every independent load issued first
// (CombineSplitsGateEarlyKernel). The combine's math is paged_attention_cuda_combine.cuh's. The
// host emulation (tests/cuda_emu/paged_attention) inlines this header into the .cu's text.
#ifndef STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_COMBINE_KERNELS_CUH_
#define STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_COMBINE_KERNELS_CUH_

#include <cstdint>

#include "kernels/attention/paged_attention_cuda.h"
#include "kernels/attention/paged_attention_cuda_combine.cuh"
#include "kernels/attention/paged_attention_cuda_params.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/sigmoid.cuh"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels::paged_attention_cuda {

// The combine kernels' CTA (row w, head h) = blockIdx.x: after the wait for the attention kernel,
// the first warp's split weights into weight_s and 1 / total into *inv_total_s, then a barrier.
struct CombineCta {
  int64_t w, part0;
  int h;
};
__device__ __forceinline__ CombineCta CombineSplitWeights(const KernelParams& p, float* weight_s,
                                                          float* inv_total_s) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  CombineCta cta;
  cta.w = blockIdx.x / p.heads;
  cta.h = static_cast<int>(blockIdx.x % p.heads);
  cta.part0 = (cta.w * p.heads + cta.h) * p.splits;
  if (threadIdx.x < 32) {
    const float inv_total =
        SplitWeights(p.part_max + cta.part0, p.part_sum + cta.part0, p.splits, weight_s);
    if (threadIdx.x == 0) *inv_total_s = inv_total;
  }
  __syncthreads();
  return cta;
}

// One CTA per (row, head) (the two-kernel path, the default).
__global__ void __launch_bounds__(kCombineThreads) CombineSplitsKernel(const KernelParams p) {
  __shared__ float weight_s[kPagedAttentionCudaMaxSplits];
  __shared__ float inv_total_s;
  const auto [w, part0, h] = CombineSplitWeights(p, weight_s, &inv_total_s);
  const PagedAttentionCudaRow row = p.rows[w];
  float* out =
      p.out + static_cast<int64_t>(row.q_row) * p.out_stride + static_cast<int64_t>(h) * p.head_dim;
  CombineHeads<1>(p, part0, 1, weight_s, &inv_total_s, out, threadIdx.x, kCombineThreads);
}

// The head gate of PagedAttentionCudaArgs in the combine: its own kernel argument, so that
// KernelParams (and the attention kernels' register allocation) stays as it is.
struct GateEpilogue {
  const float* gate;
  int64_t gate_stride;
  q8_quantize::Q8Rows q8;  // natural == nullptr: no int8 rows
};

// Dims 4v..4v+3 of head h of query row `q_row`, combined (o) and gated (gate logit `gate`): the
// output floats and, with e.q8, the int8 rows.
__device__ __forceinline__ void StoreGated(const KernelParams& p, const GateEpilogue& e, int q_row,
                                           int h, int v, const float (&o)[4], float gate) {
  const float s = Sigmoid(gate);
  const float4 gated = make_float4(o[0] * s, o[1] * s, o[2] * s, o[3] * s);
  const int64_t col = static_cast<int64_t>(h) * p.head_dim + 4 * v;
  *reinterpret_cast<float4*>(p.out + static_cast<int64_t>(q_row) * p.out_stride + col) = gated;
  if (e.q8.natural != nullptr) q8_quantize::StoreQ8Both(e.q8, q_row, col, gated);
}

// The combine kernel with the head gate: one CTA per (row, head), thread v taking dims 4v..4v+3
// (head_dim / 4 threads, whole 8-thread groups: one per int8 block), the combine's floats
// (CombineDims, the same operations as CombineSplitsKernel's), times the gate, stored in place of
// the combine's output and quantized: the floats and bytes HeadGateQ8Kernel makes of that output.
__global__ void __launch_bounds__(kCombineThreads)
    CombineSplitsGateKernel(const KernelParams p, const GateEpilogue e) {
  __shared__ float weight_s[kPagedAttentionCudaMaxSplits];
  __shared__ float inv_total_s;
  const auto [w, part0, h] = CombineSplitWeights(p, weight_s, &inv_total_s);
  const int v = threadIdx.x;
  if (v >= p.head_dim / 4) return;  // whole 8-thread groups (head_dim % 32 == 0)
  const PagedAttentionCudaRow row = p.rows[w];
  float o[4];
  CombineDims<4>(p, p.part_acc + part0 * p.head_dim, weight_s, inv_total_s, v, o);
  StoreGated(p, e, row.q_row, h, v, o, e.gate[static_cast<int64_t>(row.q_row) * e.gate_stride + h]);
}

// CombineSplitsGateKernel for up to kEarlyCombineSplits splits (EarlyLoadsEnabled): every load
// that does not wait for another - the row record, the thread's partials (one float4 per split,
// held in registers), the split maxima and sums - is issued before any is used, and the gate
// logit right after the row record, instead of a round trip each for the weights, the partials
// and the gate. The same float operations in the same order as CombineDims: the same bytes.
constexpr int kEarlyCombineSplits = 8;
__global__ void __launch_bounds__(kCombineThreads)
    CombineSplitsGateEarlyKernel(const KernelParams p, const GateEpilogue e) {
  __shared__ float weight_s[kEarlyCombineSplits];
  __shared__ float inv_total_s;
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t w = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads);
  const int64_t part0 = (w * p.heads + h) * p.splits;
  const int v = threadIdx.x;
  const int per_head = p.head_dim / 4;
  const bool active = v < per_head;  // whole 8-thread groups (head_dim % 32 == 0)
  const PagedAttentionCudaRow row = p.rows[w];
  const float4* acc = reinterpret_cast<const float4*>(p.part_acc + part0 * p.head_dim);
  float4 a[kEarlyCombineSplits];
#pragma unroll
  for (int j = 0; j < kEarlyCombineSplits; ++j) {
    if (active && j < p.splits) a[j] = __ldcg(acc + j * per_head + v);
  }
  const float gate = active ? e.gate[static_cast<int64_t>(row.q_row) * e.gate_stride + h] : 0.0f;
  if (threadIdx.x < 32) {
    const float inv_total =
        SplitWeights(p.part_max + part0, p.part_sum + part0, p.splits, weight_s);
    if (threadIdx.x == 0) inv_total_s = inv_total;
  }
  __syncthreads();
  if (!active) return;
  float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < kEarlyCombineSplits; ++j) {
    if (j < p.splits) {
      const float* x = reinterpret_cast<const float*>(&a[j]);
#pragma unroll
      for (int c = 0; c < 4; ++c) o[c] += weight_s[j] * x[c];
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) o[c] *= inv_total_s;
  StoreGated(p, e, row.q_row, h, v, o, gate);
}

}  // namespace stepserve::kernels::paged_attention_cuda

#endif  // STEPSERVE_KERNELS_ATTENTION_PAGED_ATTENTION_CUDA_COMBINE_KERNELS_CUH_
