// Block decoders of the int8-activation GEMV for the 2-3 bit types of the published Step files:
// IQ3_S and IQ3_XXS (Step-3.5-Flash's expert gate/up), IQ2_XXS (Step-5, Step-3.7), Q2_K and Q3_K
// (Step-5), IQ2_XS and IQ2_S (community Step-3.5-Flash files). Same Piece interface as
// gemv_q8x_pieces.cuh (included before this file), natural activation order. Without them these
// types took the exact F32 warp-per-row GEMV and, as MoE experts, the host-grouped path (ids to the
// host every MoE layer, so no step graphs).
//
// The i-quants: one 32-element sub-block per lane (8 lanes per block), grid entries looked up
// through GemvParams' device copies of the tables (DeviceDequantTables), signs applied to the
// grid bytes, then the 8 dp4a of SubBlock32Dot. Q2_K / Q3_K: lane c takes positions
// 8 (c % 4) .. +7 of all four 32-element groups of half c / 4 (each qs byte holds the 2-bit
// values of 4 elements 32 apart), so one pair of qs words serves 32 weights.
//
// Blocks of 66 / 74 / 82 / 98 / 110 bytes are only 2-byte aligned: a field is read as the aligned
// words around it and realigned by a funnel shift whose phase comes from the block index (rows
// start 16-byte aligned), as PieceQ8_0 does.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECES_LOW_BIT_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECES_LOW_BIT_CUH_

// Bytes 0..3 of `g` (grid magnitudes 1..127) negated where bits 0..3 of `signs` are set: the
// multiply spreads bit j to bit 8j (no two shifted copies overlap), and -g = (g ^ 0xFF) + 1 per
// byte never carries into the next byte for g >= 1.
__device__ __forceinline__ uint32_t ApplySigns4(uint32_t g, uint32_t signs) {
  const uint32_t ones = ((signs & 15u) * 0x00204081u) & 0x01010101u;
  return (g ^ (ones * 0xFFu)) + ones;
}

// Elements 8l .. 8l + 7 of a sub-block (words 2l, 2l + 1 of v) negated where bits 0..7 of
// `signs` are set.
__device__ __forceinline__ void ApplySigns8(uint32_t (&v)[8], int l, uint32_t signs) {
  v[2 * l] = ApplySigns4(v[2 * l], signs);
  v[2 * l + 1] = ApplySigns4(v[2 * l + 1], signs >> 4);
}

// The 8 sign bits of a 7-bit sign index (ksigns_iq2xs): bit 7 makes the count of set bits even.
__device__ __forceinline__ uint32_t SignsFromIndex(uint32_t k) {
  return k | ((__popc(k) & 1u) << 7);
}

// Bytes a .. a + 7 (a 2-byte aligned) as the aligned words around them: two words, a third only
// when a is not 4-byte aligned (it then holds bytes a + 6, a + 7, so never a word outside them).
template <class L, int kWords>
__device__ __forceinline__ void LoadUnaligned(const uint8_t* a, uint32_t (&v)[kWords + 1]) {
  const uint32_t off = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(a) & 3u);
  const unsigned* word = reinterpret_cast<const unsigned*>(a - off);
#pragma unroll
  for (int i = 0; i < kWords; ++i) v[i] = L::Load(word + i);
  v[kWords] = off ? L::Load(word + kWords) : 0u;
}
// The kWords words at byte phase `off` (0 or 2) of v (LoadUnaligned's words).
template <int kWords>
__device__ __forceinline__ void Realign(const uint32_t (&v)[kWords + 1], uint32_t off,
                                        uint32_t (&out)[kWords]) {
#pragma unroll
  for (int i = 0; i < kWords; ++i) out[i] = __funnelshift_r(v[i], v[i + 1], 8 * off);
}

