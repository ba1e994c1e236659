// The few-token MoE expert kernels (moe_decode_cuda.h): gate + up + SwiGLU + the down GEMV's
// quantization in one launch, down + weighted combine in another. The per-type block decoders
// are the warp-per-row GEMV's (gemv_q8x_pieces.cuh), so a gate or up dot product is the indexed
// GEMV's, lane by lane and block by block, and the SwiGLU values and their int8 form are the
// bytes the unfused kernels write; only the down combine sums in another order (per lane over
// (expert, block) items, then across the warp, instead of per expert and then over experts).
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/common/arrival.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/matmul/gemv_block_util.cuh"
#include "kernels/matmul/gemv_cuda_internal.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/matmul/moe_decode_cuda.h"
#include "kernels/matmul/q8_quantize.cuh"

namespace stepserve::kernels::gemv_internal {
namespace {

#include "kernels/matmul/gemv_q8x_pieces.cuh"
#include "kernels/matmul/gemv_q8x_pieces_low_bit.cuh"

// 8 CTAs of 4 warps per SM (at most 64 registers), as the one-row GEMV: a launch of a few
// thousand warps is then about one wave.
constexpr int kMinBlocks = 8;

// The K-quants Q4_K, Q5_K and Q3_K spill under that cap (ptxas, one-token forms: gate/up Q4_K 56
// / 52 bytes, Q5_K 32 / 28, Q3_K 64 / 40; down Q4_K 48 / 50, Q5_K 20 / 16). A floor of 6 CTAs per
// SM for them (80 registers, no spills) measured no faster on the H200 (session 20 call 3, Q4_K_M
// mix, ms per step at 1 / 2 streams, two alternating pairs: 5.692 / 7.875 and 5.633 / 7.810 at 8,
// 5.691 / 7.894 and 5.697 / 7.864 at 6), so all pieces keep 8.

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

#include "kernels/matmul/moe_two_rows.cuh"

// The warp that brought 32-row block `block` of act row k to its 32nd arrival (and fenced after
// seeing the count): lanes 0-7 read the block through L2 (ld.cg; other warps wrote it), quantize
// it as the down GEMV's int8 activations, and lane 0 resets the count (every launch leaves the
// counters zero; the kernel boundary orders the reset before the next launch).
__device__ __forceinline__ void QuantizeActBlock(const ExpertGateUpParams& a, int64_t k,
                                                 int64_t block, int lane) {
  const int64_t n = a.p.out;
  if (lane < 8) {
    const int64_t col = 32 * block + 4 * lane;
    const float4 x = __ldcg(reinterpret_cast<const float4*>(a.act + k * n + col));
    const unsigned mask = 0xFFu;  // lanes 0..7 (threadIdx.x & 24 == 0 in every warp)
    const q8_quantize::Q8Four q = q8_quantize::QuantizeQ8Four(x, mask);
    q8_quantize::StoreQ8Four(q, col, a.act_q + k * n, a.act_d + k * (n / 32), a.act_pair_order,
                             mask);
  }
  if (lane == 0) a.counters[k * (n / 32) + block] = 0;
}

// Lane 0 of the warp stores SwiGLU value `v` at row o of act row `k`; the warp that brings the
// 32-row block's arrival count to 32 then quantizes that block (QuantizeActBlock). Ordering: the
// arrival releases the value store, and the last warp's lanes acquire after seeing the count
// (kernels/common/arrival.cuh), so they see all 32 values.
__device__ __forceinline__ void StoreAndQuantizeBlock(const ExpertGateUpParams& a, int64_t k,
                                                      int64_t o, int lane, float v) {
  const int64_t n = a.p.out;
  int arrived = 0;
  if (lane == 0) {
    a.act[k * n + o] = v;
    arrived = ArriveRelease(a.counters + k * (n / 32) + o / 32);
  }
  if (__shfl_sync(0xFFFFFFFFu, arrived, 0) != 31) return;
  AcquireAfterArrivals();
  QuantizeActBlock(a, k, o / 32, lane);
}

// StoreAndQuantizeBlock with one arrival per CTA instead of one per warp
// (STEPSERVE_MOE_CTA_ARRIVAL, the per-token modes): the CTA's kWarpsPerBlock warps hold consecutive
// rows of one 32-row block (the launcher's exact grid, one row per warp, so every warp reaches both
// barriers once). Each warp's lane 0 stores its value; after the barrier thread 0 adds
// kWarpsPerBlock to the block's count with release semantics, which cover the other warps' stores
// (cumulative through the barrier); in the CTA that completes the block, warp 0 quantizes it. Why:
// ncu's warp samples of the one-token kernel (H100, results-v21.txt) had ~20% of them on each
// warp's fence and the shuffle waiting for its atomic's result; here a CTA pays two barriers and
// one atomic.
__device__ __forceinline__ void StoreAndQuantizeBlockCta(const ExpertGateUpParams& a, int64_t k,
                                                         int64_t o, int lane, float v) {
  __shared__ int completes_block;
  const int64_t n = a.p.out;
  if (lane == 0) a.act[k * n + o] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    completes_block =
        ArriveRelease(a.counters + k * (n / 32) + o / 32, kWarpsPerBlock) == 32 - kWarpsPerBlock;
  }
  __syncthreads();
  if (completes_block == 0 || threadIdx.x >= 32) return;
  AcquireAfterArrivals();
  QuantizeActBlock(a, k, o / 32, lane);
}

// Grid (n_ff / kWarpsPerBlock, slots): warp (k, o) computes SwiGLU(gate_o . x_t, up_o . x_t) of
// grid row k's expert - ids[t * routed + j] (0 for an id outside [0, n_matrices), as the indexed
// GEMV's zero rows give) or the shared expert - and stores it in act row t * per_token + j
// (StoreAndQuantizeBlock). Grid rows by kMode: kOneToken and kPerToken one per act row
// (k = t * per_token + j, the shared expert at j == routed, one warp per token); kSharedOnce the
// tokens' routed slots (k = t * routed + j), then one row whose warps decode the shared expert's
// rows once for all the tokens (kMaxSharedTokens at most). kOneToken is kPerToken with t = 0 known
// at compile time (the activation row addressing stays out of the loop's registers: 20 bytes of
// spill for IQ4_XS against 88 with a run-time row).
constexpr int kMaxSharedTokens = 4;
enum GateUpMode : int { kOneToken, kPerToken, kSharedOnce };

template <class P, int D, int kMode, bool kCtaArrival = false, bool kWhole = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    ExpertGateUpKernel(const __grid_constant__ ExpertGateUpParams a) {
  static_assert(!(kCtaArrival && kMode == kSharedOnce), "the per-token modes' exact grid");
  static_assert(32 % kWarpsPerBlock == 0, "a CTA's rows in one 32-row block");
  const GemvParams& p = a.p;
  const int lane = threadIdx.x & 31;
  // Rows o_first, o_first + the grid's warps, ...: with the launch's exact grid one row per warp.
  // The loop form stays because ptxas allocates it with less spill (IQ4_XS one-token: 12 / 12
  // bytes, without the loop 60 / 68; 2-4 tokens 0 against 44-100) - the measured kernel (session
  // 13: batch 2 7.40 -> 7.19 ms). Capping the grid so that warps loop measured slower (batch 1
  // 5.24 -> 5.37 ms at 1056 or 2112 CTAs; bench/gpu/results-h200-v12.txt).
  const int64_t o_first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int64_t o_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int k = static_cast<int>(blockIdx.y);
  const int per_token = a.routed + (a.shared_gate != nullptr ? 1 : 0);
  if (o_first >= p.out) return;  // never with n_ff % 32 == 0 (the launch's grid is exact)
  // The shared expert's rows do not depend on the router: into L2 while it may still run (up to
  // 4 KiB of each of the two rows, a line per lane; the first of the warp's rows).
  if (a.prefetch_shared && a.shared_gate != nullptr &&
      (kMode == kSharedOnce ? k == a.tokens * a.routed : k % per_token == a.routed)) {
    const int64_t line = 128 * static_cast<int64_t>(lane);
    if (line < a.shared_gate_row_bytes && line < 4096) {
      PrefetchL2(a.shared_gate + o_first * a.shared_gate_row_bytes + line);
    }
    if (line < a.shared_up_row_bytes && line < 4096) {
      PrefetchL2(a.shared_up + o_first * a.shared_up_row_bytes + line);
    }
  }
  // The router that writes the ids and the norm / quantizer that writes x's int8 form. The wait
  // stays before AllowDependentLaunch: the down kernel reads the router's ids before its own wait
  // (WeightsBeforeWait), which is sound only while the router completes before it can launch.
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  if constexpr (kMode == kSharedOnce) {
    if (k == a.tokens * a.routed) {
      for (int64_t o = o_first; o < p.out; o += o_stride) {
        float gate[kMaxSharedTokens], up[kMaxSharedTokens];
        DotTwoRowsAllTokens<P, kMaxSharedTokens>(p, a.shared_gate + o * a.shared_gate_row_bytes,
                                                 a.shared_up + o * a.shared_up_row_bytes, a.tokens,
                                                 lane, gate, up);
#pragma unroll
        for (int t = 0; t < kMaxSharedTokens; ++t) {
          if (t < a.tokens) {
            StoreAndQuantizeBlock(a, t * per_token + a.routed, o, lane,
                                  ExpertSwiGlu(gate[t], up[t], a.shared_limit, a.shared_clamp));
          }
        }
      }
      return;
    }
  }
  int t = 0, j = k;
  if constexpr (kMode != kOneToken) {
    const int slots_per_row = kMode == kSharedOnce ? a.routed : per_token;
    t = k / slots_per_row;
    j = k - t * slots_per_row;
  }
  const bool shared = j == a.routed;
  // The row pair's matrices (null: an expert id out of range, whose rows are zeros).
  const uint8_t* gate_w = nullptr;
  const uint8_t* up_w = nullptr;
  int64_t gate_row_bytes = 0, up_row_bytes = 0;
  if (shared) {
    gate_w = a.shared_gate, up_w = a.shared_up;
    gate_row_bytes = a.shared_gate_row_bytes, up_row_bytes = a.shared_up_row_bytes;
  } else if (const int32_t id = p.matrix_ids[t * a.routed + j]; id >= 0 && id < p.n_matrices) {
    gate_w = p.w + id * p.w_matrix_bytes, up_w = a.up + id * a.up_matrix_bytes;
    gate_row_bytes = p.w_row_bytes, up_row_bytes = a.up_row_bytes;
  }
  for (int64_t o = o_first; o < p.out; o += o_stride) {
    float gate = 0.f, up = 0.f;
    if (gate_w != nullptr) {
      DotTwoRowsPointers<P, D, kWhole>(p, gate_w + o * gate_row_bytes, up_w + o * up_row_bytes, t,
                                       lane, &gate, &up);
    }
    const float v = shared ? ExpertSwiGlu(gate, up, a.shared_limit, a.shared_clamp)
                           : ExpertSwiGlu(gate, up, a.limit, a.clamp);
    if constexpr (kCtaArrival) {
      StoreAndQuantizeBlockCta(a, t * per_token + j, o, lane, v);
    } else {
      StoreAndQuantizeBlock(a, t * per_token + j, o, lane, v);
    }
  }
}

// A token's down slots: its routed experts, then the shared expert's when there is one.
__host__ __device__ __forceinline__ int DownSlotsPerToken(const ExpertDownParams& a) {
  return a.routed + (a.shared_down != nullptr ? 1 : 0);
}

// Grid (n_embd / kWarpsPerBlock, tokens): warp (o, t) adds sum_k weights[t][k] * (row o of expert
// ids[t][k]) . act_{t,k} (+ the shared expert's row o . its act row of token t, weight 1) to
// y[t][o]. The row's (slot, block) items are spread over the lane groups (item i: slot i / nb,
// block i % nb), D items per group in flight; experts with an id out of range contribute nothing
// (the unfused down GEMV writes zero rows for them). kSharedOnce: grid y 1, warp o takes every
// token's routed items (slot s: token s / routed) and decodes the shared expert's row o once for
// all of them.
template <class P, int D, bool kSharedOnce>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    ExpertDownCombineKernel(const __grid_constant__ ExpertDownParams a) {
  const GemvParams& p = a.p;
  constexpr int kGroups = 32 / P::kLanes;
  constexpr int kAcc = kSharedOnce ? kMaxSharedTokens : 1;  // tokens per warp
  // Blocks meet one activation row unless the shared expert's row serves every token.
  using PD = std::conditional_t<kSharedOnce, P, OneRowPiece<P>>;
  const int lane = threadIdx.x & 31;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o >= p.out) return;
  const bool early = a.weights_before_wait;
  if (!early) {
    WaitForPrimaryGrid();  // the gate/up kernel's int8 activations
    AllowDependentLaunch();
  }
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  const int per_token = DownSlotsPerToken(a);
  const int t0 = kSharedOnce ? 0 : static_cast<int>(blockIdx.y);  // the warp's first token
  const int n_tok = kSharedOnce ? a.tokens : 1;
  const int shared_slot = n_tok * a.routed;  // the warp's slots: routed ones, then the shared one
  const int items = (shared_slot + (a.shared_down != nullptr ? 1 : 0)) * nb;
  const int32_t* ids = p.matrix_ids + t0 * a.routed;
  const float* weights = a.weights + t0 * a.routed;
  // Lane group g takes items g, g + kGroups, ... (item i: slot i / nb, block i % nb). Cursors
  // advance by kGroups items as (step_slots, step_b) with one carry, so the loop divides by the
  // run-time nb once per warp instead of twice per item (~20 instructions each).
  struct Cursor {
    int i, slot, b;
  };
  const int step_slots = kGroups / nb, step_b = kGroups - step_slots * nb;
  auto advance = [&](Cursor& cur) {
    cur.i += kGroups;
    cur.slot += step_slots;
    cur.b += step_b;
    if (cur.b >= nb) {
      cur.b -= nb;
      ++cur.slot;
    }
  };
  // The cursor's row block, or null for an expert id out of range.
  auto row_block = [&](const Cursor& cur) -> const uint8_t* {
    if (cur.slot == shared_slot) {
      return a.shared_down + o * a.shared_down_row_bytes + cur.b * P::kBytes;
    }
    const int32_t id = ids[cur.slot];
    if (id < 0 || id >= p.n_matrices) return nullptr;
    return p.w + id * p.w_matrix_bytes + o * p.w_row_bytes + cur.b * P::kBytes;
  };
  const Cursor first{g, g / nb, g - (g / nb) * nb};
  Cursor load = first, use = first;
  if (early) {  // every slot's row into L2: one 128-byte line per lane and step
    const int row_bytes = nb * P::kBytes;
    const int lines = (row_bytes + 127) / 128 + 1;  // + 1: a row need not start on a line
    const int slots = shared_slot + (a.shared_down != nullptr ? 1 : 0);
    for (int i = lane; i < slots * lines; i += 32) {
      const int slot = i / lines;
      const int off = min((i - slot * lines) * 128, row_bytes - 1);
      if (const uint8_t* row = row_block(Cursor{0, slot, 0})) PrefetchL2(row + off);
    }
  }
  typename P::Raw ring[D];
  bool loaded[D];  // the ring slot holds a block (false: an expert id out of range)
  // The next item's block into a ring slot, then the load cursor one item on.
  auto load_next = [&](typename P::Raw& raw, bool& holds) {
    holds = false;
    if (load.i < items) {
      if (const uint8_t* blk = row_block(load)) {
        raw = P::LoadRaw(blk, c);
        holds = true;
      }
    }
    advance(load);
  };
#pragma unroll
  for (int k = 0; k < D; ++k) load_next(ring[k], loaded[k]);
  if (early) {
    WaitForPrimaryGrid();  // the gate/up kernel's int8 activations
    AllowDependentLaunch();
  }
  float acc[kAcc];
#pragma unroll
  for (int r = 0; r < kAcc; ++r) acc[r] = 0.f;
  for (int i0 = g; i0 < items; i0 += D * kGroups) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      if (use.i < items) {  // use.i == i0 + k * kGroups
        const bool valid = loaded[k];
        const int slot = use.slot, b = use.b;
        const typename PD::W w = PD::Decode(ring[k], b, c, p);
        load_next(ring[k], loaded[k]);
        if constexpr (kSharedOnce) {
          if (slot == shared_slot) {  // weight 1, every token's shared act row
#pragma unroll
            for (int r = 0; r < kAcc; ++r) {
              if (r < n_tok) acc[r] += P::Dot(w, P::LoadX(p, r * per_token + a.routed, b, c), c);
            }
          } else if (valid) {
            const int tok = slot / a.routed, j = slot - tok * a.routed;
            const float v = weights[slot] * P::Dot(w, P::LoadX(p, tok * per_token + j, b, c), c);
#pragma unroll
            for (int r = 0; r < kAcc; ++r) {
              if (r == tok) acc[r] += v;
            }
          }
        } else if (valid) {
          const float weight = slot < a.routed ? weights[slot] : 1.0f;  // shared: weight 1
          acc[0] += weight * PD::Dot(w, P::LoadX(p, t0 * per_token + slot, b, c), c);
        }
        advance(use);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kAcc; ++r) {
    if (r < n_tok) {
      const float sum = WarpSum(acc[r]);
      if (lane == 0) p.y[(t0 + r) * p.y_stride + o] += sum;
    }
  }
}

