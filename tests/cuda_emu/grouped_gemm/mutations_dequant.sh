#!/usr/bin/env bash
# Injected bugs in the device dequantization kernels (kernels/matmul/dequant_cuda.cu: the staged
# kernel and the IQ4_XS one), each run through test_dequant by mutate.sh: every one must print
# FAIL cases or crash (session 26: all 6 caught).
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/dequant_cuda.cu
bash "$here/mutate.sh" staged_source_offset "$f" "(e0 / kGeo.elems) * kGeo.bytes;" \
  "(e0 / kGeo.elems) * kGeo.bytes + 2;"
bash "$here/mutate.sh" staged_byte_shift "$f" "staged[i] = from[i];" "staged[i] = from[i + 1];"
bash "$here/mutate.sh" staged_chunk_start "$f" "(c - r * chunks_per_row) * kStagedValues;" \
  "(c - r * chunks_per_row) * (kStagedValues / 2);"
bash "$here/mutate.sh" staged_no_barrier "$f" "    __syncthreads();
    const int group" "    const int group"
bash "$here/mutate.sh" iq4xs_block_stride "$f" "(group / 32) * 136;" "(group / 32) * 128;"
bash "$here/mutate.sh" iq4xs_high_nibbles "$f" "const int shift = 4 * (l >> 1);" \
  "const int shift = 4 * (l & 1);"
