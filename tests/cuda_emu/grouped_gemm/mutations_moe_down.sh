#!/usr/bin/env bash
# Injected bugs in ExpertDownLeanKernel (moe_down_lean.cuh), each run through mutate.sh against
# test_moe_down.cc: every line should report FAIL cases.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/moe_down_lean.cuh
m() { bash "$here/mutate.sh" "$@"; }
m lean_x_row_per_token $f 'const int x_row = t * slots;' 'const int x_row = t * a.routed;'
m lean_block_not_rebased $f \
  'raw = P::LoadRaw(row + (i - s * static_cast<int>(nb)) * P::kBytes, c);' \
  'raw = P::LoadRaw(row + i * P::kBytes, c);'
m lean_magic_off_by_one $f 'static_cast<uint32_t>(0xFFFFFFFFu / nb + 1u)' \
  'static_cast<uint32_t>(0xFFFFFFFFu / nb)'
m lean_shared_weight_routed $f 'float weight = 1.0f;  // the shared expert'"'"'s' \
  'float weight = a.weights[t * a.routed];'
m lean_bad_id_kept $f 'if (id >= 0 && id < p.n_matrices) row = p.w' 'if (id < p.n_matrices) row = p.w'
m lean_ring_not_advanced $f 'load_item(i + D * kGroups, ring[k], held[k]);' \
  'load_item(i, ring[k], held[k]);'
m lean_no_syncwarp $f '  __syncwarp();
  const uint8_t* const* rows' '  const uint8_t* const* rows'
