// ExpertDownLeanKernel: the MoE down + combine kernel's per-token form with its addressing out of
// the item loop (STEPSERVE_MOE_DOWN_LEAN). Included inside the anonymous namespace of
// moe_decode_cuda.cu, after ExpertDownCombineKernel and its helpers.
#ifndef STEPSERVE_KERNELS_MATMUL_MOE_DOWN_LEAN_CUH_
#define STEPSERVE_KERNELS_MATMUL_MOE_DOWN_LEAN_CUH_

// ExpertDownCombineKernel's per-token form (grid (n_embd / kWarpsPerBlock, tokens), 1-2 tokens)
// with the addressing taken out of the item loop: lane s of each warp looks up slot s once (its
// expert's row o, or the shared expert's, and its weight) into a shared-memory table, and item i
// of the token (slot i / nb, block i % nb) finds its slot by a multiply-high, its row in the
// table and its activations at x row t * per_token, block i (the token's slot rows are
// consecutive, so its (slot, block) items are one long activation row). Why: ncu of the cursor
// form at batch 1 (H100, session 21 call 1): 25.4 us at 1.03 TB/s, issue-bound at 0.61
// instructions per scheduler-cycle with ~210 warp instructions per item step, of which the dot
// and decode are ~60 (the cursors, the ids and weights read per item, 64-bit row products). In
// SASS (IQ4_XS, depth 3; scripts/sass.py) the item loop is 432 instructions per three items here
// against 583 in the cursor form (-26%), to be measured. The items, their order per lane group
// and the sums are the cursor form's: the same bits.
constexpr int kLeanMaxSlots = 32;  // a lane per slot

template <class P, int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    ExpertDownLeanKernel(const __grid_constant__ ExpertDownParams a) {
  using PD = OneRowPiece<P>;
  const GemvParams& p = a.p;
  constexpr int kGroups = 32 / P::kLanes;
  __shared__ const uint8_t* slot_rows[kWarpsPerBlock][kLeanMaxSlots];
  __shared__ float slot_weights[kWarpsPerBlock][kLeanMaxSlots];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (o >= p.out) return;  // whole warps: the table is per warp
  const bool early = a.weights_before_wait;
  if (!early) {
    WaitForPrimaryGrid();  // the gate/up kernel's int8 activations
    AllowDependentLaunch();
  }
  const int t = static_cast<int>(blockIdx.y);
  const int slots = DownSlotsPerToken(a);
  const uint32_t nb = static_cast<uint32_t>(p.in / P::kElems);
  // The table (null row: an expert id out of range, which contributes nothing).
  if (lane < slots) {
    const uint8_t* row = nullptr;
    float weight = 1.0f;  // the shared expert's
    if (lane == a.routed) {
      row = a.shared_down + o * a.shared_down_row_bytes;
    } else {
      const int32_t id = p.matrix_ids[t * a.routed + lane];
      weight = a.weights[t * a.routed + lane];
      if (id >= 0 && id < p.n_matrices) row = p.w + id * p.w_matrix_bytes + o * p.w_row_bytes;
    }
    slot_rows[warp][lane] = row;
    slot_weights[warp][lane] = weight;
  }
  __syncwarp();
  const uint8_t* const* rows = slot_rows[warp];
  // slot = i / nb for the few hundred items at most: multiply-high by ceil(2^32 / nb) (exact for
  // i < 2^32 / nb), nb == 1 aside (its constant would not fit).
  const uint32_t magic = nb > 1 ? static_cast<uint32_t>(0xFFFFFFFFu / nb + 1u) : 0u;
  const auto slot_of = [&](int i) {
    return nb > 1 ? static_cast<int>(__umulhi(static_cast<uint32_t>(i), magic)) : i;
  };
  const int items = slots * static_cast<int>(nb);
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  if (early) {  // every slot's row into L2: lane l takes 128-byte line l of each row
    const int row_bytes = static_cast<int>(nb) * P::kBytes;
    const int lines = (row_bytes + 127) / 128 + 1;  // + 1: a row need not start on a line
    for (int s = 0; s < slots; ++s) {
      const uint8_t* row = rows[s];
      for (int l = lane; l < lines; l += 32) {
        if (row != nullptr) PrefetchL2(row + min(l * 128, row_bytes - 1));
      }
    }
  }
  typename P::Raw ring[D];
  bool held[D];  // the ring slot holds a block (false: past the items or an id out of range)
  const auto load_item = [&](int i, typename P::Raw& raw, bool& holds) {
    holds = false;
    if (i < items) {
      const int s = slot_of(i);
      if (const uint8_t* row = rows[s]) {
        raw = P::LoadRaw(row + (i - s * static_cast<int>(nb)) * P::kBytes, c);
        holds = true;
      }
    }
  };
#pragma unroll
  for (int k = 0; k < D; ++k) load_item(g + k * kGroups, ring[k], held[k]);
  if (early) {
    WaitForPrimaryGrid();  // the gate/up kernel's int8 activations
    AllowDependentLaunch();
  }
  const int x_row = t * slots;  // the token's first slot row of act_q / act_d
  float acc = 0.f;
  for (int i0 = g; i0 < items; i0 += D * kGroups) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int i = i0 + k * kGroups;
      if (i < items) {
        const int s = slot_of(i);
        const bool valid = held[k];
        const typename PD::W w = PD::Decode(ring[k], i - s * static_cast<int>(nb), c, p);
        load_item(i + D * kGroups, ring[k], held[k]);
        if (valid) acc += slot_weights[warp][s] * PD::Dot(w, P::LoadX(p, x_row, i, c), c);
      }
    }
  }
  const float sum = WarpSum(acc);
  if (lane == 0) p.y[t * p.y_stride + o] += sum;
}

#endif  // STEPSERVE_KERNELS_MATMUL_MOE_DOWN_LEAN_CUH_
