// Weight decoders of the grouped F16 GEMM (gemm_grouped_f16_cuda.cu): a block type's staged rows
// -> F16 A fragments of mma.m16n8k16 with the block's scales (and mins) folded in. Device code,
// included inside the kernel file's anonymous namespace (after gemv_q8x_pieces.cuh).
//
// A decoder D gives the staging geometry (kBlockBytes, kStride: a staged row's bytes, chosen so
// the 8 rows a fragment load reads fall in distinct banks; kPieceBytes, kPieces: the cp.async
// pieces of a block) and, per sub-block of 32 weights, lane t's 8 weights as two words of biased
// bytes (`words`: halves 0-3 and 4-7 of the lane's 16-byte activation chunk, so word x feeds the
// first m16n8k16 of the sub-block and word y the second) with the sub-block's F16 scale (and
// negated min), turned into F16 pairs by Halves(). kPairOrder: the activations this decoder reads
// are in the pair order of Q8ScratchPosition (IQ4_XS), else in natural order.
// Blocks that are not piece-aligned in a row (Q6_K: 210 bytes) are copied from their start
// rounded down: CopySource(piece address, piece) gives the source of a piece, Shift(global block
// start) where the block then starts in its staged row (at most kMaxShift; the pieces cover
// kMaxShift + kBlockBytes), and Begin(staged row, shift, lane t) reads it there. For the aligned
// types CopySource is the identity and Shift 0 at compile time (their code is unchanged).
#ifndef STEPSERVE_KERNELS_MATMUL_GEMM_F16_DECODERS_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMM_F16_DECODERS_CUH_

// What Decode may read besides the staged rows: the IQ4_NL table biased by 128 per byte (the IQ4_XS
// decoder) and the device copies of the i-quant grids (gemm_f16_decoders_grid.cuh).
struct F16DecodeTables {
  uint32_t iq4nl[4];
  const uint64_t* iq2xxs;
  const uint64_t* iq2xs;
  const uint64_t* iq2s;
  const uint32_t* iq3xxs;
  const uint32_t* iq3s;
};

// The tables of a launch's parameters: the IQ4_NL table biased by 128 per byte (ScaledHalves'
// exact int8 -> F16; IQ4_XS only) and the i-quant grids (the grid decoders).
__device__ __forceinline__ F16DecodeTables DecodeTablesOf(const GemvParams& p) {
  return F16DecodeTables{{p.iq4nl[0] ^ 0x80808080u, p.iq4nl[1] ^ 0x80808080u,
                          p.iq4nl[2] ^ 0x80808080u, p.iq4nl[3] ^ 0x80808080u},
                         p.iq2xxs_grid,
                         p.iq2xs_grid,
                         p.iq2s_grid,
                         p.iq3xxs_grid,
                         p.iq3s_grid};
}

// F16 pair arithmetic and conversion, round to nearest even, subnormals kept (inline PTX so the
// host emulation, tests/cuda_emu/grouped_gemm, can substitute these four).
__device__ __forceinline__ uint32_t SubF16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t MulF16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t FmaF16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint16_t F16FromF32(float x) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}

// Two floats as an F16 pair (lo in the low half), saturated at +-65504 first: an infinity would
// turn the MMA's zero weights into NaNs (the activation converters).
__device__ __forceinline__ uint32_t SaturatedF16Pair(float lo, float hi) {
  return static_cast<uint32_t>(F16FromF32(fminf(fmaxf(lo, -65504.f), 65504.f))) |
         (static_cast<uint32_t>(F16FromF32(fminf(fmaxf(hi, -65504.f), 65504.f))) << 16);
}

// Two F16 weights from bytes (sel) of `biased` (IQ4_NL table value + 128 per byte) times `scale`:
// 0x64XX is the F16 1024 + XX, so subtracting 1152 leaves the table value exactly; one rounding
// in the product. (A fused h * s - 1152 * s would round 1152 * s: up to half a table step.)
__device__ __forceinline__ uint32_t ScaledHalves(uint32_t biased, uint32_t sel, uint32_t scale) {
  const uint32_t h = __byte_perm(biased, 0x64646464u, sel);
  return MulF16x2(SubF16x2(h, 0x64806480u), scale);  // 0x6480: 1152
}

