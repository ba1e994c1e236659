// MoeGemvCuda: orchestration of the indexed GEMVs (matmul_cuda.h) plus two small kernels, the
// clamped SwiGLU over the T*k intermediate rows and the weighted combine into y - or, for a few
// tokens, of the two kernels of moe_decode_cuda.h.
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/alignment.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/matmul/moe_decode_cuda.h"
#include "kernels/matmul/moe_gemv_cuda.h"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels {
namespace {

int64_t Align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

int64_t ClampFusedTokens(int64_t tokens) {
  return tokens < 0 ? 0 : (tokens > kMoeGemvFusedMaxTokens ? kMoeGemvFusedMaxTokens : tokens);
}

std::atomic<int64_t>& DecodeFusedTokensSetting() {
  static std::atomic<int64_t> tokens{[] {
    const char* v = std::getenv("STEPSERVE_MOE_DECODE_FUSED");
    return v == nullptr || v[0] == '\0' ? int64_t{2} : ClampFusedTokens(std::atoll(v));
  }()};
  return tokens;
}

int ClampPairMode(int mode) { return mode < 0 ? 0 : (mode > 2 ? 2 : mode); }

std::atomic<int>& GateUpPairSetting() {
  static std::atomic<int> mode{ClampPairMode(EnvSwitchLevel("STEPSERVE_MOE_GATE_UP_PAIR", 2))};
  return mode;
}

std::atomic<int64_t> gate_up_pair_launches{0};

// Whether this many tokens take the gate / up pair (MoeGemvCudaGateUpPair's mode).
bool GateUpPairTakes(int64_t tokens) {
  const int mode = GateUpPairSetting().load(std::memory_order_relaxed);
  return mode == 1 || (mode == 2 && tokens <= kMoeGemvGateUpPairTokens);
}

// Whether the two-kernel path (moe_decode_cuda.h) may run, types and token count aside: n_ff in
// whole 32-row blocks, and the GEMVs not forced through the streamed kernel.
bool DecodeFusedApplies(int64_t n_ff) {
  return n_ff % 32 == 0 && gemv_internal::GemvStreamModeSetting().load(std::memory_order_relaxed) !=
                               static_cast<int>(GemvStreamMode::kAlways);
}

// Expert rows per token of the few-token path: the routed slots, and the shared expert's.
int64_t DecodeSlots(const MoeGemvCudaArgs& a) { return a.top_k + (a.has_shared ? 1 : 0); }

// Workspace layout: gate out, up out (then SwiGLU in place into gate out), down out, the
// quantized-activation scratch (large enough for the T*k intermediate rows, which also holds
// the T rows of x), then the grouping by expert (slot_matrix, slot_begin, group_order; sized for
// the most slots any n_experts can give, so the layout does not depend on it), then for up to
// kMoeGemvFusedDownMaxTokens tokens the down GEMV's int8 activations written by the SwiGLU.
struct Layout {
  int64_t gate, up, down, scratch, scratch_bytes, slot_matrix, slot_begin, group_order, down_q8,
      total;
};

Layout MakeLayout(int64_t tokens, int64_t top_k, int64_t n_embd, int64_t n_ff) {
  const int64_t groups = tokens * top_k;
  Layout l{};
  l.gate = 0;
  l.up = l.gate + Align16(groups * n_ff * 4);
  l.down = l.up + Align16(groups * n_ff * 4);
  l.scratch = l.down + Align16(groups * n_embd * 4);
  const int64_t a = GemvIndexedCudaScratchBytes(n_embd, tokens);
  const int64_t b = GemvIndexedCudaScratchBytes(n_ff, groups);
  l.scratch_bytes = Align16(a > b ? a : b);
  l.slot_matrix = l.scratch + l.scratch_bytes;
  l.slot_begin = l.slot_matrix + Align16(groups * 4);
  l.group_order = l.slot_begin + Align16((groups + 1) * 4);
  l.down_q8 = l.group_order + Align16(groups * 4);
  l.total =
      l.down_q8 +
      (tokens <= kMoeGemvFusedDownMaxTokens ? Align16(GemvCudaScratchBytes(n_ff, groups)) : 0);
  return l;
}

// Buckets the groups by id, in id order (ids outside [0, n_matrices) share the last bucket),
// one slot per non-empty bucket: slot_matrix[s] = id (-1 for the out-of-range bucket),
// group_order[slot_begin[s] .. slot_begin[s + 1]) = its groups; slots past the used ones get
// kSlotUnused and empty ranges. One CTA: counts in shared memory, one warp scans them.
__global__ void __launch_bounds__(1024)
    GroupByIdKernel(const int32_t* ids, int groups, int n_matrices, int slots, int32_t* slot_matrix,
                    int32_t* slot_begin, int32_t* group_order) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  extern __shared__ int shared[];
  __shared__ int used_slots;
  const int n_buckets = n_matrices + 1;
  int* count = shared;                    // per bucket, later the scatter cursor
  int* offset = shared + n_buckets;       // exclusive prefix sum of count
  int* slot_of = shared + 2 * n_buckets;  // exclusive prefix sum of (count > 0)
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  auto bucket = [&](int32_t id) { return id >= 0 && id < n_matrices ? id : n_matrices; };
  for (int i = tid; i < n_buckets; i += threads) count[i] = 0;
  __syncthreads();
  for (int g = tid; g < groups; g += threads) atomicAdd(&count[bucket(ids[g])], 1);
  __syncthreads();
  if (tid < 32) {
    const int per = (n_buckets + 31) / 32;
    const int lo = tid * per, hi = lo + per < n_buckets ? lo + per : n_buckets;
    int sum = 0, nonzero = 0;
    for (int i = lo; i < hi; ++i) {
      sum += count[i];
      nonzero += count[i] > 0;
    }
    int inclusive_sum = sum, inclusive_nonzero = nonzero;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int a = __shfl_up_sync(0xFFFFFFFFu, inclusive_sum, off);
      const int b = __shfl_up_sync(0xFFFFFFFFu, inclusive_nonzero, off);
      if (tid >= off) {
        inclusive_sum += a;
        inclusive_nonzero += b;
      }
    }
    int run = inclusive_sum - sum, run_slots = inclusive_nonzero - nonzero;
    for (int i = lo; i < hi; ++i) {
      offset[i] = run;
      slot_of[i] = run_slots;
      run += count[i];
      run_slots += count[i] > 0;
    }
    if (tid == 31) used_slots = inclusive_nonzero;
  }
  __syncthreads();
  for (int b = tid; b < n_buckets; b += threads) {
    if (count[b] > 0) {
      slot_matrix[slot_of[b]] = b < n_matrices ? b : -1;
      slot_begin[slot_of[b]] = offset[b];
    }
  }
  for (int s = used_slots + tid; s <= slots; s += threads) {
    if (s < slots) slot_matrix[s] = gemv_internal::kSlotUnused;
    slot_begin[s] = groups;
  }
  __syncthreads();
  for (int b = tid; b < n_buckets; b += threads) count[b] = offset[b];
  __syncthreads();
  for (int g = tid; g < groups; g += threads) {
    group_order[atomicAdd(&count[bucket(ids[g])], 1)] = g;
  }
}

