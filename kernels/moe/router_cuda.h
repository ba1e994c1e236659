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

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_