// ---- IQ2_XXS: 66-byte blocks. Lane ib: the 8 bytes at 2 + 8 ib - four grid indices (one per 8
// elements) and a word of four 7-bit sign indices with the 4-bit scale on top. ----
struct PieceIQ2_XXS : SubBlock32Dot {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 66;
  static constexpr int kDepth1 = 4;
  struct Raw {
    uint32_t q[3];
    unsigned short d;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    Raw raw;
    LoadUnaligned<L, 2>(blk + 2 + 8 * ib, raw.q);
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk));
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int, const GemvParams& p) {
    uint32_t q[2];
    Realign<2>(raw.q, static_cast<uint32_t>((2 * b + 2) & 3), q);  // (66 b + 2 + 8 ib) mod 4
    W w;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint2 g = __ldg(reinterpret_cast<const uint2*>(p.iq2xxs_grid + Byte(q[0], l)));
      w.v[2 * l] = g.x;
      w.v[2 * l + 1] = g.y;
      ApplySigns8(w.v, l, SignsFromIndex((q[1] >> (7 * l)) & 127u));
    }
    w.dl = F16Bits(raw.d) * (0.5f + static_cast<float>(q[1] >> 28)) * 0.25f;
    return w;
  }
};

// Words 0-3 (elements 0..15) and 4-7 (16..31) of a sub-block under scales of their own (IQ2_XS,
// IQ2_S: a 4-bit scale per 16 elements): two dp4a chains.
struct SubBlockHalvesDot : SubBlock32Dot {
  struct W {
    uint32_t v[8];
    float dl[2];  // the scales of elements 0..15 and 16..31
  };
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    const uint32_t xw[8] = {x.a.x, x.a.y, x.a.z, x.a.w, x.b.x, x.b.y, x.b.z, x.b.w};
    int s[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s[i >> 2] = __dp4a(static_cast<int>(w.v[i]), static_cast<int>(xw[i]), s[i >> 2]);
    }
    return x.d * (w.dl[0] * IntToFloat(s[0]) + w.dl[1] * IntToFloat(s[1]));
  }
};

// The IQ2_XS / IQ2_S scale of a 16-element half: d * (0.5 + ls) / 4, ls nibble `half` of `sc`.
__device__ __forceinline__ float HalfScale(float d, uint32_t sc, int half) {
  return d * (0.5f + static_cast<float>((sc >> (4 * half)) & 15u)) * 0.25f;
}

// ---- IQ2_XS: 74-byte blocks {d, qs[32] (uint16: 9-bit grid index, 7-bit sign index), scales[8]}.
// Lane ib: the 4 index words at 2 + 8 ib (one per 8 elements) and scale byte 66 + ib. ----
struct PieceIQ2_XS : SubBlockHalvesDot {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 74;
  static constexpr int kDepth1 = 4;
  struct Raw {
    uint32_t q[3];
    unsigned short d;
    unsigned char sc;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    Raw raw;
    LoadUnaligned<L, 2>(blk + 2 + 8 * ib, raw.q);
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk));
    raw.sc = L::Load(blk + 66 + ib);
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int, const GemvParams& p) {
    uint32_t q[2];
    Realign<2>(raw.q, static_cast<uint32_t>((2 * b + 2) & 3), q);  // (74 b + 2 + 8 ib) mod 4
    W w;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t v = (q[l >> 1] >> (16 * (l & 1))) & 0xFFFFu;
      const uint2 g = __ldg(reinterpret_cast<const uint2*>(p.iq2xs_grid + (v & 511u)));
      w.v[2 * l] = g.x;
      w.v[2 * l + 1] = g.y;
      ApplySigns8(w.v, l, SignsFromIndex(v >> 9));
    }
    const float d = F16Bits(raw.d);
    w.dl[0] = HalfScale(d, raw.sc, 0);
    w.dl[1] = HalfScale(d, raw.sc, 1);
    return w;
  }
};