#include "kernels/matmul/moe_down_lean.cuh"

// The shared expert decoded once for all tokens from this many tokens (below: once per token, the
// path measured at 1-2 tokens in session 11).
constexpr int kSharedOnceMinTokens = 3;

// The one predicate both launchers use: with a shared expert, from kSharedOnceMinTokens tokens.
bool SharedOnce(const void* shared_matrix, int tokens) {
  return shared_matrix != nullptr && tokens >= kSharedOnceMinTokens;
}
bool SharedOnce(const ExpertGateUpParams& a) { return SharedOnce(a.shared_gate, a.tokens); }

// Grid rows of ExpertGateUpKernel: one per act row, or with the shared expert decoded once the
// routed slots and one shared row.
int64_t GateUpGridRows(const ExpertGateUpParams& a) {
  const bool shared = a.shared_gate != nullptr;
  return SharedOnce(a) ? int64_t{a.tokens} * a.routed + 1
                       : int64_t{a.tokens} * (a.routed + (shared ? 1 : 0));
}

// One arrival per CTA in the gate/up kernel's per-token modes (StoreAndQuantizeBlockCta); one per
// warp with STEPSERVE_MOE_CTA_ARRIVAL=0 (read once). On by measurement, H100, 24 layers, five
// alternating rounds over sessions 24-25 (results-v21.txt call 7, results-v22.txt call 1): IQ4_XS
// 1 / 2 streams per warp 2.607 2.611 2.595 2.583 2.585 / 3.568 3.582 3.547 3.561 3.549 ms, per CTA
// 2.609 2.596 2.569 2.581 2.573 / 3.581 3.518 3.525 3.551 3.536 (-0.4% / -0.5% in the means, 4 of
// 5 rounds faster); Q4_K_M 1 stream 2.998 -> 2.947. The GPU tests pass with it.
bool CtaArrival() {
  static const bool on = EnvSwitchOn("STEPSERVE_MOE_CTA_ARRIVAL");
  return on;
}

