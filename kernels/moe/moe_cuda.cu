// moe_cuda.h: host grouping of pairs by expert and the element-wise kernels around the
// per-expert matmuls (gather, weighted scatter-add). Grid-stride loops, one
// thread per element; these are bandwidth-trivial next to the expert matmuls.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_cuda.h"

namespace stepserve::kernels {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t total) {
  return static_cast<int>(std::clamp<int64_t>((total + kThreads - 1) / kThreads, 1, 1 << 16));
}

KernelStatus LaunchResult() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kInvalidArgument;
}

__global__ void GatherRowsKernel(const float* src, int64_t src_stride, const int32_t* src_rows,
                                 int64_t n, int64_t cols, float* dst, int64_t dst_stride) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i / cols;
    const int64_t c = i - s * cols;
    dst[s * dst_stride + c] = src[src_rows[s] * src_stride + c];
  }
}

__global__ void ScatterAddKernel(const float* pair_rows, int64_t pair_stride,
                                 const int32_t* pair_slot, const float* weights, int64_t tokens,
                                 int64_t top_k, int64_t cols, float* y, int64_t y_stride) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t total = tokens * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols;
    const int64_t c = i - t * cols;
    float acc = 0.0f;
    for (int64_t k = 0; k < top_k; ++k) {
      const int64_t p = t * top_k + k;
      acc += weights[p] * pair_rows[pair_slot[p] * pair_stride + c];
    }
    y[t * y_stride + c] += acc;
  }
}

}  // namespace

KernelStatus PlanMoeGroups(const int32_t* ids, int64_t tokens, int64_t top_k, int64_t n_experts,
                           MoeGroups* groups) {
  if (groups == nullptr || tokens < 0 || top_k <= 0 || n_experts <= 0 ||
      (tokens > 0 && ids == nullptr)) {
    return KernelStatus::kInvalidArgument;
  }
  groups->bad_pair = -1;
  if (tokens > std::numeric_limits<int32_t>::max() / top_k ||
      n_experts > std::numeric_limits<int32_t>::max()) {
    return KernelStatus::kTooLarge;
  }
  const int64_t pairs = tokens * top_k;
  for (int64_t p = 0; p < pairs; ++p) {
    if (ids[p] < 0 || ids[p] >= n_experts) {
      groups->bad_pair = p;
      return KernelStatus::kOutOfRange;
    }
  }
  groups->offsets.assign(n_experts + 1, 0);
  for (int64_t p = 0; p < pairs; ++p) ++groups->offsets[ids[p] + 1];
  for (int64_t e = 0; e < n_experts; ++e) groups->offsets[e + 1] += groups->offsets[e];
  groups->slot_token.resize(pairs);
  groups->pair_slot.resize(pairs);
  std::vector<int32_t> next(groups->offsets.begin(), groups->offsets.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t slot = next[ids[p]]++;
    groups->slot_token[slot] = static_cast<int32_t>(p / top_k);
    groups->pair_slot[p] = slot;
  }
  return KernelStatus::kOk;
}

KernelStatus GatherRowsCuda(const float* src, int64_t src_stride, const int32_t* src_rows,
                            int64_t n, int64_t cols, float* dst, int64_t dst_stride,
                            cudaStream_t stream) {
  if (n < 0 || cols <= 0 || src_stride < cols || dst_stride < cols) {
    return KernelStatus::kInvalidArgument;
  }
  if (n == 0) return KernelStatus::kOk;
  if (src == nullptr || src_rows == nullptr || dst == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  LaunchWithPdl(GatherRowsKernel, Blocks(n * cols), kThreads, 0, stream, src, src_stride, src_rows,
                n, cols, dst, dst_stride);
  return LaunchResult();
}

KernelStatus MoeScatterAddCuda(const float* pair_rows, int64_t pair_stride,
                               const int32_t* pair_slot, const float* weights, int64_t tokens,
                               int64_t top_k, int64_t cols, float* y, int64_t y_stride,
                               cudaStream_t stream) {
  if (tokens < 0 || top_k <= 0 || cols <= 0 || pair_stride < cols || y_stride < cols) {
    return KernelStatus::kInvalidArgument;
  }
  if (tokens == 0) return KernelStatus::kOk;
  if (pair_rows == nullptr || pair_slot == nullptr || weights == nullptr || y == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  LaunchWithPdl(ScatterAddKernel, Blocks(tokens * cols), kThreads, 0, stream, pair_rows,
                pair_stride, pair_slot, weights, tokens, top_k, cols, y, y_stride);
  return LaunchResult();
}

}  // namespace stepserve::kernels
