#!/usr/bin/env bash
# Injected bugs in the 2-3 bit int8-activation pieces (gemv_q8x_pieces_low_bit.cuh), each run
# through mutate.sh against test_gemv_one_row.cc (long and short rows of every type): every line
# should report FAIL cases (or an EMU FAILURE such as a misaligned load).
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
m kx_sum_row $f 'x.sum[k] = __dp4a(ones, static_cast<int>(x.q[k].y),' 'x.sum[k] = __dp4a(ones, static_cast<int>(x.q[k].x),'