bool GateUpWhole() { return ExpertGateUpWholeSetting().load(std::memory_order_relaxed); }

template <class P>
cudaError_t LaunchGateUpTyped(ExpertGateUpParams a, cudaStream_t stream) {
  a.prefetch_shared = WeightsBeforeWait(kEarlyGateUpShared);
  // Two rows per warp: half the one-row ring depth keeps the raw words in flight (and the
  // registers) at the one-row kernel's. Other IQ4_XS depths / register caps without spill (gate/up
  // 3 at 6 CTAs per SM, 4 at 4, 2 at 6 with down 4 at 6, 6 at 4, 2 at 8) measured no faster on the
  // H200 (45-layer batch 1: 5.42 / 5.47 / 5.30 ms vs 5.31-5.33; bench/gpu/results-h200-v12.txt).
  constexpr int D = P::kDepth1 / 2 > 0 ? P::kDepth1 / 2 : 1;
  const dim3 grid(static_cast<unsigned>(a.p.out / kWarpsPerBlock),
                  static_cast<unsigned>(GateUpGridRows(a)));
  if (SharedOnce(a)) {
    return LaunchWithPdl(ExpertGateUpKernel<P, D, kSharedOnce>, grid, dim3(kThreads), 0, stream, a);
  }
  // The exact grid (n_ff % 32 == 0: MoeGemvCudaTakesShared / the decode limit's checks) gives each
  // warp one row, as the CTA arrival needs.
  if (CtaArrival() && grid.x * int64_t{kWarpsPerBlock} == a.p.out) {
    if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
      if (GateUpWhole()) {
        if (a.tokens == 1) {
          return LaunchWithPdl(ExpertGateUpKernel<P, D, kOneToken, true, true>, grid,
                               dim3(kThreads), 0, stream, a);
        }
        return LaunchWithPdl(ExpertGateUpKernel<P, D, kPerToken, true, true>, grid, dim3(kThreads),
                             0, stream, a);
      }
    }
    if (a.tokens == 1) {
      return LaunchWithPdl(ExpertGateUpKernel<P, D, kOneToken, true>, grid, dim3(kThreads), 0,
                           stream, a);
    }
    return LaunchWithPdl(ExpertGateUpKernel<P, D, kPerToken, true>, grid, dim3(kThreads), 0, stream,
                         a);
  }
  if (a.tokens == 1) {
    return LaunchWithPdl(ExpertGateUpKernel<P, D, kOneToken>, grid, dim3(kThreads), 0, stream, a);
  }
  return LaunchWithPdl(ExpertGateUpKernel<P, D, kPerToken>, grid, dim3(kThreads), 0, stream, a);
}

