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
  # the compact 4-head kernel leaves its last head's accumulator unset
  '0,/for (int i = 0; i < kHeads; ++i) {/s/for (int i = 0; i < kHeads; ++i) {/for (int i = 0; i < kHeads - (kHeads == 4); ++i) {/'
  # the next chunk's offsets from this chunk's page-table entries
  's/? ChunkPage(p, table, c0 + kChunk, hi) : -1;/? ChunkPage(p, table, c0, hi) : -1;/'
  # the next chunk's offsets never written (the CTA rereads this chunk's keys)
  's/ChunkBasesFromPage<KvT>(p, geo, next_page, c0 + kChunk, hi, g, base_s);/;/'
  # the compact 8-head kernel drops its last head's output
  '/if (i >= nh) continue;/s/if (i >= nh) continue;/if (i >= nh - (kHeads == 8)) continue;/'
)
bash "$root/tests/cuda_emu/run_mutations.sh" "$src" "$here/run.sh" "${1:-$root/build}" "${mutations[@]}"
# The combine kernels' header (inlined by transform.py from EMU_COMBINE_SOURCE).
combine_mutations=(
  # the early gate kernel reads the next head's gate
  '/const float gate = active ?/s/e.gate_stride + h\]/e.gate_stride + (h + 1) % p.heads]/'
)
bash "$root/tests/cuda_emu/run_mutations.sh" \
  "$root/kernels/attention/paged_attention_cuda_combine_kernels.cuh" "$here/combine_mutant.sh" \
  "${1:-$root/build}" "${combine_mutations[@]}"
# The tensor-core decode kernel's header (inlined by transform.py from EMU_MMA_SOURCE).
mma_mutations=(
  # V's key slots 2tig + 8, 2tig + 9 read as 2tig + 1, 2tig + 2
  's/8 \* ((s >> 1) \& 1)/8 * (s \& 1)/'
  # the rescale of O's odd head columns taken from the even ones
  's/alpha\[u\], 8 \* tig + 4)/alpha[u], 8 * tig)/'
  # each warp keeps its own dims' S instead of the sum of the four
  's/s_part\[buf\]\[0\]\[nt\]\[lane\]/s_part[buf][warp][nt][lane]/'
  # the output dims of head_dim 192 laid out as 128's
  's/const int d_lane = dim0 + 2 \* kSteps \* gid;/const int d_lane = dim0 + 4 * gid;/'
  # the last key of a partial chunk masked
  's/s\[nt\]\[1\] = key + 1 < n ? sum.y : -INFINITY;/s[nt][1] = key + 2 < n ? sum.y : -INFINITY;/'
  # the second head tile's Q rows left zero
  's/const float4 b = kHeadTiles == 2 \&\& gid + 8 < nh/const float4 b = kHeadTiles == 3 \&\& gid + 8 < nh/'
  # the next chunk's offsets from this chunk's page-table entries
  's/next ? ChunkPage(p, table, c0 + kChunk, hi) : -1;/next ? ChunkPage(p, table, c0, hi) : -1;/'
)
bash "$root/tests/cuda_emu/run_mutations.sh" "$root/kernels/attention/paged_attention_cuda_mma.cuh" \
  "$here/mma_mutant.sh" "${1:-$root/build}" "${mma_mutations[@]}"
