#!/usr/bin/env bash
# Injected bugs in the decode attention kernel that the emulation must catch (each run must fail
# or crash).
# Usage: bash tests/cuda_emu/paged_attention/mutations.sh [BUILD_DIR]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
src="$root/kernels/attention/paged_attention_cuda.cu"
mutations=(
  # the early path's first chunk offsets one key late
  '/if constexpr (kEarly) {/,+1s/ChunkBases<KvT>(p, geo, table, lo, hi, g, base_s);/ChunkBases<KvT>(p, geo, table, lo + 1, hi, g, base_s);/'
  # a split's keys start one past its range
  's/lo = min(hi, first + split \* per);/lo = min(hi, first + split * per + (split > 0));/'
  # the fused combine leaves its counter set
  's/      \*counter = 0;  \/\/ every split has arrived/      \/\/ every split has arrived/'
  # the online softmax does not rescale the accumulator
  's/for (int c = 0; c < kDimsPerThread; ++c) acc\[i\]\[c\] \*= r;/for (int c = 0; c < kDimsPerThread; ++c) acc[i][c] *= 1.0f;/'
  # the fused combine's gate taken from the next head (session 33: the gate in the last CTA)
  's/StoreGated(p, e, q_row, h, v, o, e.gate\[static_cast<int64_t>(q_row) \* e.gate_stride + h\]);/StoreGated(p, e, q_row, h, v, o, e.gate[static_cast<int64_t>(q_row) * e.gate_stride + (h + 1) % p.heads]);/'
  # the fused combine's gated items one head short
  's/for (int item = threadIdx.x; item < nh \* per_head; item += kThreads) {/for (int item = threadIdx.x; item < (nh - 1) * per_head; item += kThreads) {/'
  # the early gate kernel reads the next head's gate
  '/const float gate = active ?/s/e.gate_stride + h\]/e.gate_stride + (h + 1) % p.heads]/'
)
bash "$root/tests/cuda_emu/run_mutations.sh" "$src" "$here/run.sh" "${1:-$root/build}" "${mutations[@]}"