// Items in flight per lane group in the down kernel: one less than the one-row GEMV's depth for
// the 4-step types, which spill at 64 registers with 4 (IQ4_XS: 56 bytes).
template <class P>
inline constexpr int kDownDepth = P::kDepth1 > 3 ? 3 : P::kDepth1;

// ExpertDownLeanKernel for the per-token form of IQ4_XS unless STEPSERVE_MOE_DOWN_LEAN=0 (read
// once). Measured on the H100 (24 layers, ms per step at 1 / 2 streams, two alternating rounds;
// bench/gpu/results-v21.txt): IQ4_XS 2.704 / 3.721 and 2.696 / 3.724 with the cursor form, 2.656
// / 3.641 and 2.643 / 3.644 with this one (ncu: the down kernel 25.4 -> 23.7 us); but the Q4_K_M
// mix (Q4_K and Q6_K experts) 2.975 / 3.972 and 2.980 / 3.973 with the cursor form, 3.144 / 4.257
// and 3.207 / 4.237 with this one - so the other types keep the cursor form (not measured for the
// 2-3 bit types).
bool DownLean() {
  static const bool on = EnvSwitchOn("STEPSERVE_MOE_DOWN_LEAN");
  return on;
}

template <class P>
cudaError_t LaunchDownTyped(ExpertDownParams a, cudaStream_t stream) {
  a.weights_before_wait = WeightsBeforeWait(a.tokens == 1 ? kEarlyDownOneToken : kEarlyDownTokens);
  const unsigned x = static_cast<unsigned>((a.p.out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (SharedOnce(a.shared_down, a.tokens)) {
    return LaunchWithPdl(ExpertDownCombineKernel<P, kDownDepth<P>, true>, dim3(x), dim3(kThreads),
                         0, stream, a);
  }
  const dim3 grid(x, static_cast<unsigned>(a.tokens));
  if constexpr (std::is_same_v<P, PieceIQ4_XS>) {
    if (DownLean() && DownSlotsPerToken(a) <= kLeanMaxSlots) {
      return LaunchWithPdl(ExpertDownLeanKernel<P, kDownDepth<P>>, grid, dim3(kThreads), 0, stream,
                           a);
    }
  }
  return LaunchWithPdl(ExpertDownCombineKernel<P, kDownDepth<P>, false>, grid, dim3(kThreads), 0,
                       stream, a);
}

// Q6_K in the two kernels unless STEPSERVE_MOE_DECODE_Q6K=0 (read once). For one dense 41 MB matrix
// the streamed GEMV beats the warp-per-row Q6_K decode (24-27 vs 30-34 us), but a layer whose down
// matrices are Q6_K (the Q4_K_M files' more-bits layers) would then also run a combine launch and
// its shared expert as three more GEMVs. Measured on the H200 (45 layers Q4_K_M mix, ms per step
// at 1 / 2 streams, session 18 call 4, two alternating pairs): 5.869 / 8.690 and 5.888 / 8.716
// without, 5.639 / 7.801 and 5.643 / 7.816 with.
bool FusedQ6K() {
  static const bool on = EnvSwitchOn("STEPSERVE_MOE_DECODE_Q6K");
  return on;
}

}  // namespace

// The IQ4_XS gate / up kernel (per-token forms with the CTA arrival, the defaults at 1-2 tokens)
// with DotTwoRowsPointers' whole iterations free of per-step guards (bit-identical); on by default
// since session 45, STEPSERVE_MOE_GATE_UP_WHOLE=0 turns it off. Measured (H100, 24 layers, one
// round, bench/gpu/results-v39.txt): 2 streams 2.958 (default then) / 2.977 (the one-row GEMV's
// whole iterations alone) -> 2.906 ms with both; batch 1 unchanged (2.202 / 2.209 -> 2.210).
std::atomic<bool>& ExpertGateUpWholeSetting() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("STEPSERVE_MOE_GATE_UP_WHOLE");
    return v == nullptr || v[0] != '0';
  }()};
  return on;
}

