// Scalar references: the formulas in double, one element at a time. Also argument validation.
#include <algorithm>
#include <cmath>

#include "kernels/elementwise/elementwise.h"

namespace stepserve::kernels {
namespace {

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

KernelStatus ValidateHeadGate(const HeadGateArgs& a) {
  if (a.o == nullptr || a.gate == nullptr) return KernelStatus::kInvalidArgument;
  if (a.rows < 0 || a.heads <= 0 || a.head_dim <= 0) return KernelStatus::kInvalidArgument;
  if (a.o_stride < a.heads * a.head_dim || a.gate_stride < a.heads) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

KernelStatus ValidateSwiGlu(const SwiGluArgs& a) {
  if (a.g == nullptr || a.u == nullptr || a.z == nullptr) return KernelStatus::kInvalidArgument;
  if (a.rows < 0 || a.n <= 0 || a.g_stride < a.n || a.u_stride < a.n || a.z_stride < a.n) {
    return KernelStatus::kInvalidArgument;
  }
  if (std::isnan(a.limit)) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

KernelStatus ValidateAdd(const AddArgs& a) {
  if (a.a == nullptr || a.b == nullptr || a.y == nullptr) return KernelStatus::kInvalidArgument;
  if (a.rows < 0 || a.n <= 0 || a.a_stride < a.n || a.b_stride < a.n || a.y_stride < a.n) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

KernelStatus HeadGateRef(const HeadGateArgs& a) {
  if (KernelStatus s = ValidateHeadGate(a); s != KernelStatus::kOk) return s;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const double gate = Sigmoid(a.gate[r * a.gate_stride + h]);
      float* o = a.o + r * a.o_stride + h * a.head_dim;
      for (int64_t d = 0; d < a.head_dim; ++d) o[d] = static_cast<float>(gate * o[d]);
    }
  }
  return KernelStatus::kOk;
}

KernelStatus SwiGluRef(const SwiGluArgs& a) {
  if (KernelStatus s = ValidateSwiGlu(a); s != KernelStatus::kOk) return s;
  const bool clamp = a.limit > kSwiGluClampThreshold;
  const double limit = a.limit;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t i = 0; i < a.n; ++i) {
      const double g = a.g[r * a.g_stride + i];
      double u = a.u[r * a.u_stride + i];
      double act = g * Sigmoid(g);
      if (clamp) {
        u = std::clamp(u, -limit, limit);
        act = std::min(act, limit);
      }
      a.z[r * a.z_stride + i] = static_cast<float>(act * u);
    }
  }
  return KernelStatus::kOk;
}

KernelStatus AddRef(const AddArgs& a) {
  if (KernelStatus s = ValidateAdd(a); s != KernelStatus::kOk) return s;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t i = 0; i < a.n; ++i) {
      a.y[r * a.y_stride + i] = static_cast<float>(static_cast<double>(a.a[r * a.a_stride + i]) +
                                                   a.b[r * a.b_stride + i]);
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