// ---- IQ2_S: 82-byte blocks {d, qs[32] (low index bytes), signs[32], qh[8] (2 high index bits per
// 8 elements), scales[8]}. Lane ib: qs[4 ib ..] (2 + 4 ib), signs[4 ib ..] (34 + 4 ib), qh[ib],
// scales[ib]. ----
struct PieceIQ2_S : SubBlockHalvesDot {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 82;
  static constexpr int kDepth1 = 2;  // 8 raw registers a step
  struct Raw {
    uint32_t q[2], s[2];
    unsigned short d;
    unsigned char qh, sc;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    Raw raw;
    LoadUnaligned<L, 1>(blk + 2 + 4 * ib, raw.q);
    LoadUnaligned<L, 1>(blk + 34 + 4 * ib, raw.s);
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk));
    raw.qh = L::Load(blk + 66 + ib);
    raw.sc = L::Load(blk + 74 + ib);
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int, const GemvParams& p) {
    const uint32_t off = static_cast<uint32_t>((2 * b + 2) & 3);  // both fields: (82 b + 2) mod 4
    uint32_t q[1], sw[1];
    Realign<1>(raw.q, off, q);
    Realign<1>(raw.s, off, sw);
    W w;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t idx = Byte(q[0], l) | ((static_cast<uint32_t>(raw.qh) >> (2 * l)) & 3u) << 8;
      const uint2 g = __ldg(reinterpret_cast<const uint2*>(p.iq2s_grid + idx));
      w.v[2 * l] = g.x;
      w.v[2 * l + 1] = g.y;
      ApplySigns8(w.v, l, Byte(sw[0], l));
    }
    const float d = F16Bits(raw.d);
    w.dl[0] = HalfScale(d, raw.sc, 0);
    w.dl[1] = HalfScale(d, raw.sc, 1);
    return w;
  }
};

// ---- IQ3_XXS: 98-byte blocks. Lane ib: grid indices qs[8 ib .. 8 ib + 7] (bytes 2 + 8 ib, one per
// 4 elements) and the signs-and-scale word at 66 + 4 ib (IQ2_XXS's word layout). ----
struct PieceIQ3_XXS : SubBlock32Dot {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 98;
  static constexpr int kDepth1 = 4;
  struct Raw {
    uint32_t q[3], s[2];
    unsigned short d;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    Raw raw;
    LoadUnaligned<L, 2>(blk + 2 + 8 * ib, raw.q);
    LoadUnaligned<L, 1>(blk + 66 + 4 * ib, raw.s);
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk));
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int, const GemvParams& p) {
    const uint32_t off = static_cast<uint32_t>((2 * b + 2) & 3);  // both fields: (98 b + 2) mod 4
    uint32_t q[2], sw[1];
    Realign<2>(raw.q, off, q);
    Realign<1>(raw.s, off, sw);
    W w;
#pragma unroll
    for (int i = 0; i < 8; ++i) w.v[i] = __ldg(p.iq3xxs_grid + Byte(q[i >> 2], i & 3));
#pragma unroll
    for (int l = 0; l < 4; ++l) ApplySigns8(w.v, l, SignsFromIndex((sw[0] >> (7 * l)) & 127u));
    w.dl = F16Bits(raw.d) * (0.5f + static_cast<float>(sw[0] >> 28)) * 0.5f;
    return w;
  }
};

