// The MoE expert FFN of 1..kMoeGemvFusedMaxTokens tokens (moe_gemv_cuda.h) in two kernels
// (moe_decode_cuda.cu), internal to MoeGemvCuda, which otherwise runs gate GEMV, up GEMV, SwiGLU,
// down GEMV and the weighted combine as five launches (six with the grouping by expert):
//  - ExpertGateUp: one warp per (slot, row o) - a slot is a token's routed expert or its shared
//    expert - dots row o of the slot's gate and up matrices with the token's x (sharing the
//    activation loads), applies the clamped SwiGLU and stores the value; the warp that completes
//    a 32-row block (an arrival counter per block) quantizes it as the down GEMV's int8
//    activations (q8_quantize.cuh, the quantizer's bytes).
//  - ExpertDownCombine: one warp per (output row o, token t) walks the (slot, block) items of all
//    the token's down rows and adds sum_k weights[t][k] * (row o of expert ids[t][k]) . act_{t,k}
//    (+ the shared expert's, weight 1) to y[t][o].
// Why: at batch 1 each of those launches is a few microseconds of fill and drain around ~5-15 us
// of weight streaming (H200 ncu, docs/cuda-engine.md), 45 MoE layers a step. The (token, slot)
// pairs are not grouped by expert, so every pair's matrices are decoded once for that pair: a win
// at 1-2 tokens only (kMoeGemvFusedMaxTokens says what was measured).
#ifndef STEPSERVE_KERNELS_MATMUL_MOE_DECODE_CUDA_H_
#define STEPSERVE_KERNELS_MATMUL_MOE_DECODE_CUDA_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "engine/quant/ggml_type.h"
#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {

#ifdef __CUDACC__
// The experts' clamped SwiGLU, SiLU(g) * u with limit L (kernels/elementwise SwiGluRef): u clamped
// to [-L, L], SiLU(g) to at most L. Every MoeGemvCuda kernel that applies it uses this one.
__device__ __forceinline__ float ExpertSwiGlu(float g, float u, float limit, bool clamp) {
  float act = g / (1.0f + __expf(-g));
  if (clamp) {
    u = fminf(fmaxf(u, -limit), limit);
    act = fminf(act, limit);
  }
  return act * u;
}
#endif

// Types the two kernels decode (the warp-per-row pieces; with STEPSERVE_MOE_DECODE_Q6K=0 Q6_K keeps
// the streamed GEMV).
bool ExpertDecodeFusedSupports(GgmlType type);

// The IQ4_XS gate / up kernel's whole-iteration form (moe_decode_cuda.cu): from
// STEPSERVE_MOE_GATE_UP_WHOLE, then SetMoeGemvCudaGateUpWhole.
std::atomic<bool>& ExpertGateUpWholeSetting();

struct ExpertGateUpParams {
  // The gate matrices (w, w_row_bytes, w_matrix_bytes, n_matrices, matrix_ids = the routed ids,
  // [tokens][routed]), in = n_embd, out = n_ff (a multiple of 32), xq / xd: x's int8 activations
  // (a row per token) in the gate type's order, iq4nl.
  GemvParams p;
  const uint8_t* up;
  int64_t up_row_bytes, up_matrix_bytes;
  float limit;
  bool clamp;
  int routed;  // routed slots per token (top_k)
  int tokens;  // 1..4
  // Optional shared expert (gate and up of the gate type, its own clamp): each token's slot
  // `routed` (its weights are read once per token; the tokens' reads of them mostly hit L2).
  const uint8_t *shared_gate, *shared_up;
  int64_t shared_gate_row_bytes, shared_up_row_bytes;
  float shared_limit;
  bool shared_clamp;
  // slots = tokens * per_token, per_token = routed (+ 1 with the shared expert), token-major:
  float* act;           // [slots][n_ff]: SwiGLU values
  int8_t* act_q;        // [slots][n_ff] int8, then act_d: the down GEMV's activations
  float2* act_d;        // [slots][n_ff / 32]
  bool act_pair_order;  // the down type's order (Q8ScratchPosition)
  int32_t* counters;    // [slots][n_ff / 32], zero on entry; every launch leaves them zero
  // Set by the launcher from WeightsBeforeWait(kEarlyGateUpShared): the shared expert's warps
  // prefetch their gate and up rows into L2 before the PDL wait.
  bool prefetch_shared;
};
// From 3 tokens the shared expert's rows are decoded once for all the tokens (one warp per row),
// below once per token.
cudaError_t LaunchExpertGateUp(GgmlType type, const ExpertGateUpParams& a, cudaStream_t stream);

struct ExpertDownParams {
  // The down matrices (w, w_row_bytes, w_matrix_bytes, n_matrices, matrix_ids [tokens][routed]),
  // in = n_ff, out = n_embd, xq / xd: the slots' activation rows (ExpertGateUpParams::act_q /
  // act_d), iq4nl; y / y_stride: the tokens' output rows, accumulated into.
  GemvParams p;
  const float* weights;  // [tokens][routed]
  int routed;
  int tokens;
  // Optional shared expert (each token's slot `routed`, weight 1): its down matrix, of the down
  // type.
  const uint8_t* shared_down;
  int64_t shared_down_row_bytes;
  // Set by the launcher from WeightsBeforeWait(): the warp's rows into L2 and its first blocks
  // into registers before the PDL wait (the ids were written two launches back, by the router).
  bool weights_before_wait;
};
cudaError_t LaunchExpertDownCombine(GgmlType type, const ExpertDownParams& a, cudaStream_t stream);

}  // namespace stepserve::kernels::gemv_internal

#endif  // STEPSERVE_KERNELS_MATMUL_MOE_DECODE_CUDA_H_