// Four 6-bit values, one per byte of `bytes`, as two exact F16 pairs ({byte 0, 1}, {2, 3}) times
// `mul2` ({m, m}): 0x64XX = 1024 + XX, minus `bias2` (1024 + the values' offset), times m: one
// rounding, as when the float product is rounded to F16.
__device__ __forceinline__ void BytesTimesF16(uint32_t bytes, uint32_t bias2, uint32_t mul2,
                                              uint32_t* lo, uint32_t* hi) {
  *lo = MulF16x2(SubF16x2(__byte_perm(bytes, 0x64646464u, 0x4140u), bias2), mul2);
  *hi = MulF16x2(SubF16x2(__byte_perm(bytes, 0x64646464u, 0x4342u), bias2), mul2);
}

// ---- IQ4_XS: 136-byte blocks {d, scales_h, scales_l[4], qs[128]}, 8-byte aligned in a row. ----
struct Iq4XsF16Decoder {
  static constexpr int kBlockBytes = 136;
  static constexpr int kStride = 144;  // rows 16 bytes apart mod 128
  static constexpr int kPieceBytes = 8, kPieces = 17, kMaxShift = 0;
  static constexpr bool kPairOrder = true;
  static __device__ __forceinline__ const uint8_t* CopySource(const uint8_t* p, int) { return p; }
  static __device__ __forceinline__ int Shift(const uint8_t*) { return 0; }
  struct Row {
    const uint8_t* p;
    // The 8 sub-block scales d * (ls - 32) as F16 pairs: {ib 0, 2}, {4, 6}, {1, 3}, {5, 7}.
    uint32_t s[4];
  };
  struct Sub {
    uint2 words;
    uint32_t scale;
  };
  // The 6-bit ls of all 8 sub-blocks are assembled as bytes with whole-word bit operations. Why:
  // per sub-block and row the scalar decode (one scale extracted, then converted to F16) cost
  // ~7 integer-pipe instructions; the ALU pipe is the decode's limit (session-9 ncu).
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int, int) {
    const uint2 h = *reinterpret_cast<const uint2*>(row);
    uint32_t ls_even, ls_odd;  // byte k: ls(2k), ls(2k + 1)
    Iq4ScaleBytes(h, &ls_even, &ls_odd);
    const uint32_t d2 = __byte_perm(h.x, 0, 0x1010u);  // {d, d}
    Row r{row, {}};
    BytesTimesF16(ls_even, 0x64206420u, d2, &r.s[0], &r.s[1]);  // 0x6420: 1056 = 1024 + 32
    BytesTimesF16(ls_odd, 0x64206420u, d2, &r.s[2], &r.s[3]);
    return r;
  }
  // `tbl.iq4nl`: the IQ4_NL table biased by 128 per byte (ScaledHalves' exact int8 -> F16). Lane
  // t's byte word t of the sub-block's qs holds elements 4t..4t+3 (low nibbles) and 16+4t.. (high):
  // Lookup16Pairs yields them in the pair order of its activation chunk.
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const uint32_t q = *reinterpret_cast<const uint32_t*>(r.p + 8 + 16 * ib + 4 * t);
    // ib & 3 is known at compile time under the unrolled loop; ib & 4 selects between registers.
    const uint32_t pair = (ib & 1) ? ((ib & 4) ? r.s[3] : r.s[2]) : ((ib & 4) ? r.s[1] : r.s[0]);
    return Sub{Lookup16Pairs(q, tbl.iq4nl), __byte_perm(pair, 0, (ib & 2) ? 0x3232u : 0x1010u)};
  }
  static __device__ __forceinline__ uint32_t Halves(const Sub& s, uint32_t word, uint32_t sel) {
    return ScaledHalves(word, sel, s.scale);
  }
};

