// Weight decoders of the grouped F16 GEMM (gemm_grouped_f16_cuda.cu) for the 2-3 bit types of the
// published Step files' experts: IQ3_S and IQ3_XXS (Step-3.5-Flash's gate/up), IQ2_XXS, Q2_K and
// Q3_K (Step-5; Step-3.7's gate/up), IQ2_XS and IQ2_S (community Step-3.5-Flash files). The decoder
// contract is gemm_f16_decoders.cuh's (included before this file, with gemv_q8x_pieces_low_bit.cuh
// for the sign helpers); natural activation order: lane t's 8 weights are elements 8t..8t+7 of
// sub-block ib.
//
// Staging: none of these blocks is 16-byte aligned in a row (66 / 98 / 110 bytes: 2-byte
// aligned; 84: 4-byte aligned), so each row's block is copied as Q6KF16Decoder's is - 16-byte
// pieces from its start rounded down to 16, the block then at `shift` (<= 14) in the staged row;
// the copy reads only 16-byte segments that also hold bytes of the block (CopySource). Fields are
// read as the aligned words around them, realigned by a funnel shift (StagedWord).
//
// The i-quants: a grid entry per 4 or 8 weights looked up in the device table copies
// (F16DecodeTables, from GemvParams), signs applied with ApplySigns4, +128 per byte so
// ScaledHalves turns the int8 values into F16 exactly; the sub-block scale, computed in float as
// the CPU dequantizer does, is rounded to F16 once and each weight once more in the product.
// Q2_K: Q4KF16Decoder's arithmetic (q * scale - min, one F16 fma) with 2-bit q and the 4-bit
// scale and min of the lane's 16-element sub-block.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMM_F16_DECODERS_GRID_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMM_F16_DECODERS_GRID_CUH_

// Block bytes at - shift .. at - shift + 3 of a staged row (`at` = shift + the byte's offset in
// the block, any alignment): the aligned word holding byte `at` and the next, funnel-shifted. The
// next word may lie past the staged row (in the next row or the activation stage: still shared
// memory) when its bytes are not needed.
__device__ __forceinline__ uint32_t StagedWord(const uint8_t* row, int at) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(row + (at & ~3));
  return __funnelshift_r(w[0], w[1], 8 * (at & 3));
}

// v as an F16 pair {v, v}, rounded once.
__device__ __forceinline__ uint32_t F16Pair(float v) {
  const uint32_t h = F16FromF32(v);
  return h | (h << 16);
}

// The staging geometry of kBytes-byte blocks whose start in a row is a multiple of 16 - kMaxShift.
template <int kBytes, int kShiftLimit, int kStrideBytes>
struct UnalignedF16Staging : UnalignedBlockCopy {
  static constexpr int kBlockBytes = kBytes;
  static constexpr int kStride = kStrideBytes;
  static constexpr int kPieceBytes = 16, kMaxShift = kShiftLimit;
  static constexpr int kPieces = (kShiftLimit + kBytes + 15) / 16;
  static constexpr bool kPairOrder = false;
  // UnalignedBlockCopy's source, except that where the pieces outgrow the largest shift plus a
  // block (110-byte blocks: 8 pieces for 124 bytes) a last piece past the block's end - at
  // shifts 0 and 2 - copies the piece before it instead: a segment past the block may lie past
  // the allocation (the last row's end), and those staged bytes are never read.
  static __device__ __forceinline__ const uint8_t* CopySource(const uint8_t* p, int piece) {
    const uint8_t* src = UnalignedBlockCopy::CopySource(p, piece);
    if constexpr (kPieces * 16 > kShiftLimit + kBytes) {
      if (src >= p - 16 * piece + kBytes) src -= 16;
    }
    return src;
  }
  struct Row {
    const uint8_t* p;  // the staged row
    int shift;         // where the block starts in it
    float d;           // the block's F16 d (at offset 0 for the i-quants)
  };
  struct Sub {
    uint2 words;  // int8 weights + 128 per byte: elements 8t..8t+3, 8t+4..8t+7
    uint32_t scale;
  };
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int shift, int) {
    return Row{row, shift, F16Bits(StagedWord(row, shift))};
  }
  static __device__ __forceinline__ uint32_t Halves(const Sub& s, uint32_t word, uint32_t sel) {
    return ScaledHalves(word, sel, s.scale);
  }
};

// ---- IQ2_XXS: 66-byte blocks {d, 8 x (4 grid indices, signs-and-scale word)}. Lane t: grid entry
// idx[t] of sub-block ib (8 weights), sign index bits 7t..7t+6, scale d * (0.5 + ls) / 4. ----
struct Iq2XxsF16Decoder : UnalignedF16Staging<66, 14, 80> {  // 5 pieces; 8 rows in distinct banks
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const int at = r.shift + 2 + 8 * ib;
    const uint32_t idx = StagedWord(r.p, at), sw = StagedWord(r.p, at + 4);
    const uint2 g = __ldg(reinterpret_cast<const uint2*>(tbl.iq2xxs + Byte(idx, t)));
    const uint32_t signs = SignsFromIndex((sw >> (7 * t)) & 127u);
    const float scale = r.d * (0.5f + static_cast<float>(static_cast<int>(sw >> 28))) * 0.25f;
    return Sub{make_uint2(ApplySigns4(g.x, signs) ^ 0x80808080u,
                          ApplySigns4(g.y, signs >> 4) ^ 0x80808080u),
               F16Pair(scale)};
  }
};