// ---- IQ3_S: 110-byte blocks. Lane ib: the low index bytes qs[8 ib ..] (at 2 + 8 ib), the 9th
// index bits qh[ib] (66 + ib), the explicit sign bytes signs[4 ib ..] (74 + 4 ib) and the 4-bit
// scale, nibble ib % 2 of byte 106 + ib / 2. ----
struct PieceIQ3_S : SubBlock32Dot {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 110;
  static constexpr int kDepth1 = 2;  // 9 raw registers a step
  struct Raw {
    uint32_t q[3], s[2];
    unsigned short d;
    unsigned char qh, scale;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    Raw raw;
    LoadUnaligned<L, 2>(blk + 2 + 8 * ib, raw.q);
    LoadUnaligned<L, 1>(blk + 74 + 4 * ib, raw.s);
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk));
    raw.qh = L::Load(blk + 66 + ib);
    raw.scale = L::Load(blk + 106 + (ib >> 1));
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int ib,
                                             const GemvParams& p) {
    const uint32_t off = static_cast<uint32_t>((2 * b + 2) & 3);  // both fields: (110 b + 2) mod 4
    uint32_t q[2], sw[1];
    Realign<2>(raw.q, off, q);
    Realign<1>(raw.s, off, sw);
    W w;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t idx = Byte(q[i >> 2], i & 3) | ((static_cast<uint32_t>(raw.qh) >> i) & 1u)
                                                        << 8;
      w.v[i] = __ldg(p.iq3s_grid + idx);
    }
#pragma unroll
    for (int l = 0; l < 4; ++l) ApplySigns8(w.v, l, Byte(sw[0], l));
    const uint32_t ls = (static_cast<uint32_t>(raw.scale) >> (4 * (ib & 1))) & 15u;
    w.dl = F16Bits(raw.d) * static_cast<float>(1 + 2 * ls);
    return w;
  }
};

// The activations of the K-quant pieces below: lane c's 8 positions 8 (c % 4) .. +7 in each of
// the four 32-element groups k of half c / 4, their scales and (kSums) their integer sums.
template <bool kSums>
struct KQuartersX {
  uint2 q[4];
  float d[4];
  int sum[kSums ? 4 : 1];
  static __device__ __forceinline__ KQuartersX Load(const GemvParams& p, int r, int64_t b, int c) {
    const int h = c >> 2;
    const int8_t* xq = p.xq + r * p.in + b * 256 + 128 * h + 8 * (c & 3);
    const float2* xd = p.xd + r * (p.in / 32) + b * 8 + 4 * h;
    return LoadAt(xq, xd);
  }
  // Where lane c's activations and scales start within the block's (the pointer-addressed loops).
  static __device__ __forceinline__ int XAt(int c) { return 128 * (c >> 2) + 8 * (c & 3); }
  static __device__ __forceinline__ int DAt(int c) { return 4 * (c >> 2); }
  static __device__ __forceinline__ KQuartersX LoadAt(const int8_t* xq, const float2* xd) {
    KQuartersX x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x.q[k] = __ldg(reinterpret_cast<const uint2*>(xq + 32 * k));
      x.d[k] = __ldg(&xd[k].x);
      if constexpr (kSums) {
        const int ones = 0x01010101;
        x.sum[k] =
            __dp4a(ones, static_cast<int>(x.q[k].y), __dp4a(ones, static_cast<int>(x.q[k].x), 0));
      }
    }
    return x;
  }
};

// The activation side of the pieces whose lanes take KQuartersX's positions (Q2_K, Q3_K, and
// Q6_K's 8-lane piece, gemv_q8x_piece_q6k8.cuh).
template <bool kSums>
struct KQuartersPiece {
  using X = KQuartersX<kSums>;
  static __device__ __forceinline__ X LoadX(const GemvParams& p, int r, int64_t b, int c) {
    return X::Load(p, r, b, c);
  }
  static __device__ __forceinline__ int XAt(int c) { return X::XAt(c); }
  static __device__ __forceinline__ int DAt(int c) { return X::DAt(c); }
  static __device__ __forceinline__ X LoadXAt(const int8_t* xq, const float2* xd) {
    return X::LoadAt(xq, xd);
  }
};