// ---- Q4_K: 144-byte blocks {d, dmin, scales[12], qs[128]}, 16-byte aligned in a row. ----
// Weight = d * sc * q - dmin * m (q 4-bit; 6-bit sc, m per 32-weight sub-block). Sub-blocks 2j
// and 2j + 1 are the low and high nibbles of qs[32j .. 32j + 31], element l in byte l, so lane
// t's 8 elements 8t..8t+7 (natural order) are bytes 8t..8t+7: one 8-byte load.
struct Q4KF16Decoder {
  static constexpr int kBlockBytes = 144;
  static constexpr int kStride = 160;  // rows 32 bytes apart mod 128 (8-byte fragment loads)
  static constexpr int kPieceBytes = 16, kPieces = 9, kMaxShift = 0;
  static constexpr bool kPairOrder = false;
  static __device__ __forceinline__ const uint8_t* CopySource(const uint8_t* p, int) { return p; }
  static __device__ __forceinline__ int Shift(const uint8_t*) { return 0; }
  struct Row {
    const uint8_t* p;
    uint32_t s[4];   // d * sc as F16 pairs {ib 0, 1}, {2, 3}, {4, 5}, {6, 7}
    uint32_t nm[4];  // -(dmin * m), the same pairs
  };
  struct Sub {
    uint2 words;
    uint32_t scale, neg_min;
  };
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int, int) {
    const uint4 h = *reinterpret_cast<const uint4*>(row);  // {d | dmin, scales[0..11]}
    // get_scale_min_k4 for all 8 sub-blocks at once: j < 4 from the low 6 bits of bytes j and
    // j + 4; j >= 4 from the nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j.
    const uint32_t sc_lo = h.y & 0x3F3F3F3Fu, m_lo = h.z & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    const uint32_t m_hi = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
    const uint32_t d2 = __byte_perm(h.x, 0, 0x1010u), dmin2 = __byte_perm(h.x, 0, 0x3232u);
    Row r{row, {}, {}};
    BytesTimesF16(sc_lo, 0x64006400u, d2, &r.s[0], &r.s[1]);  // 0x6400: 1024
    BytesTimesF16(sc_hi, 0x64006400u, d2, &r.s[2], &r.s[3]);
    BytesTimesF16(m_lo, 0x64006400u, dmin2, &r.nm[0], &r.nm[1]);
    BytesTimesF16(m_hi, 0x64006400u, dmin2, &r.nm[2], &r.nm[3]);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.nm[i] ^= 0x80008000u;  // negated: exact
    return r;
  }
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables&) {
    const uint2 q = *reinterpret_cast<const uint2*>(r.p + 16 + 32 * (ib >> 1) + 8 * t);
    const int shift = 4 * (ib & 1);
    const uint2 words = make_uint2((q.x >> shift) & 0x0F0F0F0Fu, (q.y >> shift) & 0x0F0F0F0Fu);
    // ib & 3 is known at compile time under the unrolled loop; ib & 4 selects between registers.
    const uint32_t s = (ib & 4) ? ((ib & 2) ? r.s[3] : r.s[2]) : ((ib & 2) ? r.s[1] : r.s[0]);
    const uint32_t nm = (ib & 4) ? ((ib & 2) ? r.nm[3] : r.nm[2]) : ((ib & 2) ? r.nm[1] : r.nm[0]);
    const uint32_t sel = (ib & 1) ? 0x3232u : 0x1010u;
    return Sub{words, __byte_perm(s, 0, sel), __byte_perm(nm, 0, sel)};
  }
  // q * scale - min with one rounding (fma); q exact as 0x64XX - 1024.
  static __device__ __forceinline__ uint32_t Halves(const Sub& s, uint32_t word, uint32_t sel) {
    const uint32_t h = __byte_perm(word, 0x64646464u, sel);
    return FmaF16x2(SubF16x2(h, 0x64006400u), s.scale, s.neg_min);
  }
};

