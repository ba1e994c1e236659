// The pieces of the routed-expert FFN (moe.h, MoeExperts) on a CUDA device, for the backend's
// grouped execution: the host groups (token, slot) pairs by expert (PlanMoeGroups), a kernel
// gathers each pair's token row into a contiguous per-expert block (GatherRowsCuda), the backend
// runs gate/up per expert with its matmul, the clamped SwiGLU runs over all pairs at once
// (SwiGluCuda, kernels/elementwise/elementwise_cuda.h), down runs per expert, and a kernel adds
// the weighted pair results back into each token's row (MoeScatterAddCuda). Device pointers, work
// enqueued on `stream`.
#ifndef STEPSERVE_KERNELS_MOE_MOE_CUDA_H_
#define STEPSERVE_KERNELS_MOE_MOE_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// Pairs p = t * top_k + k (token t, slot k) grouped by expert, in pair order within an expert.
struct MoeGroups {
  std::vector<int32_t> offsets;     // [n_experts + 1]: expert e owns grouped slots
                                    // [offsets[e], offsets[e + 1])
  std::vector<int32_t> slot_token;  // [pairs]: token row of each grouped slot
  std::vector<int32_t> pair_slot;   // [pairs]: grouped slot of pair p
  int64_t bad_pair = -1;            // on kOutOfRange: the first pair whose id is out of range
};

// Host: groups `tokens * top_k` expert ids (host memory). kOutOfRange (with bad_pair set) when an
// id is outside [0, n_experts); kTooLarge when the pair count does not fit int32.
KernelStatus PlanMoeGroups(const int32_t* ids, int64_t tokens, int64_t top_k, int64_t n_experts,
                           MoeGroups* groups);

// dst[s] = src[src_rows[s]] for s < n (rows of `cols` floats). src_rows: device, trusted.
KernelStatus GatherRowsCuda(const float* src, int64_t src_stride, const int32_t* src_rows,
                            int64_t n, int64_t cols, float* dst, int64_t dst_stride,
                            cudaStream_t stream);

// y[t] += sum_k weights[t * top_k + k] * pair_rows[pair_slot[t * top_k + k]] for t < tokens
// (rows of `cols` floats, summed in k order in F32). pair_slot and weights: device, trusted.
KernelStatus MoeScatterAddCuda(const float* pair_rows, int64_t pair_stride,
                               const int32_t* pair_slot, const float* weights, int64_t tokens,
                               int64_t top_k, int64_t cols, float* y, int64_t y_stride,
                               cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MOE_MOE_CUDA_H_