bool ExpertDecodeFusedSupports(GgmlType type) {
  // The 2-3 bit types while they are on at all (GemvCudaSupports, STEPSERVE_GEMV_LOW_BIT).
  if (GemvCudaLowBitType(type)) return GemvCudaSupports(type);
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ||
         type == GgmlType::kIQ4_XS || (type == GgmlType::kQ6_K && FusedQ6K());
}

cudaError_t LaunchExpertGateUp(GgmlType type, const ExpertGateUpParams& a, cudaStream_t stream) {
  if (a.p.out % 32 != 0 || a.routed < 1 || a.tokens < 1 || a.tokens > kMaxSharedTokens ||
      (a.shared_gate == nullptr) != (a.shared_up == nullptr) || GateUpGridRows(a) > 65535 ||
      a.counters == nullptr) {
    return cudaErrorInvalidValue;
  }
  return WithQ8xPieceAll(type,
                         [&](auto piece) { return LaunchGateUpTyped<decltype(piece)>(a, stream); });
}

cudaError_t LaunchExpertDownCombine(GgmlType type, const ExpertDownParams& a, cudaStream_t stream) {
  if (a.routed < 1 || a.tokens < 1 || a.tokens > kMaxSharedTokens) return cudaErrorInvalidValue;
  return WithQ8xPieceAll(type,
                         [&](auto piece) { return LaunchDownTyped<decltype(piece)>(a, stream); });
}

}  // namespace stepserve::kernels::gemv_internal
