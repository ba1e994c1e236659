// ExpertGateUpRingKernel: the few-token MoE gate/up kernel (ExpertGateUpKernel's one- and
// per-token forms) with each warp's rows run as one pipeline. Included inside the anonymous
// namespace of moe_decode_cuda.cu, after ExpertGateUpKernel and its helpers.
//
// Why: ExpertGateUpKernel gives each warp one (gate, up) row pair - 2 x 2176 bytes for the
// Step-3.5-Flash shapes, 4 steps of its 8-lane groups - so a warp's life is one fill of its
// two-step ring (a DRAM round trip with nothing else to issue), four steps of decode and dots,
// and the arrival atomic whose returned count it waits for. ncu at batch 1 (H100, session 21
// call 1): 35.1 us at 1.49 TB/s (44% of DRAM), 0.49 instructions issued per scheduler-cycle,
// 14.5 cycles between a warp's instructions, 6.5 of them waiting on L1TEX (global loads). Here
// a warp takes rows r = w, w + W, ... of all the launch's rows (W warps in the grid, a row being
// (act row k, output row o)) and its ring of raw weight words runs across them: the next row's
// first blocks are in flight while the current row's last steps decode, so a warp waits for
// DRAM once per life instead of once per row. The arrivals are deferred to the end of the warp:
// lane j keeps row j's SwiGLU value; at the end each such lane stores it, one fence, one atomic
// per lane, and the warp quantizes the blocks whose count it completed (QuantizeActBlock).
//
// The same sums in the same order as ExpertGateUpKernel (per lane group blocks g, g + groups, ...;
// WarpSum; ExpertSwiGlu), so the act values and their int8 form are its bits.
#ifndef STEPSERVE_KERNELS_MATMUL_MOE_GATE_UP_RING_CUH_
#define STEPSERVE_KERNELS_MATMUL_MOE_GATE_UP_RING_CUH_

constexpr int kRingMaxRowsPerWarp = 32;  // a lane per row of the warp's row table
// CTAs per SM the register cap allows: 6 (80 registers). Under the one-row kernel's 64 (8 CTAs)
// ptxas spilled the ring's raw words inside the loop (IQ4_XS one token: 52 / 36 bytes, STL after
// the ring's loads and LDL before its decode in the SASS); a warp whose ring runs across its rows
// keeps loads in flight all its life, so it needs fewer resident warps than one that waits per row.
constexpr int kRingMinBlocks = 6;

