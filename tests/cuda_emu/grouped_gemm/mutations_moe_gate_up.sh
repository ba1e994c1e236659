#!/usr/bin/env bash
# Injected bugs in ExpertGateUpKernel (moe_decode_cuda.cu), each run through mutate.sh against
# test_moe_gate_up.cc: every line should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/moe_decode_cuda.cu
m() { EMU_TEST=test_moe_gate_up bash "$here/mutate.sh" "$@"; }
m quantize_one_arrival_early $f '!= 31) return;' '!= 30) return;'
m counter_not_reset $f 'if (lane == 0) a.counters[k * (n / 32) + block] = 0;' ';'
m shared_once_token_row $f 'StoreAndQuantizeBlock(a, t * per_token + a.routed, o, lane,' \
  'StoreAndQuantizeBlock(a, t * a.routed + a.routed, o, lane,'
m shared_gets_routed_clamp $f 'shared ? ExpertSwiGlu(gate, up, a.shared_limit, a.shared_clamp)' \
  'shared ? ExpertSwiGlu(gate, up, a.limit, a.clamp)'
m up_dotted_with_gate_row $f 'acc_b += P1::Dot(vb, x, c);' 'acc_b += P1::Dot(va, x, c);'
m negative_id_kept $f 'p.matrix_ids[t * a.routed + j]; id >= 0 && id < p.n_matrices)' \
  'p.matrix_ids[t * a.routed + j]; id < p.n_matrices)'
m int8_order_flipped $f 'a.act_d + k * (n / 32), a.act_pair_order,' \
  'a.act_d + k * (n / 32), !a.act_pair_order,'
# ExpertGateUpRingKernel (moe_gate_up_ring.cuh): the cases' ring runs (1, 3 and 32 rows per warp).
r=matmul/moe_gate_up_ring.cuh
m ring_next_row_stale $r 'if (++load_row < n_rows) point_at_row(load_row);' \
  'if (++load_row < n_rows) point_at_row(load_row - 1);'
m ring_row_output_index $r 'const int64_t o = (w + row * warps) % n_ff;' \
  'const int64_t o = (w + row) % n_ff;'
m ring_x_row_not_followed $r 'if (++use_row < n_rows) x_row = token_of_row(use_row);' \
  'if (++use_row < n_rows) x_row = token_of_row(0);'
m ring_zero_rows_decoded $r '((zero_rows >> use_row) & 1u) == 0' 'true'
m ring_value_in_wrong_lane $r 'if (lane == use_row) {' 'if (lane == 0) {'
m ring_shared_gets_routed_clamp $r 'ExpertSwiGlu(gate, up, a.shared_limit, a.shared_clamp)' \
  'ExpertSwiGlu(gate, up, a.limit, a.clamp)'
m ring_quantize_one_arrival_early $r 'arrived == 31);' 'arrived == 30);'
m ring_counter_of_next_block $r 'atomicAdd(a.counters + my_r / 32, 1)' \
  'atomicAdd(a.counters + (my_r + 1) / 32, 1)'
m ring_last_row_dropped $r 'const int n_rows = (total - w + warps - 1) / warps;' \
  'const int n_rows = (total - w) / warps;'
m ring_one_step_short $r 'for (int k = 0; k < D; ++k) load_next(ring_gate[k], ring_up[k]);' \
  'for (int k = 0; k + 1 < D; ++k) load_next(ring_gate[k], ring_up[k]);'
# DotTwoRowsPointers (moe_decode_cuda.cu, built with STEPSERVE_LEAN_DECODE_LOOPS=1; the cases'
# rows have 2-9 blocks, the ring's refills and the activations' advance both in use).
ml() { EMU_CXXFLAGS=-DSTEPSERVE_LEAN_DECODE_LOOPS=1 EMU_TEST=test_moe_gate_up bash "$here/mutate.sh" "$@"; }
ml ptr_gate_up_x_not_advanced $f '    xp += D * kStepX;
    dp += D * kStepD;
  }
  *sa' '    dp += D * kStepD;
  }
  *sa'
ml ptr_gate_up_refill_offset $f 'rb[k] = P::LoadRaw(pb + (ahead ? k + D : k) * kStepBytes, c);' \
  'rb[k] = P::LoadRaw(pb + (ahead ? k + D - 1 : k) * kStepBytes, c);'
ml ptr_gate_up_up_from_gate $f 'pb += D * kStepBytes;' 'pb = pa;'
