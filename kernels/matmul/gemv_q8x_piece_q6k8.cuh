// Q6_K for the int8-activation GEMVs with 8 lanes per block (PieceQ6_K8), device code only, and
// the switch that picks it (Q6KPiece). Included inside the anonymous namespace of the GEMV / MoE
// .cu files of kernels/matmul, after gemv_q8x_pieces.cuh and gemv_q8x_pieces_low_bit.cuh (it
// reuses KQuartersScaledDot, LoadUnaligned and Realign from there).
//
// Why a second Q6_K piece: PieceQ6_K gives a block 16 lanes of 16 elements each, and the block is
// only 2-byte aligned (210 bytes), so a lane loads five unaligned 4-byte pieces (ten words) and a
// half-word for 16 weights, plus four activation words and four scales. In SASS
// (scripts/sass.py, bench/gpu/results-v20-sass.txt) the one-row GEMV's loop is 383 instructions
// per two steps - about 12 per weight, 2.6 times the Q4_K loop's 4.6. With 8 lanes of 32
// elements - Q2_K / Q3_K's mapping: lane c takes half h = c / 4 and positions l0 = 8 (c % 4) ..
// +7 of the half's four 32-element quarters - each 8-byte piece of ql / qh / scales costs three
// words, the block header half-word is shared by twice the weights, and the activations come as
// KQuartersX's 8-byte pairs. The sums run in another order than PieceQ6_K's (8 partial dot
// products per lane instead of 4, over other lanes), so results differ from it in the last bits.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECE_Q6K8_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECE_Q6K8_CUH_

// ---- Q6_K, 8 lanes per block. Element 128 h + 32 k + l (half h, quarter k, position l): low 4
// bits from ql[64 h + l] (k = 0, 2: low / high nibble) or ql[64 h + 32 + l] (k = 1, 3), high 2
// bits 2k..2k+1 of qh[32 h + l] (bytes 128..191), signed 8-bit scale scales[8 h + 2 k + l / 16]
// (bytes 192..207), d at 208; value d * scale * (q - 32). ----
struct PieceQ6_K8 : KQuartersScaledDot {  // W: q - 32 as signed bytes
  static constexpr int kLanes = 8, kElems = 256, kBytes = 210;
  static constexpr int kDepth1 = 2;  // 12 raw registers a step (Q3_K's count)
  struct Raw {
    uint32_t ql0[3], ql1[3], qh[3], sc[3];
    unsigned short d;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const int h = c >> 2, l0 = 8 * (c & 3);
    Raw raw;
    LoadUnaligned<L, 2>(blk + 64 * h + l0, raw.ql0);
    LoadUnaligned<L, 2>(blk + 64 * h + 32 + l0, raw.ql1);
    LoadUnaligned<L, 2>(blk + 128 + 32 * h + l0, raw.qh);
    LoadUnaligned<L, 2>(blk + 192 + 8 * h, raw.sc);  // the half's 8 scale bytes
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk + 208));
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int c, const GemvParams&) {
    const uint32_t off = static_cast<uint32_t>((2 * b) & 3);  // 210 b mod 4 (rows 16-aligned)
    uint32_t ql0[2], ql1[2], qh[2], sc[2];
    Realign<2>(raw.ql0, off, ql0);
    Realign<2>(raw.ql1, off, ql1);
    Realign<2>(raw.qh, off, qh);
    Realign<2>(raw.sc, off, sc);
    W w;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      // 6-bit values 0..63 per byte, then - 32 per byte (no borrow: every byte is >= 0 before).
      w.q[t] = __vsub4((ql0[t] & 0x0F0F0F0Fu) | ((qh[t] << 4) & 0x30303030u), 0x20202020u);
      w.q[2 + t] = __vsub4((ql1[t] & 0x0F0F0F0Fu) | ((qh[t] << 2) & 0x30303030u), 0x20202020u);
      w.q[4 + t] = __vsub4(((ql0[t] >> 4) & 0x0F0F0F0Fu) | (qh[t] & 0x30303030u), 0x20202020u);
      w.q[6 + t] =
          __vsub4(((ql1[t] >> 4) & 0x0F0F0F0Fu) | ((qh[t] >> 2) & 0x30303030u), 0x20202020u);
    }
    // Positions l0..l0+7 lie in one 16-element sub-block of each quarter: scale byte 2k + (l0 >=
    // 16) of the half's 8, i.e. byte `upper` of word 0 (k = 0, 1) or word 1 (k = 2, 3), + 2 (k &
    // 1).
    const int upper = (c & 3) >> 1;
    const float d = F16Bits(raw.d);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t sbyte = Byte(sc[k >> 1], 2 * (k & 1) + upper);
      w.dsc[k] = d * static_cast<float>(static_cast<int8_t>(sbyte));
    }
    return w;
  }
};

// STEPSERVE_Q6K_EIGHT_LANES (compile time, default 1; -DCMAKE_CUDA_FLAGS=-D...=0 builds PieceQ6_K
// in its place): the int8-activation GEMVs (one-row, 2-16 rows, grouped, streamed) and the
// few-token MoE kernels decode Q6_K through PieceQ6_K8. Measured on the H100 (24 layers, ms per
// step, two alternating rounds; bench/gpu/results-v21.txt): the Q4_K_M mix at 1 / 2 / 4 streams
// 3.134 / 4.234 / 7.857 and 3.122 / 4.237 / 7.900 with PieceQ6_K, 2.977 / 4.011 / 7.702 and
// 3.000 / 4.023 / 7.666 with PieceQ6_K8; IQ4_XS batch 1 (its Q6_K LM head) unchanged.
#ifndef STEPSERVE_Q6K_EIGHT_LANES
#define STEPSERVE_Q6K_EIGHT_LANES 1
#endif
using Q6KPiece = std::conditional_t<STEPSERVE_Q6K_EIGHT_LANES != 0, PieceQ6_K8, PieceQ6_K>;

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECE_Q6K8_CUH_