// ---- IQ2_XS: 74-byte blocks {d, qs[32] (uint16: 9-bit grid index, 7-bit sign index),
// scales[8]}. Lane t: index word qs[4 ib + t], scale nibble t / 2 of scales[ib] (a 4-bit scale
// per 16 elements), d * (0.5 + ls) / 4. ----
struct Iq2XsF16Decoder : UnalignedF16Staging<74, 14, 112> {  // 6 pieces; rows 112 bytes apart
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const uint32_t v = StagedWord(r.p, r.shift + 2 + 8 * ib + 2 * t) & 0xFFFFu;
    const uint2 g = __ldg(reinterpret_cast<const uint2*>(tbl.iq2xs + (v & 511u)));
    const uint32_t signs = SignsFromIndex(v >> 9);
    const uint32_t sc = r.p[r.shift + 66 + ib];
    return Sub{make_uint2(ApplySigns4(g.x, signs) ^ 0x80808080u,
                          ApplySigns4(g.y, signs >> 4) ^ 0x80808080u),
               F16Pair(HalfScale(r.d, sc, t >> 1))};
  }
};

// ---- IQ2_S: 82-byte blocks {d, qs[32], signs[32], qh[8], scales[8]}. Lane t: 10-bit index
// qs[4 ib + t] | bits 2t, 2t + 1 of qh[ib] << 8, sign byte signs[4 ib + t], IQ2_XS's scales. ----
struct Iq2SF16Decoder : UnalignedF16Staging<82, 14, 112> {  // 6 pieces
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const uint8_t* blk = r.p + r.shift;  // single bytes: plain byte loads
    const uint32_t idx =
        blk[2 + 4 * ib + t] | ((static_cast<uint32_t>(blk[66 + ib]) >> (2 * t)) & 3u) << 8;
    const uint2 g = __ldg(reinterpret_cast<const uint2*>(tbl.iq2s + idx));
    const uint32_t signs = blk[34 + 4 * ib + t];
    return Sub{make_uint2(ApplySigns4(g.x, signs) ^ 0x80808080u,
                          ApplySigns4(g.y, signs >> 4) ^ 0x80808080u),
               F16Pair(HalfScale(r.d, blk[74 + ib], t >> 1))};
  }
};

// ---- IQ3_XXS: 98-byte blocks {d, qs[64] (a grid index per 4 weights), 8 signs-and-scale words}.
// Lane t: indices qs[8 ib + 2t], qs[8 ib + 2t + 1], sign index bits 7t.. of word ib, scale
// d * (0.5 + ls) / 2. ----
struct Iq3XxsF16Decoder : UnalignedF16Staging<98, 14, 112> {  // 7 pieces
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const uint32_t q = StagedWord(r.p, r.shift + 2 + 8 * ib + 2 * t);
    const uint32_t sw = StagedWord(r.p, r.shift + 66 + 4 * ib);
    const uint32_t g0 = __ldg(tbl.iq3xxs + (q & 0xFFu)),
                   g1 = __ldg(tbl.iq3xxs + ((q >> 8) & 0xFFu));
    const uint32_t signs = SignsFromIndex((sw >> (7 * t)) & 127u);
    const float scale = r.d * (0.5f + static_cast<float>(static_cast<int>(sw >> 28))) * 0.5f;
    return Sub{
        make_uint2(ApplySigns4(g0, signs) ^ 0x80808080u, ApplySigns4(g1, signs >> 4) ^ 0x80808080u),
        F16Pair(scale)};
  }
};

// ---- IQ3_S: 110-byte blocks {d, qs[64], qh[8], signs[32], scales[4]}. Lane t: 9-bit indices
// qs[8 ib + 2t + k] | bit 2t + k of qh[ib] << 8 (k = 0, 1), sign byte signs[4 ib + t], scale
// d * (1 + 2 ls) with ls nibble ib % 2 of scales[ib / 2]. ----
struct Iq3SF16Decoder : UnalignedF16Staging<110, 14, 144> {  // 8 pieces; rows 16 apart mod 128
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const uint32_t q = StagedWord(r.p, r.shift + 2 + 8 * ib + 2 * t);
    const uint8_t* blk = r.p + r.shift;  // single bytes: plain byte loads
    const uint32_t qh = static_cast<uint32_t>(blk[66 + ib]) >> (2 * t);
    const uint32_t signs = blk[74 + 4 * ib + t];
    const uint32_t ls = (static_cast<uint32_t>(blk[106 + (ib >> 1)]) >> (4 * (ib & 1))) & 15u;
    const uint32_t g0 = __ldg(tbl.iq3s + ((q & 0xFFu) | (qh & 1u) << 8));
    const uint32_t g1 = __ldg(tbl.iq3s + (((q >> 8) & 0xFFu) | ((qh >> 1) & 1u) << 8));
    const float scale = r.d * static_cast<float>(static_cast<int>(1 + 2 * ls));
    return Sub{
        make_uint2(ApplySigns4(g0, signs) ^ 0x80808080u, ApplySigns4(g1, signs >> 4) ^ 0x80808080u),
        F16Pair(scale)};
  }
};

