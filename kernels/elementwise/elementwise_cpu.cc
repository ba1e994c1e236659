// Optimised element-wise ops: F32 loops the compiler can vectorise; threads only for large
// (prefill) batches, where the memory traffic is worth splitting.
#include <algorithm>
#include <cmath>

#include "kernels/elementwise/elementwise.h"

namespace stepserve::kernels {
namespace {

// Below this many elements a call finishes faster than waking the pool.
constexpr int64_t kParallelMinElems = 1 << 16;

template <typename Body>
void ForRows(ThreadPool* pool, int64_t rows, int64_t row_elems, const Body& body) {
  if (pool == nullptr || rows * row_elems < kParallelMinElems) {
    body(0, rows);
  } else {
    pool->ParallelFor(rows, std::max<int64_t>(1, kParallelMinElems / 4 / row_elems), body);
  }
}

}  // namespace

void SwiGluRowCpu(const float* g, const float* u, float* z, int64_t n, float limit) {
  if (limit > kSwiGluClampThreshold) {
    for (int64_t i = 0; i < n; ++i) {
      const float silu = g[i] / (1.0f + std::exp(-g[i]));
      z[i] = std::min(silu, limit) * std::clamp(u[i], -limit, limit);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) z[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

KernelStatus HeadGateCpu(const HeadGateArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateHeadGate(a); s != KernelStatus::kOk) return s;
  ForRows(pool, a.rows, a.heads * a.head_dim, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t h = 0; h < a.heads; ++h) {
        const float gate = 1.0f / (1.0f + std::exp(-a.gate[r * a.gate_stride + h]));
        float* o = a.o + r * a.o_stride + h * a.head_dim;
        for (int64_t d = 0; d < a.head_dim; ++d) o[d] *= gate;
      }
    }
  });
  return KernelStatus::kOk;
}

KernelStatus SwiGluCpu(const SwiGluArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateSwiGlu(a); s != KernelStatus::kOk) return s;
  ForRows(pool, a.rows, a.n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      SwiGluRowCpu(a.g + r * a.g_stride, a.u + r * a.u_stride, a.z + r * a.z_stride, a.n, a.limit);
    }
  });
  return KernelStatus::kOk;
}

KernelStatus AddCpu(const AddArgs& a, ThreadPool* pool) {
  if (KernelStatus s = ValidateAdd(a); s != KernelStatus::kOk) return s;
  ForRows(pool, a.rows, a.n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = a.a + r * a.a_stride;
      const float* b = a.b + r * a.b_stride;
      float* y = a.y + r * a.y_stride;
      for (int64_t i = 0; i < a.n; ++i) y[i] = x[i] + b[i];
    }
  });
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