// kVec values per thread (4: float4 loads and stores, for 16-byte aligned rows with n % 4 == 0 -
// a prefill's rows; one per thread measured ~40% of bandwidth in the session-9 profile), the same
// float operations per value either way.
template <int kVec>
__global__ void SwiGluRowsKernel(float* g, const float* u, int64_t n, float limit, bool clamp) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t i = kVec * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (i >= n) return;
  auto one = [&](float gv, float uv) { return gemv_internal::ExpertSwiGlu(gv, uv, limit, clamp); };
  if constexpr (kVec == 4) {
    const float4 g4 = *reinterpret_cast<const float4*>(g + i);
    const float4 u4 = *reinterpret_cast<const float4*>(u + i);
    *reinterpret_cast<float4*>(g + i) =
        make_float4(one(g4.x, u4.x), one(g4.y, u4.y), one(g4.z, u4.z), one(g4.w, u4.w));
  } else {
    g[i] = one(g[i], u[i]);
  }
}

// SwiGluRowsKernel's values, 4 per thread (the same float operations, so the same results), also
// quantized as the down GEMV's int8 activations in its type's order (q8_quantize.cuh: the bytes
// its quantizer would write from these floats). 8 threads hold a 32-value block: n_ff % 32 == 0,
// so a group never straddles rows and whole groups stop together at the end.
__global__ void SwiGluRowsQ8Kernel(float* g, const float* u, int64_t n, int64_t n_ff, float limit,
                                   bool clamp, int8_t* xq, float2* xd, bool pair_order) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (4 * t >= n) return;
  const float4 g4 = reinterpret_cast<const float4*>(g)[t];
  const float4 u4 = reinterpret_cast<const float4*>(u)[t];
  auto swiglu = [&](float gv, float uv) {
    return gemv_internal::ExpertSwiGlu(gv, uv, limit, clamp);
  };
  const float4 z =
      make_float4(swiglu(g4.x, u4.x), swiglu(g4.y, u4.y), swiglu(g4.z, u4.z), swiglu(g4.w, u4.w));
  reinterpret_cast<float4*>(g)[t] = z;
  const int64_t row = 4 * t / n_ff, k = 4 * t - row * n_ff;
  const unsigned mask = 0xFFu << (threadIdx.x & 24);
  const q8_quantize::Q8Four q = q8_quantize::QuantizeQ8Four(z, mask);
  q8_quantize::StoreQ8Four(q, k, xq + row * n_ff, xd + row * (n_ff / 32), pair_order, mask);
}

