#!/usr/bin/env bash
# Injected bugs in GemmF16GroupedKernel / ConvertActivationsF16Kernel
# (kernels/matmul/gemm_grouped_f16_cuda.cu) and its decoders (gemm_f16_decoders.cuh), each run
# through mutate.sh (every case, seed 1, both cp.async landing modes); every one must be caught:
# FAIL cases or an EMU FAILURE, rc != 0.
# Usage: bash tests/cuda_emu/grouped_gemm/mutations_f16.sh [NAME...]  (EMU_JOBS parallel, default 2)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kernel=matmul/gemm_grouped_f16_cuda.cu
decoders=matmul/gemm_f16_decoders.cuh
out=$(mktemp -d)
declare -A old new file envs
# add NAME OLD NEW [FILE] (FILE relative to kernels/, default the kernel)
add() { names+=("$1"); old[$1]=$2; new[$1]=$3; file[$1]=${4:-$kernel}; }
# add_wide NAME OLD NEW: a bug of the 128-pair chunks, run under STEPSERVE_GEMM_F16_WIDE=2 (every
# type that has them); the others run with them off (the 64-pair kernels).
add_wide() { add "$@"; envs[$1]=STEPSERVE_GEMM_F16_WIDE=2; }
names=()
# A fragments: rows g and g + 8 swapped in a0 / a1 of the first MMA.
add swap_a0_a1 "D::Halves(sa, sa.words.x, 0x4140u), D::Halves(sb, sb.words.x, 0x4140u)," \
  "D::Halves(sb, sb.words.x, 0x4140u), D::Halves(sa, sa.words.x, 0x4140u),"
# B fragments of the second MMA swapped (k 2t.. and 2t+8.. exchanged against A).
add swap_b_hi "MmaF16(a_hi, x.z, x.w, acc[j]);" "MmaF16(a_hi, x.w, x.z, acc[j]);"
# Activation chunk of the wrong sub-block.
add act_chunk_offset "act + 8 * j * kActStride + 64 * ib" \
  "act + 8 * j * kActStride + 64 * (ib ^ 1)"
# Copy plan: one pass short (a tile's last row never copied where it ends a pass) ...
add plan_rows_short "static_cast<int>((valid - 1 - r0) / kRowsPerPass) + 1" \
  "static_cast<int>((valid - 2 - r0) / kRowsPerPass) + 1"
# ... or one pass long (row `out` copied: past the matrix, into the activation stage).
add plan_rows_long "static_cast<int>((valid - 1 - r0) / kRowsPerPass) + 1" \
  "static_cast<int>((valid - r0) / kRowsPerPass) + 1"
# The chunk's last activation row not copied.
add x_last_col "c.x_on[i] = rx < cols;" "c.x_on[i] = rx < cols - 1;"
# IQ4_XS sub-block scale: wrong half of the pair, wrong bias (ls - 33).
add scale_half "(ib & 2) ? 0x3232u : 0x1010u" "(ib & 2) ? 0x1010u : 0x3232u" "$decoders"
add scale_bias "BytesTimesF16(ls_even, 0x64206420u, d2, &r.s[0], &r.s[1]);" \
  "BytesTimesF16(ls_even, 0x64216421u, d2, &r.s[0], &r.s[1]);" "$decoders"
# Q4_K: high nibble for the even sub-block, the min added instead of subtracted, the scale pair
# of the wrong sub-blocks, the top bits of the upper scales from the wrong byte.
add q4k_nibble "const int shift = 4 * (ib & 1);" "const int shift = 4 * ((ib & 1) ^ 1);" \
  "$decoders"
add q4k_min_sign "r.nm[i] ^= 0x80008000u;" "r.nm[i] ^= 0u;" "$decoders"
add q4k_scale_pair "(ib & 4) ? ((ib & 2) ? r.s[3] : r.s[2]) : ((ib & 2) ? r.s[1] : r.s[0]);" \
  "(ib & 4) ? ((ib & 2) ? r.s[2] : r.s[3]) : ((ib & 2) ? r.s[1] : r.s[0]);" "$decoders"
add q4k_scale_hi "((h.y >> 2) & 0x30303030u)" "((h.z >> 2) & 0x30303030u)" "$decoders"
# Q6_K: the other nibble of ql, the wrong bit pair of qh, the scale of the other 16 elements
# (lane parity t & 1 instead of t >> 1), the bias q - 33, the scales read as unsigned, d from the
# wrong half word at shift 2 mod 4; staging: no realigning funnel shift (shift & 1 is 0), the
# shift taken mod 8 while the copy rounds down to 16, the copy rounded down to 8 only (a
# misaligned cp.async).
add q6k_nibble "const int lo_shift = 4 * (qd >> 1), hi_shift = 2 * qd;" \
  "const int lo_shift = 4 * ((qd >> 1) ^ 1), hi_shift = 2 * qd;" "$decoders"