// Grid (ceil(rows / (kWarpsPerBlock x rows per warp)), 1); rows = tokens x per_token x n_ff, row
// r = k * n_ff + o of act row k = t * per_token + j (j == routed: the shared expert). Each warp
// takes at most kRingMaxRowsPerWarp rows (the launcher's grid). kOneTok: t is 0 for every row.
template <class P, int D, bool kOneTok>
__global__ void __launch_bounds__(kThreads, kRingMinBlocks)
    ExpertGateUpRingKernel(const __grid_constant__ ExpertGateUpParams a) {
  using P1 = OneRowPiece<P>;  // the decoded blocks meet one activation row
  const GemvParams& p = a.p;
  constexpr int kGroups = 32 / P::kLanes;
  const int lane = threadIdx.x & 31;
  const int n_ff = static_cast<int>(p.out);
  const int per_token = a.routed + (a.shared_gate != nullptr ? 1 : 0);
  const int total = a.tokens * per_token * n_ff;
  const int warps = static_cast<int>(gridDim.x) * kWarpsPerBlock;
  const int w = static_cast<int>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (w >= total) return;
  const int n_rows = (total - w + warps - 1) / warps;
  // The router that writes the ids and the norm / quantizer that writes x's int8 form (the wait
  // stays before AllowDependentLaunch, as in ExpertGateUpKernel: the down kernel reads the ids
  // before its own wait).
  WaitForPrimaryGrid();
  AllowDependentLaunch();
  // Row j of the warp (r = w + j * warps: act row k = r / n_ff, output row o, token t = k /
  // per_token, slot k - t * per_token); lane j holds its matrix: the routed expert's id, kShared,
  // or kZero for an id out of range (rows of zeros). Only this int stays live per lane (the
  // pointers are rebuilt from it when a cursor reaches the row: fewer registers, no spills).
  constexpr int kShared = -1, kZero = -2;
  int my_id = kZero;
  if (lane < n_rows) {
    const int k = (w + lane * warps) / n_ff, t = kOneTok ? 0 : k / per_token;
    const int j = k - t * per_token;
    if (j == a.routed) {
      my_id = kShared;
    } else if (const int32_t id = p.matrix_ids[t * a.routed + j]; id >= 0 && id < p.n_matrices) {
      my_id = id;
    }
  }
  const uint32_t zero_rows = __ballot_sync(0xFFFFFFFFu, my_id == kZero);
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int nb = static_cast<int>(p.in / P::kElems);
  const int steps = (nb + kGroups - 1) / kGroups;  // per row: lane group g takes blocks g + s G
  const int items = n_rows * steps;
  // The load cursor (row, step) and its row's gate and up rows (null for a row of zeros),
  // advanced once per load, so the ring's refill of item i + D is addressed by the cursor.
  int load_row = 0, load_step = 0;
  const uint8_t* load_gate = nullptr;
  const uint8_t* load_up = nullptr;
  auto point_at_row = [&](int row) {  // every lane, the same row
    const int id = __shfl_sync(0xFFFFFFFFu, my_id, row);
    const int64_t o = (w + row * warps) % n_ff;
    load_gate = load_up = nullptr;
    if (id == kShared) {
      load_gate = a.shared_gate + o * a.shared_gate_row_bytes;
      load_up = a.shared_up + o * a.shared_up_row_bytes;
    } else if (id != kZero) {
      load_gate = p.w + id * p.w_matrix_bytes + o * p.w_row_bytes;
      load_up = a.up + id * a.up_matrix_bytes + o * a.up_row_bytes;
    }
  };
  point_at_row(0);
  typename P::Raw ring_gate[D], ring_up[D];
  auto load_next = [&](typename P::Raw& rg, typename P::Raw& ru) {
    if (load_row < n_rows) {  // the cursor is the same in every lane
      const int b = g + load_step * kGroups;
      if (load_gate != nullptr && b < nb) {
        rg = P::LoadRaw(load_gate + b * P::kBytes, c);
        ru = P::LoadRaw(load_up + b * P::kBytes, c);
      }
      if (++load_step == steps) {
        load_step = 0;
        if (++load_row < n_rows) point_at_row(load_row);
      }
    }
  };
#pragma unroll
  for (int k = 0; k < D; ++k) load_next(ring_gate[k], ring_up[k]);
  // The x row of the use cursor's row: its token.
  const auto token_of_row = [&](int row) {
    return kOneTok ? 0 : (w + row * warps) / n_ff / per_token;
  };
  int use_row = 0, use_step = 0, x_row = token_of_row(0);
  float acc_gate = 0.f, acc_up = 0.f, my_value = 0.f;
  for (int i0 = 0; i0 < items; i0 += D) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      if (i0 + k < items) {  // the same in every lane
        const int b = g + use_step * kGroups;
        const bool live = b < nb && ((zero_rows >> use_row) & 1u) == 0;
        typename P1::W vg, vu;
        if (live) {
          vg = P1::Decode(ring_gate[k], b, c, p);
          vu = P1::Decode(ring_up[k], b, c, p);
        }
        load_next(ring_gate[k], ring_up[k]);
        if (live) {
          const typename P::X x = P::LoadX(p, x_row, b, c);
          acc_gate += P1::Dot(vg, x, c);
          acc_up += P1::Dot(vu, x, c);
        }
        if (++use_step == steps) {  // the row's last step: its SwiGLU value into lane use_row
          const float gate = WarpSum(acc_gate), up = WarpSum(acc_up);
          if (lane == use_row) {
            my_value = my_id == kShared ? ExpertSwiGlu(gate, up, a.shared_limit, a.shared_clamp)
                                        : ExpertSwiGlu(gate, up, a.limit, a.clamp);
          }
          acc_gate = acc_up = 0.f;
          use_step = 0;
          if (++use_row < n_rows) x_row = token_of_row(use_row);
        }
      }
    }
  }
  // The deferred arrivals: each row's value stored and fenced before its count, as
  // StoreAndQuantizeBlock orders them, then the blocks this warp completed quantized.
  const int my_r = w + lane * warps;  // lane j < n_rows: row j
  int arrived = 0;
  if (lane < n_rows) {
    a.act[my_r] = my_value;  // act row k, output row o: k * n_ff + o = r
    __threadfence();
    arrived = atomicAdd(a.counters + my_r / 32, 1);  // k * (n_ff / 32) + o / 32, n_ff % 32 == 0
  }
  uint32_t completed = __ballot_sync(0xFFFFFFFFu, lane < n_rows && arrived == 31);
  if (completed == 0) return;
  __threadfence();
  while (completed != 0) {
    const int j = __ffs(completed) - 1;
    completed &= completed - 1;
    const int r = w + j * warps;
    QuantizeActBlock(a, r / n_ff, (r % n_ff) / 32, lane);
  }
}

#endif  // STEPSERVE_KERNELS_MATMUL_MOE_GATE_UP_RING_CUH_