#include "kernels/matmul/moe_swiglu_f16.cuh"

// y[t][i] += sum_k w[t][k] * down[t*k + k][i]; one thread per (t, kVec columns i..): 4 with
// float4 loads where n_embd, y_stride and the pointers allow, the same float operations per value.
template <int kVec>
__global__ void CombineKernel(const float* down, const float* weights, int64_t top_k,
                              int64_t n_embd, float* y, int64_t y_stride, int64_t tokens) {
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  const int64_t i = kVec * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  const int64_t t = blockIdx.y;
  if (i >= n_embd || t >= tokens) return;
  if constexpr (kVec == 4) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t k = 0; k < top_k; ++k) {
      const float w = weights[t * top_k + k];
      const float4 d = *reinterpret_cast<const float4*>(down + (t * top_k + k) * n_embd + i);
      acc.x += w * d.x;
      acc.y += w * d.y;
      acc.z += w * d.z;
      acc.w += w * d.w;
    }
    float4* out = reinterpret_cast<float4*>(y + t * y_stride + i);
    const float4 o = *out;
    *out = make_float4(o.x + acc.x, o.y + acc.y, o.z + acc.z, o.w + acc.w);
  } else {
    float acc = 0.f;
    for (int64_t k = 0; k < top_k; ++k) {
      acc += weights[t * top_k + k] * down[(t * top_k + k) * n_embd + i];
    }
    y[t * y_stride + i] += acc;
  }
}

}  // namespace

int64_t MoeGemvCudaCounterInts(int64_t tokens, int64_t slots_per_token, int64_t n_ff) {
  return tokens * slots_per_token * (n_ff / 32);
}

bool MoeGemvCudaTakesShared(GgmlType gate_up, GgmlType down, int64_t tokens, int64_t n_ff) {
  return tokens >= 1 && tokens <= MoeGemvCudaDecodeFusedTokens() && DecodeFusedApplies(n_ff) &&
         gemv_internal::ExpertDecodeFusedSupports(gate_up) &&
         gemv_internal::ExpertDecodeFusedSupports(down);
}