add q6k_qh_bits "const int lo_shift = 4 * (qd >> 1), hi_shift = 2 * qd;" \
  "const int lo_shift = 4 * (qd >> 1), hi_shift = 2 * (qd ^ 1);" "$decoders"
add q6k_scale_index "const uint32_t sel = (t & 2) ? 0x7531u : 0x6420u;" \
  "const uint32_t sel = (t & 1) ? 0x7531u : 0x6420u;" "$decoders"
add q6k_bias "return MulF16x2(SubF16x2(h, 0x64206420u), s.scale);" \
  "return MulF16x2(SubF16x2(h, 0x64216421u), s.scale);" "$decoders"
add q6k_scale_sign "^ 0x80808080u;  // ib 0..3" ";  // ib 0..3" "$decoders"
add q6k_d_half "__byte_perm(w4 >> r.fs, 0, 0x1010u)" "__byte_perm(w4, 0, 0x1010u)" "$decoders"
add q6k_no_funnel "static_cast<uint32_t>(8 * (shift & 3))" "static_cast<uint32_t>(8 * (shift & 1))" \
  "$decoders"
add q6k_shift_mod8 "reinterpret_cast<uintptr_t>(block) & 15" "reinterpret_cast<uintptr_t>(block) & 7" \
  "$decoders"
add q6k_copy_align8 "reinterpret_cast<uintptr_t>(p) & ~uintptr_t{15}" \
  "reinterpret_cast<uintptr_t>(p) & ~uintptr_t{7}" "$decoders"
# Pipeline: no barrier before a stage is refilled; no wait for this thread's copies.
add no_refill_barrier \
  "__syncthreads();  // every warp is done with the stage before it is refilled" ""
add no_wait "WaitCopiesButOne();  // this thread's copies of block kb have landed" ""
# Converter: plain order instead of pair order.
add convert_order "{a.x, b.x, a.y, b.y, a.z, b.z, a.w, b.w}" \
  "{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}"
# Narrow last chunks (the default): a class edge one column too wide (a chunk of 17 / 33 pairs
# with 2 / 4 column tiles), a chunk of <= 16 pairs with one column tile.
add narrow2_edge "if (kNarrowTails && cols <= 16) {" "if (kNarrowTails && cols <= 17) {"
add narrow4_edge "} else if (kNarrowTails && cols <= 32) {" "} else if (kNarrowTails && cols <= 33) {"
add narrow2_one_tile "ChunkProducts<D, kPairs, 2, kUnroll>(" "ChunkProducts<D, kPairs, 1, kUnroll>("
# Chunks of 128 pairs: the second activation row of a thread one row early; the 64-column class
# taking 65 columns (8 tiles for 65), the 96-column class taking 97; the 12-tile class with 11.
add_wide wide_second_row "const int rx = (tid >> 2) + kActRowsPerPass * i;" \
  "const int rx = (tid >> 2) + (kActRowsPerPass - 1) * i;"
add_wide wide_edge64 "kPairs > 64 && cols <= 64)" "kPairs > 64 && cols <= 65)"
add_wide wide_edge96 "kPairs > 64 && cols <= 96)" "kPairs > 64 && cols <= 97)"
add_wide wide_tiles12 "ChunkProducts<D, kPairs, 12, kUnroll>(" "ChunkProducts<D, kPairs, 11, kUnroll>("
[ $# -gt 0 ] && names=("$@")
jobs=${EMU_JOBS:-2}
for n in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  env ${envs[$n]:-STEPSERVE_GEMM_F16_WIDE=0} EMU_TEST=test_f16 bash "$here/mutate.sh" "f16_$n" \
    "${file[$n]}" "${old[$n]}" "${new[$n]}" \
    >"$out/$n" 2>&1 &
done
wait
missed=0
for n in "${names[@]}"; do
  cat "$out/$n"
  # Caught: some mode exited non-zero (FAIL cases or an EMU FAILURE abort).
  grep -q "rc=[1-9]" "$out/$n" || { echo "  ^ NOT CAUGHT"; missed=$((missed + 1)); }
done
echo "$missed of ${#names[@]} mutations not caught"
