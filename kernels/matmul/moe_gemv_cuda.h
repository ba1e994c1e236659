// The routed-expert FFN of one MoE layer at decode sizes (a few tokens), entirely on the device:
//   y[t] += sum_k weights[t][k] * Down_e(SwiGLU_limit(Gate_e x[t], Up_e x[t])),  e = ids[t][k]
// (semantics of kernels/moe/moe.h MoeExpertsArgs; clamped SwiGLU as kernels/elementwise SwiGluRef).
//
// Six launches (seven with several tokens), no host synchronisation, so a decode step stays
// capturable in a CUDA graph: [group the (token, slot) pairs by expert ->] quantize x -> indexed
// GEMV gate -> indexed GEMV up (same quantized x) -> SwiGLU + quantize of the T*k intermediate
// rows -> indexed GEMV down -> weighted combine into y. Up to MoeGemvCudaDecodeFusedTokens() with
// `counters` given: two launches (moe_decode_cuda.h), plus x's quantizer unless x_q8 is given. At
// batch 1 each picked expert matrix is streamed once, exactly the active-expert bytes (llama.cpp's
// MoE layer spends ~138 us here, the bytes ~31 us); with several tokens the grouped GEMV streams
// each picked expert once per four of the pairs that picked it instead of once per pair; with many
// tokens per expert (a prefill, IQ4_XS experts) the grouped tensor-core GEMV decodes each expert
// tile once per 32 of its pairs.
#ifndef STEPSERVE_KERNELS_MATMUL_MOE_GEMV_CUDA_H_
#define STEPSERVE_KERNELS_MATMUL_MOE_GEMV_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/common/kernel_status.h"

