// The entry of a MoE layer's FFN at decode, fused into one kernel: the residual add and RMSNorm
// (AddRmsNormCuda with its int8 outputs), the router GEMV over the normed rows (F32 router
// weights) and the router's top-k selection (RouterCuda). The separate kernels are three short,
// dependent launches per MoE layer at 1-4 tokens (the norm and the top-k one CTA each); here the
// router rows are loaded before the programmatic-launch wait, every CTA normalises the few token
// rows itself (4096 floats each, from L2) and the last CTA to finish selects the experts.
//
// Results: h (the sum), y and its int8 forms are bit for bit AddRmsNormCuda's (same threads per
// row, same reduction); the logits are the router GEMV's up to summation order (each is one block
// reduction of per-thread float4 dot products), so expert picks can differ from the separate
// kernels only between logits that tie to within that rounding.
#ifndef STEPSERVE_KERNELS_MOE_FFN_ENTRY_CUDA_H_
#define STEPSERVE_KERNELS_MOE_FFN_ENTRY_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/kernel_status.h"
#include "kernels/moe/moe.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rms_norm/rms_norm_cuda.h"

namespace stepserve::kernels {

// Token rows of one launch (the decode batches whose MoE takes the fused few-token kernels).
inline constexpr int64_t kFfnEntryMaxRows = 4;

struct FfnEntryCudaArgs {
  RmsNormArgs norm;            // x = h (read, then overwritten with h + add), y, weight, eps, rows
  const float* add = nullptr;  // [rows][add_stride], or nullptr for a plain RMSNorm
  int64_t add_stride = 0;
  RmsNormQ8Outputs q8;            // y's int8 forms (RmsNormQ8Cuda's layout), or nulls for none
  const float* router = nullptr;  // [n_experts][router_stride] F32 router weights
  int64_t router_stride = 0;      // floats between router rows
  float* logits = nullptr;     // [rows][route.logits_stride], written (route.logits is set to it)
  RouterArgs route;            // logits_stride, n_experts, bias, top_k, gating, ..., ids, weights
  int32_t* counter = nullptr;  // one int, zero before the launch (the kernel leaves it zero)
};

// Whether FfnEntryCuda takes these shapes: 1..kFfnEntryMaxRows rows, 1024 < n <= 4096 with n % 32
// == 0, 16-byte aligned rows, weights and int8 outputs (the float4 norm kernel's conditions),
// router rows 16-byte aligned, n_experts <= 512, top_k <= kRouterCudaMaxTopK,
// route.rows == norm.rows (the counter is not checked here). Otherwise the caller runs the
// separate ops.
bool FfnEntryCudaSupports(const FfnEntryCudaArgs& args);

// Enqueues the fused kernel (kInvalidArgument, nothing enqueued, when it does not take the
// shapes or the counter is null; also when the launch fails - the CUDA error is cleared).
KernelStatus FfnEntryCuda(const FfnEntryCudaArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MOE_FFN_ENTRY_CUDA_H_