// ---- Q5_K: 176-byte blocks {d, dmin, scales[12], qh[32], qs[128]}, 16-byte aligned in a row. ----
// Q4_K's header and arithmetic (q * scale - min, one F16 fma) with a fifth bit: element l of
// sub-block ib has its low 4 bits in nibble ib & 1 of qs[32 (ib >> 1) + l] (qs at byte 48) and bit
// 4 in bit ib of qh[l] (engine/quant/quant_k.cc DequantQ5_K). Lane t's elements 8t..8t+7 are bytes
// 8t..8t+7 of both: two 8-byte loads. q <= 31 stays exact in the 0x64XX form. The attention `v`
// projection of the published IQ4_XS mix (RunDenseGrouped from 9 rows, K split in 8 slices).
// kStride 176 (no padding): rows 48 bytes apart mod 128, so the 8 rows' 32-byte runs of a
// fragment load cover every bank exactly twice (the two wavefronts 256 bytes need anyway).
struct Q5KF16Decoder {
  static constexpr int kBlockBytes = 176;
  static constexpr int kStride = 176;
  static constexpr int kPieceBytes = 16, kPieces = 11, kMaxShift = 0;
  static constexpr bool kPairOrder = false;
  using Row = Q4KF16Decoder::Row;
  using Sub = Q4KF16Decoder::Sub;
  static __device__ __forceinline__ const uint8_t* CopySource(const uint8_t* p, int) { return p; }
  static __device__ __forceinline__ int Shift(const uint8_t*) { return 0; }
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int shift, int t) {
    return Q4KF16Decoder::Begin(row, shift, t);  // bytes 0-15: the same d, dmin and scales
  }
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables& tbl) {
    const uint2 q = *reinterpret_cast<const uint2*>(r.p + 48 + 32 * (ib >> 1) + 8 * t);
    const uint2 h = *reinterpret_cast<const uint2*>(r.p + 16 + 8 * t);
    const int shift = 4 * (ib & 1);
    const uint2 words =
        make_uint2(((q.x >> shift) & 0x0F0F0F0Fu) | (((h.x >> ib) & 0x01010101u) << 4),
                   ((q.y >> shift) & 0x0F0F0F0Fu) | (((h.y >> ib) & 0x01010101u) << 4));
    const uint32_t s = (ib & 4) ? ((ib & 2) ? r.s[3] : r.s[2]) : ((ib & 2) ? r.s[1] : r.s[0]);
    const uint32_t nm = (ib & 4) ? ((ib & 2) ? r.nm[3] : r.nm[2]) : ((ib & 2) ? r.nm[1] : r.nm[0]);
    const uint32_t sel = (ib & 1) ? 0x3232u : 0x1010u;
    return Sub{words, __byte_perm(s, 0, sel), __byte_perm(nm, 0, sel)};
  }
  static __device__ __forceinline__ uint32_t Halves(const Sub& s, uint32_t word, uint32_t sel) {
    return Q4KF16Decoder::Halves(s, word, sel);
  }
};

// ---- Q6_K: 210-byte blocks {ql[128], qh[64], scales[16] (int8), d}, 2-byte aligned in a row. ----
// Weight = d * sc * (q - 32), q 6-bit (engine/quant/quant_k.cc DequantQ6_K): element
// 128h + 32qd + l (half h, quarter qd, l < 32) has its low 4 bits in nibble qd >> 1 of
// ql[64h + 32(qd & 1) + l], its high 2 in bits 2qd, 2qd + 1 of qh[32h + l], and scale
// scales[8h + 2qd + l / 16]. So for sub-block ib = 4h + qd, lane t's elements 8t..8t+7 (natural
// order) are bytes 8t..8t+7 of a 32-byte run of ql and one of qh, all under one scale,
// scales[2ib + (t >> 1)].
//
// Staging: a block starts at row + 210 kb, only 2-byte aligned, and cp.async needs aligned source
// and destination. So a row's block is copied as 14 pieces of 16 bytes from its start rounded
// down to 16: it lies at offset shift = start & 15 (even, <= 14; 14 + 210 = 224 = 14 * 16) of the
// staged row. The copy reads up to 14 bytes before and after the block, always inside a 16-byte
// aligned segment that also holds bytes of the block: the same page and allocation, never a fault
// (the stray bytes are never used). Why 16-byte pieces: 14 instead of 27 cp.async per row and
// block (the copy loop's instructions mattered in the session-9 profile), and the 8-byte form
// (27 pieces from the start rounded down to 8) would stage 216 bytes: no smaller 16-byte-aligned
// stride. The decoder reads 32-bit words at (shift + offset) & ~3 and realigns them with a funnel
// shift by 8 * (shift & 3), 0 or 16 bits: three word loads and two shifts per 8 bytes (8 rows
// 224 bytes apart at 8-byte lane steps: 2-way bank conflicts on these loads; the activation loads
// dominate the stage's shared-memory traffic).
// The copy of a block that is not 16-byte aligned in its row (Q6_K here, the 2-3 bit types of
// gemm_f16_decoders_grid.cuh): pieces from the block start rounded down to 16.
struct UnalignedBlockCopy {
  static __device__ __forceinline__ const uint8_t* CopySource(const uint8_t* p, int) {
    // The block start rounded down plus 16 * piece = (block start + 16 * piece) rounded down.
    return reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{15});
  }
  static __device__ __forceinline__ int Shift(const uint8_t* block) {
    return static_cast<int>(reinterpret_cast<uintptr_t>(block) & 15);
  }
};

