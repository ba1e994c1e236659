// The MoE router of moe.h (RouterArgs, ValidateRouter) on a CUDA device: logits, bias, ids and
// weights in device memory, the work enqueued on `stream`. Same F32 formulas as RouterCpu: gate
// pi = sigmoid or softmax, selection score pi + bias, the top_k scores in descending order with
// ties broken toward the lower expert id, weights from the unbiased pi, optional renormalisation
// (floor kRouterNormFloor) and scale (skipped when 0 or 1). Scores come from the device expf
// (within 2 ulp of the host's), so ids match the CPU path except between scores that tie to
// within that rounding.
//
// One warp per row, each lane holding experts lane + 32 i in registers: top_k rounds of a warp
// argmax over the experts not yet picked (no atomics, no sort, no block barriers).
#ifndef STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_
#define STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/kernel_status.h"
#include "kernels/moe/moe.h"

namespace stepserve::kernels {

// Limits of the warp-per-row kernel (kTooLarge beyond): up to 32 experts per lane, pick k kept by
// lane k.
inline constexpr int64_t kRouterCudaMaxTopK = 32;
inline constexpr int64_t kRouterCudaMaxExperts = 1024;

// Validates (ValidateRouter plus the limits above), then enqueues; kInvalidArgument also when the
// launch fails (the CUDA error is cleared).
KernelStatus RouterCuda(const RouterArgs& args, cudaStream_t stream);

// The router GEMV and the selection in one launch, for a few token rows (the decode steps):
// logits[t][e] = x[t] . w[e] in F32 (written: they are the op's output too), then the grid's last
// CTA to finish selects every row as RouterCuda does. The logits' summation order differs from
// the plain F32 GEMV's (per-lane float4 partials, four K-quarters per expert added in order).
inline constexpr int64_t kRouterGemvMaxRows = 4;
struct RouterGemvArgs {
  const float* x = nullptr;  // [rows][in], row stride x_stride floats; 16-byte aligned
  int64_t x_stride = 0;
  int64_t in = 0;            // a multiple of 4
  const float* w = nullptr;  // [n_experts][in], row stride w_stride floats; 16-byte aligned
  int64_t w_stride = 0;
  float* logits = nullptr;     // written; the same array as select.logits
  RouterArgs select;           // rows (1..kRouterGemvMaxRows), n_experts, bias, top_k, ids, ...
  int32_t* counter = nullptr;  // one int, zero on entry; every launch leaves it zero
};

// Whether the fused kernel takes these shapes (rows, alignment, strides, the limits above).
bool RouterGemvTopKCudaApplies(const RouterGemvArgs& args);

// ValidateRouter(args.select), RouterGemvTopKCudaApplies (kInvalidArgument when not), then
// enqueues on `stream`.
KernelStatus RouterGemvTopKCuda(const RouterGemvArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_