// A KQuartersPiece whose decoded lane holds its 32 values as signed bytes - quarter k's positions
// 0..3 in q[2k], 4..7 in q[2k + 1] - and one float scale per quarter (Q3_K, Q6_K's 8-lane piece).
struct KQuartersScaledDot : KQuartersPiece<false> {
  struct W {
    uint32_t q[8];  // signed values as bytes
    float dsc[4];   // d * scale of quarter k's sub-block
  };
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int s = __dp4a(static_cast<int>(w.q[2 * k + 1]), static_cast<int>(x.q[k].y),
                           __dp4a(static_cast<int>(w.q[2 * k]), static_cast<int>(x.q[k].x), 0));
      v += (w.dsc[k] * x.d[k]) * IntToFloat(s);
    }
    return v;
  }
};

// ---- Q2_K: 84-byte blocks (4-byte aligned). Element 128 h + 32 k + l is bits 2k..2k+1 of
// qs[32 h + l] (bytes 16..79); its 16-element sub-block 8 h + 2 k + l / 16 has scale byte
// scales[8 h + 2 k + l / 16] (low nibble scale, high nibble min; bytes 0..15); d and dmin at 80.
// The min term needs the activations' sums over the lane's 8 positions (KQuartersX<true>). ----
struct PieceQ2_K : KQuartersPiece<true> {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 84;
  static constexpr int kDepth1 = 4;
  struct W {
    uint32_t q[8];  // 2-bit values as bytes: group k's positions 0..3 in q[2k], 4..7 in q[2k+1]
    uint32_t sc;    // byte k: the scale byte of group k's sub-block
    float d, dmin;
  };
  struct Raw {
    uint32_t qs[2], sc[2], dd;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const int h = c >> 2;
    const unsigned* qs = reinterpret_cast<const unsigned*>(blk + 16 + 32 * h + 8 * (c & 3));
    const unsigned* sc = reinterpret_cast<const unsigned*>(blk + 8 * h);
    return Raw{{L::Load(qs), L::Load(qs + 1)},
               {L::Load(sc), L::Load(sc + 1)},
               L::Load(reinterpret_cast<const unsigned*>(blk + 80))};
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t, int c, const GemvParams&) {
    W w;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w.q[2 * k] = (raw.qs[0] >> (2 * k)) & 0x03030303u;
      w.q[2 * k + 1] = (raw.qs[1] >> (2 * k)) & 0x03030303u;
    }
    // Scale bytes 2k + (positions >= 16) of the half's 8, k = 0..3.
    w.sc =
        __byte_perm(raw.sc[0], raw.sc[1], 0x6420u + 0x1111u * static_cast<uint32_t>((c & 3) >> 1));
    w.d = F16Bits(raw.dd);
    w.dmin = F16Bits(raw.dd >> 16);
    return w;
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    float scaled = 0.f, mins = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int s = __dp4a(static_cast<int>(w.q[2 * k + 1]), static_cast<int>(x.q[k].y),
                           __dp4a(static_cast<int>(w.q[2 * k]), static_cast<int>(x.q[k].x), 0));
      const int sc = static_cast<int>(Byte(w.sc, k));
      scaled += x.d[k] * IntToFloat((sc & 15) * s);
      mins += x.d[k] * IntToFloat((sc >> 4) * x.sum[k]);
    }
    return w.d * scaled - w.dmin * mins;
  }
};