struct Q6KF16Decoder : UnalignedBlockCopy {
  static constexpr int kBlockBytes = 210;
  static constexpr int kStride = 224;  // the 14 pieces; rows 96 bytes apart mod 128
  static constexpr int kPieceBytes = 16, kPieces = 14, kMaxShift = 14;
  static constexpr bool kPairOrder = false;
  struct Row {
    const uint8_t* p;  // staged row + (shift & ~3): block bytes i.. (i % 4 == 0) from words p + i..
    uint32_t fs;       // 8 * (shift & 3): the funnel shift that realigns those words
    uint32_t s[4];     // the lane's d * sc as F16 pairs {ib 0, 1}, {2, 3}, {4, 5}, {6, 7}
  };
  struct Sub {
    uint2 words;
    uint32_t scale;
  };
  // Block bytes off .. off + 7 (off a multiple of 4).
  static __device__ __forceinline__ uint2 Load8(const Row& r, int off) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(r.p + off);
    const uint32_t w0 = w[0], w1 = w[1], w2 = w[2];
    return make_uint2(__funnelshift_r(w0, w1, r.fs), __funnelshift_r(w1, w2, r.fs));
  }
  static __device__ __forceinline__ Row Begin(const uint8_t* row, int shift, int t) {
    Row r{row + (shift & ~3), static_cast<uint32_t>(8 * (shift & 3)), {}};
    const uint2 s03 = Load8(r, 192), s47 = Load8(r, 200);  // scales[0..15]
    const uint32_t w4 = *reinterpret_cast<const uint32_t*>(r.p + 208);
    const uint32_t d2 = __byte_perm(w4 >> r.fs, 0, 0x1010u);  // {d, d}
    // Lane t's scales, scales[2ib + (t >> 1)], as bytes ib & 3 of a word, + 128 (sc is int8):
    // 0x64XX - 1152 is sc exactly, times d: one rounding, as when the float d * sc is rounded.
    const uint32_t sel = (t & 2) ? 0x7531u : 0x6420u;
    const uint32_t lo = __byte_perm(s03.x, s03.y, sel) ^ 0x80808080u;  // ib 0..3
    const uint32_t hi = __byte_perm(s47.x, s47.y, sel) ^ 0x80808080u;  // ib 4..7
    // 0x6480: 1152 = 1024 + 128.
    BytesTimesF16(lo, 0x64806480u, d2, &r.s[0], &r.s[1]);
    BytesTimesF16(hi, 0x64806480u, d2, &r.s[2], &r.s[3]);
    return r;
  }
  static __device__ __forceinline__ Sub Decode(const Row& r, int ib, int t,
                                               const F16DecodeTables&) {
    // ib & 3 is known at compile time under the unrolled loop; ib & 4 selects between registers.
    const int h = ib >> 2, qd = ib & 3;
    const uint2 ql = Load8(r, 64 * h + 32 * (qd & 1) + 8 * t);
    const uint2 qh = Load8(r, 128 + 32 * h + 8 * t);
    const int lo_shift = 4 * (qd >> 1), hi_shift = 2 * qd;
    // Per byte: the nibble, and bits 2qd, 2qd + 1 of qh moved to bits 4, 5 (q = 0..63).
    const uint2 words =
        make_uint2(((ql.x >> lo_shift) & 0x0F0F0F0Fu) | (((qh.x >> hi_shift) << 4) & 0x30303030u),
                   ((ql.y >> lo_shift) & 0x0F0F0F0Fu) | (((qh.y >> hi_shift) << 4) & 0x30303030u));
    const uint32_t s = (ib & 4) ? ((ib & 2) ? r.s[3] : r.s[2]) : ((ib & 2) ? r.s[1] : r.s[0]);
    return Sub{words, __byte_perm(s, 0, (ib & 1) ? 0x3232u : 0x1010u)};
  }
  // (q - 32) * scale: 0x64XX - 1056 is q - 32 exactly; one rounding in the product.
  static __device__ __forceinline__ uint32_t Halves(const Sub& s, uint32_t word, uint32_t sel) {
    const uint32_t h = __byte_perm(word, 0x64646464u, sel);
    return MulF16x2(SubF16x2(h, 0x64206420u), s.scale);  // 0x6420: 1056 = 1024 + 32
  }
};

#endif  // STEPSERVE_KERNELS_MATMUL_GEMM_F16_DECODERS_CUH_