namespace stepserve::kernels {

// One 3-D expert weight in device memory: matrix e's row o at data + e * matrix_bytes +
// o * row_bytes (rows padded to 16 bytes).
struct ExpertMatrixCuda {
  GgmlType type = GgmlType::kQ4_K;
  const void* data = nullptr;
  int64_t row_bytes = 0;
  int64_t matrix_bytes = 0;
};

struct MoeGemvCudaArgs {
  const float* x = nullptr;  // device [tokens][x_stride], n_embd used
  int64_t x_stride = 0;
  int64_t tokens = 0;  // 1 .. kMoeGemvMaxTokens (more: MoeGemvCudaSupportsManyTokens)
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_experts = 0;
  const int32_t* ids = nullptr;    // device [tokens][top_k]
  const float* weights = nullptr;  // device [tokens][top_k]
  int64_t top_k = 0;
  ExpertMatrixCuda gate, up, down;  // gate/up: n_embd -> n_ff; down: n_ff -> n_embd
  float limit = 0.0f;               // <= 1e-6: no clamp
  float* y = nullptr;               // device [tokens][y_stride], accumulated into
  int64_t y_stride = 0;
  void* workspace = nullptr;  // device, 16-byte aligned, MoeGemvCudaWorkspaceBytes bytes
  int64_t workspace_bytes = 0;
  // Optional: x's int8 activations in the gate / up type's order (GemvIndexedCudaArgs::x_q8);
  // the gate and up GEMVs then skip their quantizer.
  const void* x_q8 = nullptr;
  // The SwiGLU kernel also writes its rows as the down GEMV's int8 activations (the same bytes as
  // its quantizer), which then does not run: up to kMoeGemvFusedDownMaxTokens tokens, n_ff a
  // multiple of 32 (else ignored). The backend sets it with its fused quantization.
  bool fuse_down_quantization = false;
  // Optional: MoeGemvCudaCounterInts(tokens, top_k (+ 1 with the shared expert), n_ff) device
  // ints, zero before the first call (every call leaves them zero). With them up to
  // MoeGemvCudaDecodeFusedTokens() tokens take the two-kernel path (moe_decode_cuda.h: gate + up +
  // SwiGLU + the down's quantization in one launch, down + combine in another) where the types
  // allow it (IQ4_XS, Q4_K, Q5_K, Q8_0; n_ff a multiple of 32); a down type it does not decode
  // (Q6_K) keeps its GEMV and combine.
  int32_t* counters = nullptr;
  // Optional shared expert (always on, weight 1, its own clamp; spec 4.6), through the two-kernel
  // path only (MoeGemvCudaTakesShared; counters required): y[t] also gets
  // SharedDown(SwiGLU_shared_limit(SharedGate x[t], SharedUp x[t])). Gate / up of the gate type,
  // down of the down type, n_ff wide (matrix_bytes unused). The workspace and counters are then
  // sized for top_k + 1 slots per token (MoeGemvCudaWorkspaceBytes(tokens, top_k + 1, ...),
  // MoeGemvCudaCounterInts(tokens, top_k + 1, n_ff)).
  bool has_shared = false;
  ExpertMatrixCuda shared_gate, shared_up, shared_down;
  float shared_limit = 0.0f;
};

inline constexpr int64_t kMoeGemvMaxTokens = 64;
inline constexpr int64_t kMoeGemvFusedDownMaxTokens = 16;
// The most tokens the two-kernel path (moe_decode_cuda.h) takes (counters and workspace are sized
// for it); how many it takes is MoeGemvCudaDecodeFusedTokens(). Its routed experts stream and
// decode every (token, slot)'s matrices where the grouped GEMVs decode a matrix once for all the
// tokens that use it (few share one at 2-4 tokens); the shared expert is decoded once per token at
// 1-2 tokens and once for all tokens from 3. Measured on the H200 (45 layers IQ4_XS, session 11,
// the shared expert then decoded per token at any count): 1 and 2 tokens faster (5.98 -> 5.68 ms,
// 7.97 -> 7.87 ms), 4 tokens slower (11.41 -> 12.07 ms) - hence the default limit of 2 until the
// decode-once form is measured.
inline constexpr int64_t kMoeGemvFusedMaxTokens = 4;
// Tokens up to which the two-kernel path runs: STEPSERVE_MOE_DECODE_FUSED (0 = never, up to
// kMoeGemvFusedMaxTokens; default 2, the counts measured faster) at the first use, or what
// SetMoeGemvCudaDecodeFusedTokens set (returns the previous value; clamped to 0..4).
int64_t MoeGemvCudaDecodeFusedTokens();
int64_t SetMoeGemvCudaDecodeFusedTokens(int64_t tokens);
// Whether the two-kernel path's IQ4_XS gate / up kernel runs its whole iterations without
// per-step guards (the same bits; on by default since session 45, STEPSERVE_MOE_GATE_UP_WHOLE=0
// off): for tests and A/B runs; returns the previous setting.
bool SetMoeGemvCudaGateUpWhole(bool on);
// The grouped gate and up GEMVs of a decode batch as one launch - the up matrices in the grid's
// second half of slots (GemvIndexedCudaTakesMatrixPair) - instead of two, where their types and
// row sizes match: the same rows, dots and bits, one launch boundary and one grid tail fewer a MoE
// layer. Modes: 0 never, 1 at every token count, 2 (the default) up to kMoeGemvGateUpPairTokens
// (IQ4_XS pairs past ~72 expert slots at 48 CTAs a slot and matrix, gemv_q8x_grouped_cuda.cu).
// Measured on the H100 (session 40, 24 layers IQ4_XS, F16 cache, two alternating rounds, ms per
// step at 3 / 4 / 8 / 16 / 64 streams): 3.867 / 4.503 / 6.820 / 9.916 / 24.239 and 3.866 / 4.500 /
// 6.823 / 9.930 / 24.226 against 3.936 / 4.581 / 6.859 / 9.888 / 24.300 and 3.962 / 4.586 / 6.863
// / 9.900 / 24.267: -2.1% / -1.8% / -0.6% at 3-8, +0.3% at 16 (the doubled grid),
// -0.2% at 64. With 48 CTAs a slot past ~72 slots, 16 / 32 / 64 streams measured -2.1% / -1.7% /
// +0.3% (session 40) and again 9.825-9.870 / 16.013 against 10.030-10.060 / 16.286-16.307 ms and
// 24.596 against 24.349 (session 41, results-v36.txt: -2.0% / -1.8% / +1.0%), with
// moe_gemv_cuda_test's long-row case and all 55 cases in mode 1 passing (H100): hence the limit
// of 32 tokens.
// STEPSERVE_MOE_GATE_UP_PAIR=0/1/2 (read at the first use) or SetMoeGemvCudaGateUpPair (returns the
// previous mode; clamped to 0..2) sets it.
inline constexpr int64_t kMoeGemvGateUpPairTokens = 32;
int MoeGemvCudaGateUpPair();
int SetMoeGemvCudaGateUpPair(int mode);
// Pair launches MoeGemvCuda has enqueued in this process (tests check the path).
int64_t MoeGemvCudaGateUpPairLaunches();
// More tokens (a prefill chunk) when every expert matrix is IQ4_XS: the grouped tensor-core GEMV
// (gemv_mma_cuda.cu) then runs each expert's pairs in chunks of 32. Bounded by the 65535 groups
// (token, slot pairs) of the indexed GEMV.
inline constexpr int64_t kMoeGemvMaxPairsMany = 65535;
inline constexpr int64_t kMoeGemvMaxExperts = 4000;

int64_t MoeGemvCudaCounterInts(int64_t tokens, int64_t slots_per_token, int64_t n_ff);
// Whether MoeGemvCuda takes a shared expert for these types and sizes (1 up to
// MoeGemvCudaDecodeFusedTokens() tokens, types the two-kernel path decodes, n_ff a multiple of 32).
bool MoeGemvCudaTakesShared(GgmlType gate_up, GgmlType down, int64_t tokens, int64_t n_ff);
int64_t MoeGemvCudaWorkspaceBytes(int64_t tokens, int64_t top_k, int64_t n_embd, int64_t n_ff);
bool MoeGemvCudaSupports(GgmlType gate_up, GgmlType down);
// Whether MoeGemvCuda takes more than kMoeGemvMaxTokens tokens for these types (tokens * top_k
// up to kMoeGemvMaxPairsMany): IQ4_XS experts unless STEPSERVE_GEMV_MMA=0 turns the tensor-core
// GEMV off; other types where the grouped F16 GEMM decodes both (GroupedGemmF16Enabled: Q4_K
// unless STEPSERVE_GROUPED_GEMM_F16 is 0 or 1; Q6_K, e.g. the Q4_K_M mix's expert `down`, unless
// it is 0, 1 or 2).
bool MoeGemvCudaSupportsManyTokens(GgmlType gate_up, GgmlType down);
KernelStatus ValidateMoeGemvCuda(const MoeGemvCudaArgs& args);
KernelStatus MoeGemvCuda(const MoeGemvCudaArgs& args, cudaStream_t stream);

}  // namespace stepserve::kernels

#endif  // STEPSERVE_KERNELS_MATMUL_MOE_GEMV_CUDA_H_