// ---- Q2_K: 84-byte blocks {scales[16], qs[64], d, dmin}, 4-byte aligned in a row (shift 0, 4, 8
// or 12). Sub-block ib = 4h + k: element 128h + 32k + l is bits 2k, 2k + 1 of qs[32h + l], so
// lane t's elements l = 8t..8t+7 are 8 consecutive qs bytes; they share the 16-element sub-block
// 8h + 2k + (t >> 1), scale byte {sc (low nibble), m}: weight d * sc * q - dmin * m. ----
struct Q2KF16Decoder : UnalignedF16Staging<84, 12, 112> {  // 6 pieces; 8 rows in distinct banks
  using Sub = Q4KF16Decoder::Sub;
  struct Row {
    const uint8_t* p;
    int shift;
    float d, dmin;
  };
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int shift, int) {
    const uint32_t dd = *reinterpret_cast<const uint32_t*>(row + shift + 80);  // shift % 4 == 0
    return Row{row, shift, F16Bits(dd), F16Bits(dd >> 16)};
  }
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables&) {
    const int h = ib >> 2, k = ib & 3;
    const int at = r.shift + 16 + 32 * h + 8 * t;  // a multiple of 4: plain word loads
    const uint32_t* q = reinterpret_cast<const uint32_t*>(r.p + at);
    const uint32_t sc = r.p[r.shift + 8 * h + 2 * k + (t >> 1)];
    const float ds = r.d * static_cast<float>(static_cast<int>(sc & 15u));
    const float dm = r.dmin * static_cast<float>(static_cast<int>((sc >> 4) & 15u));
    return Sub{make_uint2((q[0] >> (2 * k)) & 0x03030303u, (q[1] >> (2 * k)) & 0x03030303u),
               F16Pair(ds), F16Pair(dm) ^ 0x80008000u};
  }
  static __device__ __forceinline__ uint32_t Halves(const Sub& s, uint32_t word, uint32_t sel) {
    return Q4KF16Decoder::Halves(s, word, sel);
  }
};

// ---- Q3_K: 110-byte blocks {hmask[32], qs[64], scales[12], d}. Sub-block ib = 4h + k: element
// 128h + 32k + l has q = (bits 2k.. of qs[32h + l]) + 4 * (bit 4h + k of hmask[l]) - 4, so lane
// t's elements l = 8t..8t+7 are 8 consecutive bytes of each; their 16-element sub-block
// s = 8h + 2k + (t >> 1) has the signed 6-bit scale (low 4 bits: nibble h of scales[2k + (t >> 1)],
// high 2: bits 2(s / 4).. of scales[8 + s % 4]) - 32: weight d * scale * q. ----
struct Q3KF16Decoder : UnalignedF16Staging<110, 14, 144> {  // IQ3_S's geometry
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int shift, int) {
    return Row{row, shift, F16Bits(StagedWord(row, shift + 108))};
  }
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables&) {
    const int h = ib >> 2, k = ib & 3, half = t >> 1;
    const int qs_at = r.shift + 32 + 32 * h + 8 * t, hm_at = r.shift + 8 * t;
    const uint32_t q[2] = {StagedWord(r.p, qs_at), StagedWord(r.p, qs_at + 4)};
    const uint32_t hm[2] = {StagedWord(r.p, hm_at), StagedWord(r.p, hm_at + 4)};
    uint32_t words[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // 0..7 per byte, + 124: the value q + 128 (no byte carries).
      words[i] =
          (((q[i] >> (2 * k)) & 0x03030303u) | (((hm[i] >> (4 * h + k)) & 0x01010101u) << 2)) +
          0x7C7C7C7Cu;
    }
    const uint8_t* blk = r.p + r.shift;
    const int s = 8 * h + 2 * k + half;
    const uint32_t low4 = (static_cast<uint32_t>(blk[96 + 2 * k + half]) >> (4 * h)) & 15u;
    const uint32_t high2 = (static_cast<uint32_t>(blk[104 + (s & 3)]) >> (2 * (s >> 2))) & 3u;
    const float scale = r.d * static_cast<float>(static_cast<int>(low4 | high2 << 4) - 32);
    return Sub{make_uint2(words[0], words[1]), F16Pair(scale)};
  }
};

#endif  // STEPSERVE_KERNELS_MATMUL_GEMM_F16_DECODERS_GRID_CUH_
