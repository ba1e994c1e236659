// Host stand-ins for what kernels/matmul/moe_decode_cuda.cu calls in other files (its launchers
// reference them), for the emulation tests that include that source (test_moe_down.cc,
// test_moe_gate_up.cc). Include once, after the kernel source.
#pragma once
#include "engine/quant/ggml_type.h"

namespace stepserve::kernels {
bool GemvCudaSupports(GgmlType) { return true; }
namespace gemv_internal {
// What WeightsBeforeWait answers for every use (a test sets it before launching).
inline bool g_weights_before_wait = false;
bool WeightsBeforeWait(EarlyWeights) { return g_weights_before_wait; }
}  // namespace gemv_internal
}  // namespace stepserve::kernels
