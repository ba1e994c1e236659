// Scalar reference for Y = X * W^T: the definition, in double, one weight row at a time.
#include <vector>

#include "engine/quant/quant.h"
#include "kernels/matmul/matmul.h"

namespace stepserve::kernels {

KernelStatus ValidateMatmul(const MatmulArgs& a) {
  if (a.w == nullptr || a.x == nullptr || a.y == nullptr) return KernelStatus::kInvalidArgument;
  if (a.in <= 0 || a.out <= 0 || a.rows <= 0) return KernelStatus::kInvalidArgument;
  if (!quant::CanDequantize(a.type)) return KernelStatus::kUnsupportedType;
  const int64_t row_bytes = RowBytes(a.type, a.in);
  if (row_bytes < 0 || a.w_row_bytes < row_bytes) return KernelStatus::kInvalidArgument;
  if (a.x_stride < a.in || a.y_stride < a.out) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

KernelStatus MatmulRef(const MatmulArgs& a) {
  if (KernelStatus s = ValidateMatmul(a); s != KernelStatus::kOk) return s;
  std::vector<float> w_row(a.in);
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (int64_t o = 0; o < a.out; ++o) {
    if (!quant::DequantizeRow(a.type, w + o * a.w_row_bytes, w_row.data(), a.in).ok()) {
      return KernelStatus::kUnsupportedType;
    }
    for (int64_t r = 0; r < a.rows; ++r) {
      const float* x = a.x + r * a.x_stride;
      double acc = 0.0;
      for (int64_t i = 0; i < a.in; ++i) acc += static_cast<double>(w_row[i]) * x[i];
      a.y[r * a.y_stride + o] = static_cast<float>(acc);
    }
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
