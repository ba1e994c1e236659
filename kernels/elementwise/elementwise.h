// Element-wise ops of the step35 layer: per-head sigmoid output gate (spec 4.4 step 7), clamped
// SwiGLU (4.5/4.6) and the residual add. All F32, `rows` rows with their own strides (floats);
// outputs may alias inputs with equal strides.
#ifndef STEPSERVE_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
#define STEPSERVE_KERNELS_ELEMENTWISE_ELEMENTWISE_H_

#include <cstdint>

#include "engine/base/thread_pool.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// In place: o[r][h*head_dim + d] *= sigmoid(gate[r][h]).
struct HeadGateArgs {
  float* o = nullptr;
  int64_t o_stride = 0;         // >= heads * head_dim
  const float* gate = nullptr;  // gate logits (W_G a), [rows][heads]
  int64_t gate_stride = 0;      // >= heads
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// z = act(g) * u' with, when limit > 1e-6, u' = clamp(u, -limit, limit) and
// act = min(SiLU(g), limit); otherwise u' = u and act = SiLU(g). SiLU(x) = x * sigmoid(x).
struct SwiGluArgs {
  const float* g = nullptr;
  int64_t g_stride = 0;
  const float* u = nullptr;
  int64_t u_stride = 0;
  float* z = nullptr;
  int64_t z_stride = 0;
  int64_t rows = 0;
  int64_t n = 0;
  float limit = 0.0f;
};

// y = a + b.
struct AddArgs {
  const float* a = nullptr;
  int64_t a_stride = 0;
  const float* b = nullptr;
  int64_t b_stride = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
  int64_t rows = 0;
  int64_t n = 0;
};

// The clamp threshold of spec 4.5: limits at or below it mean "no clamping".
inline constexpr float kSwiGluClampThreshold = 1e-6f;

KernelStatus ValidateHeadGate(const HeadGateArgs& args);
KernelStatus ValidateSwiGlu(const SwiGluArgs& args);
KernelStatus ValidateAdd(const AddArgs& args);

KernelStatus HeadGateRef(const HeadGateArgs& args);
KernelStatus HeadGateCpu(const HeadGateArgs& args, ThreadPool* pool);
KernelStatus SwiGluRef(const SwiGluArgs& args);
KernelStatus SwiGluCpu(const SwiGluArgs& args, ThreadPool* pool);
KernelStatus AddRef(const AddArgs& args);
KernelStatus AddCpu(const AddArgs& args, ThreadPool* pool);

// One row of SwiGLU for callers that already hold rows (the grouped MoE kernel).
void SwiGluRowCpu(const float* g, const float* u, float* z, int64_t n, float limit);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
