// MoE routing and the grouped routed-expert FFN, spec 4.6.
#ifndef STEPSERVE_KERNELS_MOE_MOE_H_
#define STEPSERVE_KERNELS_MOE_MOE_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// GGUF `expert_gating_func` values this kernel implements (0 "absent" means sigmoid for step35;
// the caller maps it).
enum class GatingFunc : int { kSoftmax = 1, kSigmoid = 2 };

// The floor of the renormalisation denominator (spec 4.6 step 5).
inline constexpr float kRouterNormFloor = 6.103515625e-5f;

// Router over logits (W_r f, computed by the caller's matmul):
//   pi = sigmoid(logits) or softmax(logits); selection score = pi + bias (bias optional);
//   the top_k experts by selection score (ties: lower expert id first), in descending order;
//   weight = pi (unbiased); if normalize: weight /= max(sum of selected, kRouterNormFloor);
//   weight *= scale unless scale is 0 or 1.
struct RouterArgs {
  const float* logits = nullptr;  // [rows][n_experts]
  int64_t logits_stride = 0;
  int64_t rows = 0;
  int64_t n_experts = 0;
  const float* bias = nullptr;  // [n_experts] or nullptr
  int64_t top_k = 0;            // 1 <= top_k <= n_experts
  GatingFunc gating = GatingFunc::kSigmoid;
  bool normalize = false;
  float scale = 1.0f;
  int32_t* ids = nullptr;    // [rows][top_k], written
  float* weights = nullptr;  // [rows][top_k], written
};

KernelStatus ValidateRouter(const RouterArgs& args);
KernelStatus RouterRef(const RouterArgs& args);  // double, full stable sort
KernelStatus RouterCpu(const RouterArgs& args, ThreadPool* pool);

// One expert matrix stack of a 3-D GGUF tensor ne = [in, out, E]: expert e's row o starts at
// data + e * expert_bytes + o * row_bytes.
struct ExpertMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t row_bytes = 0;
  int64_t expert_bytes = 0;
};

// y[r] += sum_k weights[r][k] * Down_e(SwiGLU_limit(Gate_e x[r], Up_e x[r])), e = ids[r][k].
// gate/up are [n_embd -> n_ff], down is [n_ff -> n_embd]. Workspaces are caller-provided (the
// kernel does not allocate); sizes from the two functions below.
struct MoeExpertsArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  int64_t rows = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_experts = 0;
  const int32_t* ids = nullptr;    // [rows][top_k]
  const float* weights = nullptr;  // [rows][top_k]
  int64_t top_k = 0;
  ExpertMatrix gate;
  ExpertMatrix up;
  ExpertMatrix down;
  float limit = 0.0f;  // swiglu_clamp_exp[l]; <= 1e-6 means no clamp
  float* y = nullptr;  // accumulated into; must not alias x
  int64_t y_stride = 0;
  float* workspace = nullptr;
  int64_t workspace_floats = 0;
  int32_t* index_workspace = nullptr;
  int64_t index_workspace_len = 0;
};

int64_t MoeExpertsWorkspaceFloats(int64_t rows, int64_t top_k, int64_t n_embd, int64_t n_ff);
int64_t MoeExpertsIndexWorkspaceLen(int64_t rows, int64_t top_k, int64_t n_experts);

KernelStatus ValidateMoeExperts(const MoeExpertsArgs& args);
// Reference: a plain loop over rows and their selected experts, dequantized weights, double sums
// (ignores the workspaces).
KernelStatus MoeExpertsRef(const MoeExpertsArgs& args);
// Optimised: rows grouped by expert so every selected expert's weights are read once per call;
// gate+up(+SwiGLU) and down are each one parallel pass over (expert, output-row chunk) tasks.
KernelStatus MoeExpertsCpu(const MoeExpertsArgs& args, ThreadPool* pool);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MOE_MOE_H_
