#!/usr/bin/env bash
# Injected bugs in ExpertGateUpKernel (moe_decode_cuda.cu; its two-row dots in moe_two_rows.cuh),
# each run through mutate.sh against test_moe_gate_up.cc: every line should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/moe_decode_cuda.cu
f2=matmul/moe_two_rows.cuh
# The guarded dots' bugs with the whole iterations off (STEPSERVE_MOE_GATE_UP_WHOLE=0, on by default
# since session 45).
m() { STEPSERVE_MOE_GATE_UP_WHOLE=0 EMU_TEST=test_moe_gate_up bash "$here/mutate.sh" "$@"; }
m quantize_one_arrival_early $f '!= 31) return;' '!= 30) return;'
m counter_not_reset $f 'if (lane == 0) a.counters[k * (n / 32) + block] = 0;' ';'
m shared_once_token_row $f 'StoreAndQuantizeBlock(a, t * per_token + a.routed, o, lane,' \
  'StoreAndQuantizeBlock(a, t * a.routed + a.routed, o, lane,'
m shared_gets_routed_clamp $f 'shared ? ExpertSwiGlu(gate, up, a.shared_limit, a.shared_clamp)' \
  'shared ? ExpertSwiGlu(gate, up, a.limit, a.clamp)'
m up_dotted_with_gate_row $f2 'acc_b += P1::Dot(vb, x, c);' 'acc_b += P1::Dot(va, x, c);'
m negative_id_kept $f 'p.matrix_ids[t * a.routed + j]; id >= 0 && id < p.n_matrices)' \
  'p.matrix_ids[t * a.routed + j]; id < p.n_matrices)'
m int8_order_flipped $f 'a.act_d + k * (n / 32), a.act_pair_order,' \
  'a.act_d + k * (n / 32), !a.act_pair_order,'
# DotTwoRowsPointers (the cases' rows have 2-24 blocks, the ring's refills and the activations'
# advance both in use).
m ptr_gate_up_x_not_advanced $f2 '    xp += D * kStepX;
    dp += D * kStepD;
  }
  *sa' '    dp += D * kStepD;
  }
  *sa'
m ptr_gate_up_refill_offset $f2 'rb[k] = P::LoadRaw(pb + (ahead ? k + D : k) * kStepBytes, c);' \
  'rb[k] = P::LoadRaw(pb + (ahead ? k + D - 1 : k) * kStepBytes, c);'
m ptr_gate_up_up_from_gate $f2 'pb += D * kStepBytes;' 'pb = pa;'
# StoreAndQuantizeBlockCta (STEPSERVE_MOE_CTA_ARRIVAL=1): the block's last arrival misjudged.
mc() {
  STEPSERVE_MOE_CTA_ARRIVAL=1 STEPSERVE_MOE_GATE_UP_WHOLE=0 EMU_TEST=test_moe_gate_up \
    bash "$here/mutate.sh" "$@"
}
mc cta_quantized_one_cta_early $f '32 - kWarpsPerBlock;' '32 - 2 * kWarpsPerBlock;'
mc cta_arrival_counts_one $f 'o / 32, kWarpsPerBlock) ==' 'o / 32, 1) =='
# Session 44: DotTwoRowsPointers' whole iterations (STEPSERVE_MOE_GATE_UP_WHOLE=1): an iteration
# with refills that does not refill, the last-iteration path taken with a next iteration left.
mw() {
  STEPSERVE_MOE_CTA_ARRIVAL=1 STEPSERVE_MOE_GATE_UP_WHOLE=1 EMU_TEST=test_moe_gate_up \
    bash "$here/mutate.sh" "$@"
}
mw whole_gate_up_no_refill $f2 'TwoRowsSteps<P, D, false, true>(p, ra' \
  'TwoRowsSteps<P, D, false, false>(p, ra'
mw whole_gate_up_last_too_early $f2 'b0 + D * kGroups >= nb) {' 'b0 + D * kGroups >= nb - kGroups) {'