int64_t MoeGemvCudaDecodeFusedTokens() {
  return DecodeFusedTokensSetting().load(std::memory_order_relaxed);
}

int64_t SetMoeGemvCudaDecodeFusedTokens(int64_t tokens) {
  return DecodeFusedTokensSetting().exchange(ClampFusedTokens(tokens));
}

bool SetMoeGemvCudaGateUpWhole(bool on) {
  return gemv_internal::ExpertGateUpWholeSetting().exchange(on);
}

int MoeGemvCudaGateUpPair() { return GateUpPairSetting().load(std::memory_order_relaxed); }

int64_t MoeGemvCudaGateUpPairLaunches() {
  return gate_up_pair_launches.load(std::memory_order_relaxed);
}

int SetMoeGemvCudaGateUpPair(int mode) { return GateUpPairSetting().exchange(ClampPairMode(mode)); }

int64_t MoeGemvCudaWorkspaceBytes(int64_t tokens, int64_t top_k, int64_t n_embd, int64_t n_ff) {
  if (tokens <= 0 || top_k <= 0 || n_embd <= 0 || n_ff <= 0) return 0;
  return MakeLayout(tokens, top_k, n_embd, n_ff).total;
}

bool MoeGemvCudaSupports(GgmlType gate_up, GgmlType down) {
  return GemvCudaSupports(gate_up) && GemvCudaSupports(down);
}

bool MoeGemvCudaSupportsManyTokens(GgmlType gate_up, GgmlType down) {
  if (gate_up == GgmlType::kIQ4_XS && down == GgmlType::kIQ4_XS &&
      gemv_internal::GemvMmaMinRows() <= gemv_internal::kGemvMmaMaxRows) {
    return true;
  }
  // Other types only through the grouped F16 GEMM (Q4_K and Q6_K in its default kAll mode:
  // matmul_cuda.h), also mixed: gate/up and down may differ in type and activation order (IQ4_XS
  // pair order, else natural), as the down projection converts its own input (x_prequantized is
  // never set for it) and the scratch holds either projection's F16 or int8 activations
  // (MakeLayout: GemvIndexedCudaScratchBytes of both). With few pairs per expert a projection
  // takes the dp4a grouped GEMV instead, which decodes every supported type at any pair count.
  return GroupedGemmF16Enabled(gate_up) && GroupedGemmF16Enabled(down);
}

