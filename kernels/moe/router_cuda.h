// The MoE router of moe.h (RouterArgs, ValidateRouter) on a CUDA device: logits, bias, ids and
// weights in device memory, the work enqueued on `stream`. Same F32 formulas as RouterCpu: gate
// pi = sigmoid or softmax, selection score pi + bias, the top_k scores in descending order with
// ties broken toward the lower expert id, weights from the unbiased pi, optional renormalisation
// (floor kRouterNormFloor) and scale (skipped when 0 or 1). Scores come from the device expf
// (within 2 ulp of the host's), so ids match the CPU path except between scores that tie to
// within that rounding.
//
// One block per row, one expert per thread: top_k rounds of block-wide argmax over the experts
// ranked after the previous pick (no atomics, no sort).
#ifndef STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_
#define STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/kernel_status.h"
#include "kernels/moe/moe.h"

namespace stepserve::kernels {

// Limits of the block-per-row kernel (kTooLarge beyond): one expert per thread of a block, the
// picks kept by the first warp.
inline constexpr int64_t kRouterCudaMaxTopK = 32;
inline constexpr int64_t kRouterCudaMaxExperts = 1024;

// Validates (ValidateRouter plus the limits above), then enqueues; kInvalidArgument also when the
// launch fails (the CUDA error is cleared).
KernelStatus RouterCuda(const RouterArgs& args, cudaStream_t stream);

// The router of a decode step in one launch (router_fused_cuda.cu): logits = x W^T with F32
// router weights, written to select.logits, then RouterCuda's selection on them (same order, same
// formulas). One CTA per expert reads its weight row before waiting for the kernel before it, and
// the last CTA to finish selects for every row (a ticket counter that wraps back to zero itself).
struct RouterFusedArgs {
  const float* x = nullptr;  // [rows][in], x_stride floats apart, 16-byte aligned rows
  int64_t x_stride = 0;
  int64_t in = 0;
  const float* w = nullptr;  // [n_experts][in] F32, w_stride floats apart, 16-byte aligned rows
  int64_t w_stride = 0;
  float* logits = nullptr;     // [rows][n_experts], select.logits_stride apart: written
  RouterArgs select;           // select.logits must equal `logits`; rows and n_experts as there
  unsigned* ticket = nullptr;  // one device word, zero before the first launch on the stream
};

// Limits of the fused kernel: rows (each CTA dots its row with every activation row from L2),
// `in` (the weight row is held in registers: in / 512 float4 per thread) and experts (the last
// CTA stages rows x n_experts scores in shared memory).
inline constexpr int64_t kRouterFusedMaxRows = 4;
inline constexpr int64_t kRouterFusedMaxIn = 8192;
inline constexpr int64_t kRouterFusedMaxExperts = 512;

// Whether the backend routes decode batches through RouterFusedCuda: opt-in until measured on a
// device (STEPSERVE_FUSED_ROUTER=1 in the environment, read at the first use);
// SetRouterFusedCuda overrides it for every later call (tests, A/B runs) and returns the
// previous setting.
bool RouterFusedCudaEnabled();
bool SetRouterFusedCuda(bool enabled);

// Whether RouterFusedCuda takes these sizes and layouts (else run the router GEMV + RouterCuda);
// the ticket is not looked at.
bool RouterFusedCudaSupports(const RouterFusedArgs& args);

// Validates (ValidateRouter on select, the limits and alignments above: kTooLarge /
// kInvalidArgument beyond them), then enqueues; kInvalidArgument also when the launch fails (error
// cleared).
KernelStatus RouterFusedCuda(const RouterFusedArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MOE_ROUTER_CUDA_H_
