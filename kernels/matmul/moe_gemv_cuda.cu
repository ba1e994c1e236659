// MoeGemvCuda: orchestration of the indexed GEMVs (matmul_cuda.h) plus two small kernels, the
// clamped SwiGLU over the T*k intermediate rows and the weighted combine into y.
#include <cstdint>

#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/matmul/moe_gemv_cuda.h"

namespace stepserve::kernels {
namespace {

int64_t Align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

// Workspace layout: gate out, up out (then SwiGLU in place into gate out), down out, then the
// quantized-activation scratch (large enough for the T*k intermediate rows, which also holds
// the T rows of x).
struct Layout {
  int64_t gate, up, down, scratch, scratch_bytes, total;
};

Layout MakeLayout(int64_t tokens, int64_t top_k, int64_t n_embd, int64_t n_ff) {
  const int64_t groups = tokens * top_k;
  Layout l{};
  l.gate = 0;
  l.up = l.gate + Align16(groups * n_ff * 4);
  l.down = l.up + Align16(groups * n_ff * 4);
  l.scratch = l.down + Align16(groups * n_embd * 4);
  const int64_t a = GemvCudaScratchBytes(n_embd, tokens), b = GemvCudaScratchBytes(n_ff, groups);
  l.scratch_bytes = Align16(a > b ? a : b);
  l.total = l.scratch + l.scratch_bytes;
  return l;
}

__global__ void SwiGluRowsKernel(float* g, const float* u, int64_t n, float limit, bool clamp) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gv = g[i];
  float uv = u[i];
  float act = gv / (1.0f + __expf(-gv));
  if (clamp) {
    uv = fminf(fmaxf(uv, -limit), limit);
    act = fminf(act, limit);
  }
  g[i] = act * uv;
}

// y[t][i] += sum_k w[t][k] * down[t*k + k][i]; one thread per (t, i).
__global__ void CombineKernel(const float* down, const float* weights, int64_t top_k,
                              int64_t n_embd, float* y, int64_t y_stride, int64_t tokens) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = blockIdx.y;
  if (i >= n_embd || t >= tokens) return;
  float acc = 0.f;
  for (int64_t k = 0; k < top_k; ++k) {
    acc += weights[t * top_k + k] * down[(t * top_k + k) * n_embd + i];
  }
  y[t * y_stride + i] += acc;
}

}  // namespace

int64_t MoeGemvCudaWorkspaceBytes(int64_t tokens, int64_t top_k, int64_t n_embd, int64_t n_ff) {
  if (tokens <= 0 || top_k <= 0 || n_embd <= 0 || n_ff <= 0) return 0;
  return MakeLayout(tokens, top_k, n_embd, n_ff).total;
}

bool MoeGemvCudaSupports(GgmlType gate_up, GgmlType down) {
  return GemvCudaSupports(gate_up) && GemvCudaSupports(down);
}

KernelStatus ValidateMoeGemvCuda(const MoeGemvCudaArgs& a) {
  if (!MoeGemvCudaSupports(a.gate.type, a.down.type) || a.up.type != a.gate.type) {
    return KernelStatus::kUnsupportedType;
  }
  if (a.x == nullptr || a.ids == nullptr || a.weights == nullptr || a.y == nullptr ||
      a.workspace == nullptr || reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.tokens < 1 || a.tokens > kMoeGemvMaxTokens || a.top_k < 1 || a.top_k > a.n_experts ||
      a.n_embd <= 0 || a.n_ff <= 0 || a.y_stride < a.n_embd || a.x_stride < a.n_embd ||
      a.n_ff % 4 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.workspace_bytes < MoeGemvCudaWorkspaceBytes(a.tokens, a.top_k, a.n_embd, a.n_ff)) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

KernelStatus MoeGemvCuda(const MoeGemvCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateMoeGemvCuda(a); s != KernelStatus::kOk) return s;
  const int64_t groups = a.tokens * a.top_k;
  const Layout l = MakeLayout(a.tokens, a.top_k, a.n_embd, a.n_ff);
  auto* base = static_cast<uint8_t*>(a.workspace);
  float* gate = reinterpret_cast<float*>(base + l.gate);
  float* up = reinterpret_cast<float*>(base + l.up);
  float* down = reinterpret_cast<float*>(base + l.down);
  void* scratch = base + l.scratch;

  GemvIndexedCudaArgs g;
  g.type = a.gate.type;
  g.w = a.gate.data;
  g.w_row_bytes = a.gate.row_bytes;
  g.w_matrix_bytes = a.gate.matrix_bytes;
  g.n_matrices = a.n_experts;
  g.in = a.n_embd;
  g.out = a.n_ff;
  g.ids = a.ids;
  g.groups = groups;
  g.x_group_div = a.top_k;
  g.x = a.x;
  g.x_stride = a.x_stride;
  g.x_rows = a.tokens;
  g.y = gate;
  g.y_stride = a.n_ff;
  g.scratch = scratch;
  g.scratch_bytes = l.scratch_bytes;
  if (KernelStatus s = GemvIndexedCuda(g, stream); s != KernelStatus::kOk) return s;
  GemvIndexedCudaArgs u = g;
  u.w = a.up.data;
  u.w_row_bytes = a.up.row_bytes;
  u.w_matrix_bytes = a.up.matrix_bytes;
  u.y = up;
  u.x_prequantized = true;
  if (KernelStatus s = GemvIndexedCuda(u, stream); s != KernelStatus::kOk) return s;

  const int64_t n = groups * a.n_ff;
  SwiGluRowsKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      gate, up, n, a.limit, a.limit > kSwiGluClampThreshold);
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;

  GemvIndexedCudaArgs d;
  d.type = a.down.type;
  d.w = a.down.data;
  d.w_row_bytes = a.down.row_bytes;
  d.w_matrix_bytes = a.down.matrix_bytes;
  d.n_matrices = a.n_experts;
  d.in = a.n_ff;
  d.out = a.n_embd;
  d.ids = a.ids;
  d.groups = groups;
  d.x_group_div = 1;
  d.x = gate;
  d.x_stride = a.n_ff;
  d.x_rows = groups;
  d.y = down;
  d.y_stride = a.n_embd;
  d.scratch = scratch;
  d.scratch_bytes = l.scratch_bytes;
  if (KernelStatus s = GemvIndexedCuda(d, stream); s != KernelStatus::kOk) return s;

  const dim3 grid(static_cast<unsigned>((a.n_embd + 255) / 256), static_cast<unsigned>(a.tokens));
  CombineKernel<<<grid, 256, 0, stream>>>(down, a.weights, a.top_k, a.n_embd, a.y, a.y_stride,
                                          a.tokens);
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