KernelStatus ValidateMoeGemvCuda(const MoeGemvCudaArgs& a) {
  if (!MoeGemvCudaSupports(a.gate.type, a.down.type) || a.up.type != a.gate.type) {
    return KernelStatus::kUnsupportedType;
  }
  if (a.x == nullptr || a.ids == nullptr || a.weights == nullptr || a.y == nullptr ||
      a.workspace == nullptr || reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  // n_experts bounds the grouping kernel's shared memory (3 ints per expert, 48 KiB).
  const bool many = a.tokens > kMoeGemvMaxTokens &&
                    MoeGemvCudaSupportsManyTokens(a.gate.type, a.down.type) &&
                    a.tokens * a.top_k <= kMoeGemvMaxPairsMany;
  if (a.tokens < 1 || (a.tokens > kMoeGemvMaxTokens && !many) || a.top_k < 1 ||
      a.top_k > a.n_experts || a.n_experts > kMoeGemvMaxExperts || a.n_embd <= 0 || a.n_ff <= 0 ||
      a.y_stride < a.n_embd || a.x_stride < a.n_embd || a.n_ff % 4 != 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (a.has_shared) {
    if (a.shared_gate.type != a.gate.type || a.shared_up.type != a.gate.type ||
        a.shared_down.type != a.down.type) {
      return KernelStatus::kUnsupportedType;
    }
    if (!MoeGemvCudaTakesShared(a.gate.type, a.down.type, a.tokens, a.n_ff) ||
        a.counters == nullptr || a.shared_gate.data == nullptr || a.shared_up.data == nullptr ||
        a.shared_down.data == nullptr || a.shared_gate.row_bytes % 16 != 0 ||
        a.shared_up.row_bytes % 16 != 0 || a.shared_down.row_bytes % 16 != 0 ||
        a.shared_gate.row_bytes < RowBytes(a.gate.type, a.n_embd) ||
        a.shared_up.row_bytes < RowBytes(a.gate.type, a.n_embd) ||
        a.shared_down.row_bytes < RowBytes(a.down.type, a.n_ff)) {
      return KernelStatus::kInvalidArgument;
    }
  }
  if (a.workspace_bytes < MoeGemvCudaWorkspaceBytes(a.tokens, DecodeSlots(a), a.n_embd, a.n_ff)) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

namespace {

// The down GEMV's int8 activations of the T*k SwiGLU rows (Layout::down_q8, up to
// kMoeGemvFusedDownMaxTokens tokens).
int8_t* DownQ8(const Layout& l, uint8_t* base) {
  return reinterpret_cast<int8_t*>(base + l.down_q8);
}
float2* DownQ8Scales(const Layout& l, uint8_t* base, int64_t n_ff, int64_t groups) {
  return reinterpret_cast<float2*>(base + l.down_q8 + gemv_internal::Q8ScalesOffset(n_ff, groups));
}

// Several tokens: the (token, slot) pairs grouped by expert (GroupByIdKernel's Layout arrays);
// one token: none (its top_k experts are distinct, nothing to share).
struct Grouping {
  bool grouped;
  int64_t slots;
  int32_t *slot_matrix, *slot_begin, *group_order;
  void SetOn(GemvIndexedCudaArgs* g) const {
    if (!grouped) return;
    g->slot_matrix = slot_matrix;
    g->slot_begin = slot_begin;
    g->group_order = group_order;
    g->slots = slots;
  }
};

// The SwiGLU of a prefill's expert rows written as the down projection's F16 activations
// (SwiGluRowsF16Kernel) when that projection takes the grouped F16 GEMM, with
// STEPSERVE_MOE_SWIGLU_F16=1 (read once; off until its GPU tests have run): else SwiGluRowsKernel's
// F32 rows, then the GEMM's conversion.
bool SwiGluF16() {
  static const bool on = EnvSwitchSet("STEPSERVE_MOE_SWIGLU_F16");
  return on;
}

KernelStatus SwiGluLaunch(const MoeGemvCudaArgs& a, const Layout& l, uint8_t* base, int64_t groups,
                          bool fuse_down, __half* down_xh, cudaStream_t stream);

// The unfused gate and up GEMVs and the SwiGLU (with the down's quantization when fuse_down; as
// the down's F16 activations, into down_xh, when that is set).
KernelStatus GateUpSwiGlu(const MoeGemvCudaArgs& a, const Layout& l, uint8_t* base,
                          const Grouping& grouping, bool fuse_down, __half* down_xh,
                          cudaStream_t stream) {
  const int64_t groups = a.tokens * a.top_k;
  float* gate = reinterpret_cast<float*>(base + l.gate);
  float* up = reinterpret_cast<float*>(base + l.up);
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
  g.scratch = base + l.scratch;
  g.scratch_bytes = l.scratch_bytes;
  g.x_q8 = a.x_q8;
  grouping.SetOn(&g);
  // Gate and up in one launch where the pair applies (MoeGemvCudaGateUpPair).
  if (GateUpPairTakes(a.tokens) && a.up.type == a.gate.type && a.up.row_bytes == a.gate.row_bytes &&
      a.up.matrix_bytes == a.gate.matrix_bytes) {
    GemvIndexedCudaArgs pair = g;
    pair.w2 = a.up.data;
    pair.y2 = up;
    if (GemvIndexedCudaTakesMatrixPair(pair)) {
      if (KernelStatus s = GemvIndexedCuda(pair, stream); s != KernelStatus::kOk) return s;
      gate_up_pair_launches.fetch_add(1, std::memory_order_relaxed);
      return SwiGluLaunch(a, l, base, groups, fuse_down, down_xh, stream);
    }
  }
  if (KernelStatus s = GemvIndexedCuda(g, stream); s != KernelStatus::kOk) return s;
  GemvIndexedCudaArgs u = g;
  u.w = a.up.data;
  u.w_row_bytes = a.up.row_bytes;
  u.w_matrix_bytes = a.up.matrix_bytes;
  u.y = up;
  // Shares the gate's quantized activations unless the types keep them in different orders.
  u.x_prequantized = SameQ8ScratchOrder(a.gate.type, a.up.type);
  if (KernelStatus s = GemvIndexedCuda(u, stream); s != KernelStatus::kOk) return s;
  return SwiGluLaunch(a, l, base, groups, fuse_down, down_xh, stream);
}

// The SwiGLU of the gate and up rows: into the down's F16 activations (down_xh), its int8 ones
// (fuse_down) or in place into the gate rows.
KernelStatus SwiGluLaunch(const MoeGemvCudaArgs& a, const Layout& l, uint8_t* base, int64_t groups,
                          bool fuse_down, __half* down_xh, cudaStream_t stream) {
  float* gate = reinterpret_cast<float*>(base + l.gate);
  float* up = reinterpret_cast<float*>(base + l.up);

  const int64_t n = groups * a.n_ff;
  if (down_xh != nullptr) {
    LaunchSwiGluRowsF16(gate, up, groups, a.n_ff, a.limit, a.limit > kSwiGluClampThreshold,
                        a.down.type == GgmlType::kIQ4_XS, down_xh, stream);
  } else if (fuse_down) {
    LaunchWithPdl(SwiGluRowsQ8Kernel, static_cast<unsigned>((n / 4 + 255) / 256), 256, 0, stream,
                  gate, up, n, a.n_ff, a.limit, a.limit > kSwiGluClampThreshold, DownQ8(l, base),
                  DownQ8Scales(l, base, a.n_ff, groups), Q8ScratchPosition(a.down.type, 1) != 1);
  } else {
    if (n % 4 == 0 && Aligned16(gate) && Aligned16(up)) {
      LaunchWithPdl(SwiGluRowsKernel<4>, static_cast<unsigned>((n / 4 + 255) / 256), 256, 0, stream,
                    gate, up, n, a.limit, a.limit > kSwiGluClampThreshold);
    } else {
      LaunchWithPdl(SwiGluRowsKernel<1>, static_cast<unsigned>((n + 255) / 256), 256, 0, stream,
                    gate, up, n, a.limit, a.limit > kSwiGluClampThreshold);
    }
  }
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;

  return KernelStatus::kOk;
}

// Few tokens, gate + up + SwiGLU + the down's quantization in one launch (moe_decode_cuda.h); x's
// int8 activations from x_q8, else quantized into the scratch first.
KernelStatus LaunchFusedGateUp(const MoeGemvCudaArgs& a, const Layout& l, uint8_t* base,
                               cudaStream_t stream) {
  gemv_internal::ExpertGateUpParams e{};
  if (const KernelStatus s =
          gemv_internal::MakeGemvParams(a.gate.type, a.gate.data, a.gate.row_bytes, a.n_embd,
                                        a.n_ff, a.x, a.x_stride, nullptr, 0, &e.p);
      s != KernelStatus::kOk) {
    return s;
  }
  e.p.rows = static_cast<int>(a.tokens);  // x rows (for the quantizer)
  const auto* q8 = static_cast<const uint8_t*>(a.x_q8 != nullptr ? a.x_q8 : base + l.scratch);
  e.p.xq = reinterpret_cast<const int8_t*>(q8);
  e.p.xd = reinterpret_cast<const float2*>(q8 + gemv_internal::Q8ScalesOffset(a.n_embd, a.tokens));
  if (a.x_q8 == nullptr &&
      gemv_internal::LaunchQuantizeQ8(e.p, const_cast<int8_t*>(e.p.xq), const_cast<float2*>(e.p.xd),
                                      stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  e.p.matrix_ids = a.ids;
  e.p.w_matrix_bytes = a.gate.matrix_bytes;
  e.p.n_matrices = a.n_experts;
  e.up = static_cast<const uint8_t*>(a.up.data);
  e.up_row_bytes = a.up.row_bytes;
  e.up_matrix_bytes = a.up.matrix_bytes;
  e.limit = a.limit;
  e.clamp = a.limit > kSwiGluClampThreshold;
  e.act = reinterpret_cast<float*>(base + l.gate);
  e.act_q = DownQ8(l, base);
  e.act_d = DownQ8Scales(l, base, a.n_ff, a.tokens * DecodeSlots(a));
  e.act_pair_order = Q8ScratchPosition(a.down.type, 1) != 1;
  e.counters = a.counters;
  e.routed = static_cast<int>(a.top_k);
  if (a.has_shared) {
    e.shared_gate = static_cast<const uint8_t*>(a.shared_gate.data);
    e.shared_up = static_cast<const uint8_t*>(a.shared_up.data);
    e.shared_gate_row_bytes = a.shared_gate.row_bytes;
    e.shared_up_row_bytes = a.shared_up.row_bytes;
    e.shared_limit = a.shared_limit;
    e.shared_clamp = a.shared_limit > kSwiGluClampThreshold;
  }
  e.tokens = static_cast<int>(a.tokens);
  if (gemv_internal::LaunchExpertGateUp(a.gate.type, e, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

// Few tokens, the down projection of the SwiGLU rows (already quantized) and the weighted combine
// into y in one launch (with the shared expert's rows, weight 1).
KernelStatus LaunchFusedDown(const MoeGemvCudaArgs& a, const Layout& l, uint8_t* base,
                             cudaStream_t stream) {
  gemv_internal::ExpertDownParams e{};
  if (const KernelStatus s =
          gemv_internal::MakeGemvParams(a.down.type, a.down.data, a.down.row_bytes, a.n_ff,
                                        a.n_embd, nullptr, 0, a.y, a.y_stride, &e.p);
      s != KernelStatus::kOk) {
    return s;
  }
  e.p.rows = 1;
  e.p.xq = DownQ8(l, base);
  e.p.xd = DownQ8Scales(l, base, a.n_ff, a.tokens * DecodeSlots(a));
  e.tokens = static_cast<int>(a.tokens);
  e.p.matrix_ids = a.ids;
  e.p.w_matrix_bytes = a.down.matrix_bytes;
  e.p.n_matrices = a.n_experts;
  e.weights = a.weights;
  e.routed = static_cast<int>(a.top_k);
  if (a.has_shared) {
    e.shared_down = static_cast<const uint8_t*>(a.shared_down.data);
    e.shared_down_row_bytes = a.shared_down.row_bytes;
  }
  if (gemv_internal::LaunchExpertDownCombine(a.down.type, e, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

}  // namespace

KernelStatus MoeGemvCuda(const MoeGemvCudaArgs& a, cudaStream_t stream) {
  if (KernelStatus s = ValidateMoeGemvCuda(a); s != KernelStatus::kOk) return s;
  const int64_t groups = a.tokens * a.top_k;
  const Layout l = MakeLayout(a.tokens, DecodeSlots(a), a.n_embd, a.n_ff);
  auto* base = static_cast<uint8_t*>(a.workspace);
  float* gate = reinterpret_cast<float*>(base + l.gate);
  float* down = reinterpret_cast<float*>(base + l.down);

  // Up to MoeGemvCudaDecodeFusedTokens() tokens: the two-kernel path where the types allow it
  // (moe_decode_cuda.h); the down projection may stay a GEMV (a type it does not decode).
  const bool decode_fused = a.tokens <= MoeGemvCudaDecodeFusedTokens() && a.counters != nullptr &&
                            DecodeFusedApplies(a.n_ff);
  const bool fused_gate_up = decode_fused && gemv_internal::ExpertDecodeFusedSupports(a.gate.type);
  const bool fused_down = fused_gate_up && gemv_internal::ExpertDecodeFusedSupports(a.down.type);

  // Several tokens: group the (token, slot) pairs by expert so each expert's matrices stream
  // once per few of its pairs. One token: its top_k experts are distinct, nothing to share.
  Grouping grouping{};
  grouping.grouped = a.tokens > 1 && !fused_down;
  grouping.slots = groups < a.n_experts + 1 ? groups : a.n_experts + 1;
  grouping.slot_matrix = reinterpret_cast<int32_t*>(base + l.slot_matrix);
  grouping.slot_begin = reinterpret_cast<int32_t*>(base + l.slot_begin);
  grouping.group_order = reinterpret_cast<int32_t*>(base + l.group_order);
  if (grouping.grouped) {
    const size_t shared = 3 * static_cast<size_t>(a.n_experts + 1) * sizeof(int);
    LaunchWithPdl(GroupByIdKernel, 1, 1024, shared, stream, a.ids, static_cast<int>(groups),
                  static_cast<int>(a.n_experts), static_cast<int>(grouping.slots),
                  grouping.slot_matrix, grouping.slot_begin, grouping.group_order);
    if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  }

  const bool fuse_down =
      a.fuse_down_quantization && a.tokens <= kMoeGemvFusedDownMaxTokens && a.n_ff % 32 == 0;
  // Whether the down GEMV's int8 activations will be in Layout::down_q8 (its quantizer skipped).
  const bool down_q8_written = fused_gate_up || fuse_down;
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
  d.scratch = base + l.scratch;
  d.scratch_bytes = l.scratch_bytes;
  if (down_q8_written) d.x_q8 = DownQ8(l, base);
  grouping.SetOn(&d);
  // A prefill's down projection through the grouped F16 GEMM: the SwiGLU writes its F16 rows.
  // (Not with the wgmma GEMM: the SwiGLU writes the mma.sync kernel's pair order.)
  const bool swiglu_f16 = !fused_gate_up && !fuse_down && SwiGluF16() &&
                          !gemv_internal::GemmF16WgmmaOn() && a.n_ff % 32 == 0 && Aligned16(gate) &&
                          Aligned16(base + l.up) && Aligned16(d.scratch) &&
                          GemvIndexedCudaTakesGroupedF16(d);
  if (fused_gate_up) {
    if (KernelStatus s = LaunchFusedGateUp(a, l, base, stream); s != KernelStatus::kOk) return s;
  } else {
    __half* down_xh = swiglu_f16 ? static_cast<__half*>(d.scratch) : nullptr;
    if (KernelStatus s = GateUpSwiGlu(a, l, base, grouping, fuse_down, down_xh, stream);
        s != KernelStatus::kOk) {
      return s;
    }
  }
  if (fused_down) return LaunchFusedDown(a, l, base, stream);
  d.x_prequantized = swiglu_f16;
  if (KernelStatus s = GemvIndexedCuda(d, stream); s != KernelStatus::kOk) return s;

  const bool vec = a.n_embd % 4 == 0 && a.y_stride % 4 == 0 && Aligned16(down) && Aligned16(a.y);
  const int64_t per_thread = vec ? 4 : 1;
  const dim3 grid(static_cast<unsigned>((a.n_embd / per_thread + 255) / 256),
                  static_cast<unsigned>(a.tokens));
  LaunchWithPdl(vec ? CombineKernel<4> : CombineKernel<1>, grid, 256, 0, stream, down, a.weights,
                a.top_k, a.n_embd, a.y, a.y_stride, a.tokens);
  if (cudaGetLastError() != cudaSuccess) return KernelStatus::kInvalidArgument;
  return KernelStatus::kOk;
}

}  // namespace stepserve::kernels
