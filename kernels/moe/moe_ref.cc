// Scalar references for the router and the routed experts: the spec's formulas, in double.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "engine/quant/quant.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/moe/moe.h"

namespace stepserve::kernels {

KernelStatus ValidateRouter(const RouterArgs& a) {
  if (a.logits == nullptr || a.ids == nullptr || a.weights == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.rows < 0 || a.n_experts <= 0 || a.logits_stride < a.n_experts) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.top_k < 1 || a.top_k > a.n_experts || !std::isfinite(a.scale)) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.gating != GatingFunc::kSigmoid && a.gating != GatingFunc::kSoftmax) {
    return KernelStatus::kUnsupportedType;
  }
  return KernelStatus::kOk;
}

KernelStatus RouterRef(const RouterArgs& a) {
  if (KernelStatus s = ValidateRouter(a); s != KernelStatus::kOk) return s;
  const int64_t n = a.n_experts;
  std::vector<double> pi(n);
  std::vector<double> score(n);
  std::vector<int32_t> order(n);
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* logits = a.logits + r * a.logits_stride;
    if (a.gating == GatingFunc::kSigmoid) {
      for (int64_t e = 0; e < n; ++e) pi[e] = 1.0 / (1.0 + std::exp(-double{logits[e]}));
    } else {
      const double max = *std::max_element(logits, logits + n);
      double sum = 0.0;
      for (int64_t e = 0; e < n; ++e) sum += (pi[e] = std::exp(logits[e] - max));
      for (int64_t e = 0; e < n; ++e) pi[e] /= sum;
    }
    for (int64_t e = 0; e < n; ++e) score[e] = pi[e] + (a.bias != nullptr ? a.bias[e] : 0.0);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t i, int32_t j) { return score[i] > score[j]; });
    double sum = 0.0;
    for (int64_t k = 0; k < a.top_k; ++k) sum += pi[order[k]];
    const double denom = a.normalize ? std::max(sum, double{kRouterNormFloor}) : 1.0;
    const double scale = (a.scale == 0.0f || a.scale == 1.0f) ? 1.0 : a.scale;
    for (int64_t k = 0; k < a.top_k; ++k) {
      a.ids[r * a.top_k + k] = order[k];
      a.weights[r * a.top_k + k] = static_cast<float>(pi[order[k]] / denom * scale);
    }
  }
  return KernelStatus::kOk;
}

int64_t MoeExpertsWorkspaceFloats(int64_t rows, int64_t top_k, int64_t n_embd, int64_t n_ff) {
  // Per (row, slot) pair: gathered x, gate output (reused for z), up output, down output.
  return rows * top_k * (2 * n_embd + 2 * n_ff);
}

int64_t MoeExpertsIndexWorkspaceLen(int64_t rows, int64_t top_k, int64_t n_experts) {
  // Pair order grouped by expert, expert offsets (E + 1), active experts (E), inverse order.
  return 2 * rows * top_k + 2 * n_experts + 1;
}

namespace {

KernelStatus ValidateExpertMatrix(const ExpertMatrix& m, int64_t in, int64_t out,
                                  int64_t n_experts) {
  if (m.data == nullptr) return KernelStatus::kInvalidArgument;
  if (!quant::CanDequantize(m.type)) return KernelStatus::kUnsupportedType;
  const int64_t need = RowBytes(m.type, in);
  if (need < 0 || m.row_bytes < need || m.expert_bytes < m.row_bytes * out) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace

KernelStatus ValidateMoeExperts(const MoeExpertsArgs& a) {
  if (a.x == nullptr || a.y == nullptr || a.ids == nullptr || a.weights == nullptr) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.rows < 0 || a.n_embd <= 0 || a.n_ff <= 0 || a.n_experts <= 0 || a.top_k <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.x_stride < a.n_embd || a.y_stride < a.n_embd || std::isnan(a.limit)) {
    return KernelStatus::kInvalidArgument;
  }
  for (const auto& [m, in, out] :
       {std::tuple{&a.gate, a.n_embd, a.n_ff}, std::tuple{&a.up, a.n_embd, a.n_ff},
        std::tuple{&a.down, a.n_ff, a.n_embd}}) {
    if (KernelStatus s = ValidateExpertMatrix(*m, in, out, a.n_experts); s != KernelStatus::kOk) {
      return s;
    }
  }
  for (int64_t i = 0; i < a.rows * a.top_k; ++i) {
    if (a.ids[i] < 0 || a.ids[i] >= a.n_experts) return KernelStatus::kOutOfRange;
  }
  return KernelStatus::kOk;
}

KernelStatus MoeExpertsRef(const MoeExpertsArgs& a) {
  if (KernelStatus s = ValidateMoeExperts(a); s != KernelStatus::kOk) return s;
  std::vector<float> w_row(std::max(a.n_embd, a.n_ff));
  std::vector<double> z(a.n_ff);
  std::vector<double> acc(a.n_embd);
  const bool clamp = a.limit > kSwiGluClampThreshold;
  auto dot_row = [&](const ExpertMatrix& m, int64_t e, int64_t o, const auto* v, int64_t n) {
    const auto* base = static_cast<const uint8_t*>(m.data) + e * m.expert_bytes;
    (void)quant::DequantizeRow(m.type, base + o * m.row_bytes, w_row.data(), n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w_row[i]) * v[i];
    return sum;
  };
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* x = a.x + r * a.x_stride;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < a.top_k; ++k) {
      const int64_t e = a.ids[r * a.top_k + k];
      for (int64_t o = 0; o < a.n_ff; ++o) {
        const double g = dot_row(a.gate, e, o, x, a.n_embd);
        double u = dot_row(a.up, e, o, x, a.n_embd);
        double act = g / (1.0 + std::exp(-g));
        if (clamp) {
          u = std::clamp(u, -double{a.limit}, double{a.limit});
          act = std::min(act, double{a.limit});
        }
        z[o] = act * u;
      }
      const double w = a.weights[r * a.top_k + k];
      for (int64_t o = 0; o < a.n_embd; ++o) acc[o] += w * dot_row(a.down, e, o, z.data(), a.n_ff);
    }
    float* y = a.y + r * a.y_stride;
    for (int64_t o = 0; o < a.n_embd; ++o) y[o] = static_cast<float>(y[o] + acc[o]);
  }
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
