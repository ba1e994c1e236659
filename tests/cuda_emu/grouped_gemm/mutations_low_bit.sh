#!/usr/bin/env bash
# Injected bugs in the 2-3 bit int8-activation pieces (gemv_q8x_pieces_low_bit.cuh), each run
# through mutate.sh against test_gemv_one_row.cc (long and short rows of every type): every line
# should report FAIL cases (or an EMU FAILURE such as a misaligned load). ~10 minutes on 2 cores.
here=$(cd "$(dirname "$0")" && pwd)
f=matmul/gemv_q8x_pieces_low_bit.cuh
m() { EMU_TEST=test_gemv_one_row bash "$here/mutate.sh" "$@"; }
m signs_carry $f 'return (g ^ (ones * 0xFFu)) + ones;' 'return (g ^ (ones * 0xFFu));'
m sign_parity $f 'return k | ((__popc(k) & 1u) << 7);' 'return k;'
m unaligned_third_word $f 'v[kWords] = off ? L::Load(word + kWords) : 0u;' 'v[kWords] = 0u;'
m iq2xxs_phase $f 'static_cast<uint32_t>((2 * b + 2) & 3), q);' 'static_cast<uint32_t>((2 * b) & 3), q);'
m iq2xxs_scale $f '(0.5f + static_cast<float>(q[1] >> 28)) * 0.25f' '(0.5f + static_cast<float>(q[1] >> 28)) * 0.5f'
m iq3xxs_sign_word $f 'LoadUnaligned<L, 1>(blk + 66 + 4 * ib, raw.s);' 'LoadUnaligned<L, 1>(blk + 62 + 4 * ib, raw.s);'
m iq3s_ninth_bit $f '((static_cast<uint32_t>(raw.qh) >> i) & 1u) << 8' '((static_cast<uint32_t>(raw.qh) >> (i ^ 1)) & 1u) << 8'
m iq3s_scale_nibble $f '>> (4 * (ib & 1))) & 15u;' '>> (4 * (ib >> 2))) & 15u;'
m q2k_scale_half $f '0x6420u + 0x1111u * static_cast<uint32_t>((c & 3) >> 1)' '0x6420u'
m q2k_min_sign $f 'return w.d * scaled - w.dmin * mins;' 'return w.d * scaled + w.dmin * mins;'
m q3k_high_bits $f 'const uint32_t high2 = (Byte(hi[0], s & 3) >> (2 * (s >> 2))) & 3u;' \
  'const uint32_t high2 = (Byte(hi[0], s & 3) >> (2 * (s & 3))) & 3u;'
m q3k_hmask_bit $f '(((hm[t] >> (4 * h + k)) & 0x01010101u) << 2)' '(((hm[t] >> (4 * k + h)) & 0x01010101u) << 2)'
m iq2xs_half_scale $f 'w.dl[1] = HalfScale(d, raw.sc, 1);' 'w.dl[1] = HalfScale(d, raw.sc, 0);'
m iq2s_high_index_bits $f '((static_cast<uint32_t>(raw.qh) >> (2 * l)) & 3u) << 8' '((static_cast<uint32_t>(raw.qh) >> l) & 3u) << 8'
m kx_sum_row $f 'x.sum[k] = __dp4a(ones, static_cast<int>(x.q[k].y),' 'x.sum[k] = __dp4a(ones, static_cast<int>(x.q[k].x),'
# The grouped F16 GEMM's decoders of the same types (gemm_f16_decoders_grid.cuh), against
# test_f16.cc (padded and unpadded rows, every block shift).
g=matmul/gemm_f16_decoders_grid.cuh
mf() { EMU_TEST=test_f16 bash "$here/mutate.sh" "$@"; }
mf f16_staged_word_high $g 'return __funnelshift_r(w[0], w[1], 8 * (at & 3));' 'return __funnelshift_r(w[0], w[0], 8 * (at & 3));'
mf f16_iq2xxs_sign_lane $g 'SignsFromIndex((sw >> (7 * t)) & 127u);
    const float scale = r.d * (0.5f + static_cast<float>(static_cast<int>(sw >> 28))) * 0.25f;' 'SignsFromIndex((sw >> (7 * (t ^ 1))) & 127u);
    const float scale = r.d * (0.5f + static_cast<float>(static_cast<int>(sw >> 28))) * 0.25f;'
mf f16_iq3xxs_second_index $g 'g1 = __ldg(tbl.iq3xxs + ((q >> 8) & 0xFFu));' 'g1 = __ldg(tbl.iq3xxs + ((q >> 16) & 0xFFu));'
mf f16_iq3s_qh_bit $g '((qh >> 1) & 1u) << 8' '(qh & 1u) << 8'
mf f16_q2k_scale_byte $g 'r.p[r.shift + 8 * h + 2 * k + (t >> 1)]' 'r.p[r.shift + 8 * h + 2 * k]'
mf f16_last_piece_past_block $g 'if (src >= p - 16 * piece + kBytes) src -= 16;' 'if (src > p - 16 * piece + kBytes) src -= 16;'
mf f16_q3k_high_scale_bits $g '>> (2 * (s >> 2))) & 3u;' '>> (2 * (s & 3))) & 3u;'
# (Also tried: fewer pieces than the largest shift plus a block - a static_assert in Layout stops
# the build.)