// ---- Q3_K: 110-byte blocks (2-byte aligned). Element 128 h + 32 k + l: low bits as Q2_K's from
// qs[32 h + l] (bytes 32..95), high bit 4 h + k of hmask[l] (bytes 0..31; set means no -4), a
// signed 6-bit scale per 16-element sub-block packed in bytes 96..107, d at 108. ----
struct PieceQ3_K : KQuartersScaledDot {  // W: signed 3-bit values as bytes, Q2_K's positions
  static constexpr int kLanes = 8, kElems = 256, kBytes = 110;
  static constexpr int kDepth1 = 2;  // 12 raw registers a step
  struct Raw {
    uint32_t hm[3], qs[3], lo[3], hi[2];
    unsigned short d;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const int h = c >> 2, j = c & 3;
    Raw raw;
    LoadUnaligned<L, 2>(blk + 8 * j, raw.hm);
    LoadUnaligned<L, 2>(blk + 32 + 32 * h + 8 * j, raw.qs);
    LoadUnaligned<L, 2>(blk + 96, raw.lo);   // scale bytes 0..7: the low 4 bits
    LoadUnaligned<L, 1>(blk + 104, raw.hi);  // scale bytes 8..11: the high 2 bits
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk + 108));
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int c, const GemvParams&) {
    const int h = c >> 2, half = (c & 3) >> 1;
    const uint32_t off = static_cast<uint32_t>((2 * b) & 3);  // every field: (110 b) mod 4
    uint32_t hm[2], qs[2], lo[2], hi[1];
    Realign<2>(raw.hm, off, hm);
    Realign<2>(raw.qs, off, qs);
    Realign<2>(raw.lo, off, lo);
    Realign<1>(raw.hi, off, hi);
    const float d = F16Bits(raw.d);
    W w;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const uint32_t v = ((qs[t] >> (2 * k)) & 0x03030303u) |
                           (((hm[t] >> (4 * h + k)) & 0x01010101u) << 2);  // 0..7
        w.q[2 * k + t] = __vsub4(v, 0x04040404u);
      }
      // Sub-block s = 8 h + 2 k + half: low 4 bits in nibble h of scale byte 2k + half, high 2
      // bits at 2 (s / 4) of byte 8 + s % 4.
      const int s = 8 * h + 2 * k + half;
      const uint32_t low4 = (Byte(lo[k >> 1], ((2 * k) & 3) + half) >> (4 * h)) & 15u;
      const uint32_t high2 = (Byte(hi[0], s & 3) >> (2 * (s >> 2))) & 3u;
      w.dsc[k] = d * static_cast<float>(static_cast<int>(low4 | high2 << 4) - 32);
    }
    return w;
  }
};

// The pieces above (the grouped GEMV gives them IQ4_XS's row-looping exact-rows form).
template <class P>
inline constexpr bool kLowBitPiece = false;
template <>
inline constexpr bool kLowBitPiece<PieceIQ2_XXS> = true;
template <>
inline constexpr bool kLowBitPiece<PieceIQ2_XS> = true;
template <>
inline constexpr bool kLowBitPiece<PieceIQ2_S> = true;
template <>
inline constexpr bool kLowBitPiece<PieceIQ3_XXS> = true;
template <>
inline constexpr bool kLowBitPiece<PieceIQ3_S> = true;
template <>
inline constexpr bool kLowBitPiece<PieceQ2_K> = true;
template <>
inline constexpr bool kLowBitPiece<PieceQ3_K> = true;

#include "kernels/matmul/gemv_q8x_piece_q6k8.cuh"  // PieceQ6_K8, Q6KPiece

// launch(P{}) for every type with an int8-activation piece: WithQ8xPiece's and the ones above,
// Q6_K through Q6KPiece (the streamed GEMV names Q6KPiece itself).
template <class Launch>
cudaError_t WithQ8xPieceAll(GgmlType type, Launch launch) {
  switch (type) {
    case GgmlType::kIQ2_XXS:
      return launch(PieceIQ2_XXS{});
    case GgmlType::kIQ2_XS:
      return launch(PieceIQ2_XS{});
    case GgmlType::kIQ2_S:
      return launch(PieceIQ2_S{});
    case GgmlType::kIQ3_XXS:
      return launch(PieceIQ3_XXS{});
    case GgmlType::kIQ3_S:
      return launch(PieceIQ3_S{});
    case GgmlType::kQ2_K:
      return launch(PieceQ2_K{});
    case GgmlType::kQ3_K:
      return launch(PieceQ3_K{});
    case GgmlType::kQ6_K:
      return launch(Q6KPiece{});  // PieceQ6_K unless STEPSERVE_Q6K_EIGHT_LANES
    default:
      return WithQ8xPiece(type, launch);
  }
}

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECES_LOW_BIT_CUH_
