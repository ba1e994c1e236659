// Per-type block decoders of the int8-activation GEMV (gemv_q8x_cuda.cu), device code only.
// Each Piece maps a warp's lanes onto pieces of consecutive blocks of one weight row:
//   kLanes lanes per block, kElems elements and kBytes bytes per block, kDepth1 the ring depth
//   with one activation row;
//   Raw LoadRaw<L>(block, lane_piece)     the lane's raw words (loads only, issued ahead) through
//                                         L: StreamLoad from global memory (evict-first), or
//                                         PlainLoad from a shared-memory copy of the rows;
//   W Decode(raw, block_index, piece, p)   int8-ready weights and scales;
//   X LoadX(p, activation_row, block, piece) the matching int8 activations and their scales;
//   int XAt(piece), int DAt(piece)         where the lane's activations and scales start within
//                                          its block's (the pointer-addressed loops of
//                                          gemv_q8x_rows.cuh keep per-row pointers themselves);
//   X LoadXAt(xq, xd)                      LoadX's loads from such pointers;
//   float Dot(w, x, piece)                 the lane's partial dot product.
// Included inside the anonymous namespace of the GEMV / GEMM .cu files of kernels/matmul that
// use them (gemv_q8x*, gemv_stream, gemv_mma, gemm_grouped_*, moe_decode). The
// decoders take a block's alignment phase from its address or index within a 16-byte-aligned row,
// so a shared-memory copy of whole rows at 16-byte-aligned offsets decodes the same way.
#ifndef STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECES_CUH_
#define STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECES_CUH_

// Weight loads from global memory: each byte is read once, so evict-first (__ldcs).
struct StreamLoad {
  template <class T>
  static __device__ __forceinline__ T Load(const T* p) {
    return __ldcs(p);
  }
};
// Weight loads from rows already copied into shared memory.
struct PlainLoad {
  template <class T>
  static __device__ __forceinline__ T Load(const T* p) {
    return *p;
  }
};

__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// ---- Q8_0: 34-byte blocks, 2 lanes per block (16 int8 each), 16 blocks per warp step. ----
struct PieceQ8_0 {
  static constexpr int kLanes = 2, kElems = 32, kBytes = 34;
  static constexpr int kDepth1 = 4;  // pipeline depth with one activation row
  struct W {
    uint32_t q[4];
    float d;
  };
  struct X {
    uint4 q;
    float d;
  };
  struct Raw {
    uint32_t v[5];  // aligned words holding the 16 bytes (v[4] unused when aligned)
    unsigned short d;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    Raw raw;
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk));
    // 16 bytes at a 2-byte-aligned address: five aligned words (four when aligned), never a word
    // without a wanted byte (rows are padded to 16 bytes, so the last one stays in the row).
    const uintptr_t a = reinterpret_cast<uintptr_t>(blk + 2 + 16 * c);
    const uint32_t off = static_cast<uint32_t>(a & 3u);
    const unsigned* word = reinterpret_cast<const unsigned*>(a - off);
#pragma unroll
    for (int i = 0; i < 4; ++i) raw.v[i] = L::Load(word + i);
    raw.v[4] = off ? L::Load(word + 4) : 0u;
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int, const GemvParams&) {
    W w;
    w.d = F16Bits(raw.d);
    const uint32_t off = static_cast<uint32_t>((2 * b + 2) & 3);  // (34 b + 2 + 16 c) mod 4
#pragma unroll
    for (int i = 0; i < 4; ++i) w.q[i] = __funnelshift_r(raw.v[i], raw.v[i + 1], 8 * off);
    return w;
  }
  static __device__ __forceinline__ X LoadX(const GemvParams& p, int r, int64_t b, int c) {
    X x;
    x.q = __ldg(reinterpret_cast<const uint4*>(p.xq + r * p.in + b * 32 + 16 * c));
    x.d = __ldg(&p.xd[r * (p.in / 32) + b].x);
    return x;
  }
  static __device__ __forceinline__ int XAt(int c) { return 16 * c; }
  static __device__ __forceinline__ int DAt(int) { return 0; }
  static __device__ __forceinline__ X LoadXAt(const int8_t* xq, const float2* xd) {
    X x;
    x.q = __ldg(reinterpret_cast<const uint4*>(xq));
    x.d = __ldg(&xd->x);
    return x;
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    int s = __dp4a(static_cast<int>(w.q[0]), static_cast<int>(x.q.x), 0);
    s = __dp4a(static_cast<int>(w.q[1]), static_cast<int>(x.q.y), s);
    s = __dp4a(static_cast<int>(w.q[2]), static_cast<int>(x.q.z), s);
    s = __dp4a(static_cast<int>(w.q[3]), static_cast<int>(x.q.w), s);
    return (w.d * x.d) * IntToFloat(s);
  }
};

// ---- Q4_K: 144-byte blocks (16-byte aligned), 8 lanes per block, 4 blocks per warp step. ----
// Lane c holds 16-byte piece c of qs: 16 elements of sub-block 2*(c/2) (low nibbles) and the same
// 16 positions of sub-block 2*(c/2)+1 (high nibbles). The min term uses the quantized sum of each
// sub-block's activations; only even lanes add it so each sub-block counts once.

struct PieceQ4_K {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 144;
  static constexpr int kDepth1 = 4;  // pipeline depth with one activation row
  struct W {
    uint32_t lo[4], hi[4];  // nibbles as bytes: sub-block 2*pair, then 2*pair+1
    float dl0, dl1, ml0, ml1;
  };
  struct X {
    uint4 lo, hi;
    float4 ds;  // {d, s} of sub-block 2*pair, then of 2*pair+1
  };
  struct Raw {
    uint4 h, q;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const uint4* p = reinterpret_cast<const uint4*>(blk);
    return Raw{L::Load(p), L::Load(p + 1 + c)};
  }
  // The scale and min terms of the lane's two sub-blocks (shared with Q5_K's header layout):
  // ScaleMinK4's values for sub-blocks j0 = 2 * pair and j0 + 1 gathered by byte permutes whose
  // selectors depend only on the lane, with no branch: scale byte k is byte k of h.y, h.z, h.w.
  // With q = j0 % 4 and P = the bytes {b[q], b[q + 1], b[q + 4], b[q + 5]} of h.y / h.z:
  //   pairs 0-1 (j < 4): {sc0, sc1, m0, m1} = P & 63 (b[j], b[j + 4]);
  //   pairs 2-3: the low 4 bits from A = {b[j + 4], b[j + 5]} of h.w (low nibbles the scales,
  //   high nibbles the mins) and the high 2 bits from the top bits of P (b[j - 4], b[j]).
  // Each byte then becomes a float exactly through the mantissa of 2^23 (0x4B000000 + v - 2^23),
  // so every product, and the kernels' bits, are those of ScaleMinK4's form. Why: in SASS
  // (scripts/sass.py) the one-row Q4_K GEMV's loop was 591 instructions per 4 steps against 400
  // for IQ4_XS's, which also decodes a 16-entry table; ScaleMinK4's branch on j < 4 splits each
  // 8-lane group (pairs 0-1 against 2-3) and its byte selects run every step.
  static __device__ __forceinline__ void SetScales(uint4 h, int c, W* w) {
    const uint32_t q = 2u * ((static_cast<uint32_t>(c) >> 1) & 1u);
    const uint32_t sel = q | (q + 1) << 4 | (q + 4) << 8 | (q + 5) << 12;
    const uint32_t gathered = __byte_perm(h.y, h.z, sel);
    const uint32_t a = __byte_perm(h.w, 0u, q | (q + 1) << 4 | q << 8 | (q + 1) << 12);
    const uint32_t packed = (c >> 2) == 0 ? gathered & 0x3F3F3F3Fu
                                          : (a & 0x00000F0Fu) | ((a >> 4) & 0x0F0F0000u) |
                                                ((gathered >> 2) & 0x30303030u);
    const auto byte_float = [packed](uint32_t k) {
      return __int_as_float(static_cast<int>(__byte_perm(packed, 0x4B000000u, 0x7440u | k))) -
             8388608.0f;
    };
    const float d = F16Bits(h.x), dmin = (c & 1) ? 0.f : F16Bits(h.x >> 16);
    w->dl0 = d * byte_float(0);
    w->dl1 = d * byte_float(1);
    w->ml0 = dmin * byte_float(2);
    w->ml1 = dmin * byte_float(3);
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t, int c, const GemvParams&) {
    const uint4 h = raw.h, q4 = raw.q;
    const uint32_t q[4] = {q4.x, q4.y, q4.z, q4.w};
    W w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w.lo[i] = q[i] & 0x0F0F0F0Fu;
      w.hi[i] = (q[i] >> 4) & 0x0F0F0F0Fu;
    }
    SetScales(h, c, &w);
    return w;
  }
  static __device__ __forceinline__ X LoadX(const GemvParams& p, int r, int64_t b, int c) {
    const int pair = c >> 1;
    const int8_t* xq = p.xq + r * p.in + b * 256 + 64 * pair + 16 * (c & 1);
    X x;
    x.lo = __ldg(reinterpret_cast<const uint4*>(xq));
    x.hi = __ldg(reinterpret_cast<const uint4*>(xq + 32));
    x.ds = __ldg(reinterpret_cast<const float4*>(p.xd + r * (p.in / 32) + b * 8 + 2 * pair));
    return x;
  }
  static __device__ __forceinline__ int XAt(int c) { return 64 * (c >> 1) + 16 * (c & 1); }
  static __device__ __forceinline__ int DAt(int c) { return 2 * (c >> 1); }
  static __device__ __forceinline__ X LoadXAt(const int8_t* xq, const float2* xd) {
    X x;
    x.lo = __ldg(reinterpret_cast<const uint4*>(xq));
    x.hi = __ldg(reinterpret_cast<const uint4*>(xq + 32));
    x.ds = __ldg(reinterpret_cast<const float4*>(xd));
    return x;
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    const uint32_t xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w};
    const uint32_t xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s0 = __dp4a(static_cast<int>(w.lo[i]), static_cast<int>(xl[i]), s0);
      s1 = __dp4a(static_cast<int>(w.hi[i]), static_cast<int>(xh[i]), s1);
    }
    // Odd lanes carry ml0 = ml1 = 0: each sub-block's min term counts once.
    return (w.dl0 * x.ds.x) * IntToFloat(s0) + (w.dl1 * x.ds.z) * IntToFloat(s1) -
           (w.ml0 * x.ds.y + w.ml1 * x.ds.w);
  }
};

// ---- Q5_K: 176-byte blocks (16-byte aligned), the Q4_K layout plus one high bit per element. ----
// Bytes 0..15 hold d, dmin and the same 12 scale/min bytes as Q4_K, 16..47 the high bits qh[32],
// 48..175 the nibbles. Lane c takes qs piece c exactly as in Q4_K; the high bits of its 16
// positions l = 16 (c & 1) + i are bit 2*pair (low nibbles) and 2*pair+1 (high nibbles) of qh[l].
// Elements 0..31 as bytes dot with the int8 activations the same way; X, LoadX and Dot are Q4_K's.
struct PieceQ5_K : PieceQ4_K {
  static constexpr int kBytes = 176;
  static constexpr int kDepth1 = 2;  // 12 raw registers a step (Q4_K: 8) under the 64-register cap
  struct Raw {
    uint4 h, qh, q;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const uint4* p = reinterpret_cast<const uint4*>(blk);
    return Raw{L::Load(p), L::Load(p + 1 + (c & 1)), L::Load(p + 3 + c)};
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t, int c, const GemvParams&) {
    const uint4 h = raw.h, q4 = raw.q, h4 = raw.qh;
    const uint32_t q[4] = {q4.x, q4.y, q4.z, q4.w};
    const uint32_t qh[4] = {h4.x, h4.y, h4.z, h4.w};
    const int pair = c >> 1;
    W w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w.lo[i] = (q[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * pair)) & 0x01010101u) << 4);
      w.hi[i] = ((q[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * pair + 1)) & 0x01010101u) << 4);
    }
    SetScales(h, c, &w);
    return w;
  }
};

// ---- IQ4_XS: 136-byte blocks (8-byte aligned), 8 lanes per block (one 32-element sub-block
// each), 4 blocks per warp step. ----
// prmt.b32 in its generic mode with all four bits of each selector nibble: the low three pick one
// of the 8 bytes {b, a}, the fourth replicates that byte's sign bit over the result byte (PTX ISA,
// prmt). Inline PTX because the CUDA doc of __byte_perm defines only the low three bits, so
// __byte_perm(a, b, s) costs an extra AND of s with 0x7777 wherever the compiler cannot prove
// those bits clear; a selector whose bit 3 is known clear makes this the plain byte select.
__device__ __forceinline__ uint32_t PrmtSignMode(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Maps the 8 nibbles of `q` through the 16-entry int8 table `t` (entry k = byte k%4 of t[k/4]),
// keeping their order in q: .x = {T(low nibble of byte 0), T(high of byte 0), T(low of byte 1),
// T(high of byte 1)}, .y the same for bytes 2 and 3. Without a de-interleave this is 11
// instructions per 8 weights; the activations are stored in the matching (pair) order instead
// (Q8ScratchPosition). prmt reads the low 16 bits of its selector (4 nibbles); every selector
// here has bit 3 of each nibble clear, so PrmtSignMode is a plain select: with __byte_perm the
// compiler masked the first pick selector again (session 43, SASS of GemvMmaIq4XsKernel).
__device__ __forceinline__ uint2 Lookup16Pairs(uint32_t q, const uint32_t (&t)[4]) {
  const uint32_t sel = q & 0x77777777u;  // entry within the half-table, per nibble
  // Result byte n comes from the high half-table (selector n + 4) where bit 3 of nibble n is set.
  const uint32_t pick = ((q >> 1) & 0x44444444u) | 0x32103210u;
  const uint32_t lo0 = PrmtSignMode(t[0], t[1], sel), hi0 = PrmtSignMode(t[2], t[3], sel);
  const uint32_t sel1 = sel >> 16, pick1 = pick >> 16;
  const uint32_t lo1 = PrmtSignMode(t[0], t[1], sel1), hi1 = PrmtSignMode(t[2], t[3], sel1);
  return make_uint2(PrmtSignMode(lo0, hi0, pick), PrmtSignMode(lo1, hi1, pick1));
}

// A lane's 32-element sub-block dotted with its 32 int8 activations: W holds the sub-block's 32
// int8 weights as 8 words (word i = elements 4i..4i+3 in the activations' order) and its scale;
// X the matching activations, loaded as two 16-byte words, and their scale. The base of the
// pieces with one 32-element sub-block per lane (IQ4_XS and the i-quant grids,
// gemv_q8x_pieces_low_bit.cuh).
struct SubBlock32Dot {
  struct W {
    uint32_t v[8];  // int8 weights, word i = elements 4i..4i+3 of the activation block
    float dl;
  };
  struct X {
    uint4 a, b;  // the 32 int8 activations of the sub-block
    float d;
  };
  // The 32 int8 activations at xq and their block's scale at xd (the pointer-addressed loops of
  // gemv_q8x_rows.cuh keep these addresses themselves).
  static __device__ __forceinline__ int XAt(int c) { return 32 * c; }
  static __device__ __forceinline__ int DAt(int c) { return c; }
  static __device__ __forceinline__ X LoadXAt(const int8_t* xq, const float2* xd) {
    X x;
    x.a = __ldg(reinterpret_cast<const uint4*>(xq));
    x.b = __ldg(reinterpret_cast<const uint4*>(xq + 16));
    x.d = __ldg(&xd->x);
    return x;
  }
  // (Not written through LoadXAt: that changed the measured kernels' SASS - the grouped GEMV's
  // down form gained two spill instructions.)
  static __device__ __forceinline__ X LoadX(const GemvParams& p, int r, int64_t b, int ib) {
    const int8_t* xq = p.xq + r * p.in + b * 256 + 32 * ib;
    X x;
    x.a = __ldg(reinterpret_cast<const uint4*>(xq));
    x.b = __ldg(reinterpret_cast<const uint4*>(xq + 16));
    x.d = __ldg(&p.xd[r * (p.in / 32) + b * 8 + ib].x);
    return x;
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    const uint32_t xw[8] = {x.a.x, x.a.y, x.a.z, x.a.w, x.b.x, x.b.y, x.b.z, x.b.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) s = __dp4a(static_cast<int>(w.v[i]), static_cast<int>(xw[i]), s);
    return (w.dl * x.d) * IntToFloat(s);
  }
};

// Word i of a sub-block's qs holds elements 4i..4i+3 (low nibbles) and 16+4i..16+4i+3 (high), so
// Lookup16Pairs yields elements {4i, 16+4i, 4i+1, 17+4i} and {4i+2, 18+4i, 4i+3, 19+4i}: words
// 2i and 2i+1 of the activation block in pair order.
struct PieceIQ4_XS : SubBlock32Dot {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 136;
  static constexpr int kDepth1 = 4;  // pipeline depth with one activation row
  struct Raw {
    uint2 h, qa, qb;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    return Raw{L::Load(reinterpret_cast<const uint2*>(blk)),
               L::Load(reinterpret_cast<const uint2*>(blk + 8 + 16 * ib)),
               L::Load(reinterpret_cast<const uint2*>(blk + 16 + 16 * ib))};
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t, int ib, const GemvParams& p) {
    const uint2 h = raw.h, qa = raw.qa, qb = raw.qb;
    const uint32_t ls = Iq4XsSubScale(h, ib);
    W w;
    w.dl = F16Bits(h.x) * static_cast<float>(static_cast<int>(ls) - 32);
    const uint32_t t[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
    const uint32_t q[4] = {qa.x, qa.y, qb.x, qb.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint2 v = Lookup16Pairs(q[i], t);
      w.v[2 * i] = v.x;
      w.v[2 * i + 1] = v.y;
    }
    return w;
  }
};

// IQ4_XS for one activation row: the 16-entry lookup as two 8-entry ones whose sum is the table
// value, so the select step of Lookup16Pairs goes (7 instead of 11 instructions per 8 weights) at
// the price of a second dp4a per 4 weights - a win only while a decoded block meets one
// activation row. With nibble n as the selector, lo = T[n] for n < 8 and, through the sign mode,
// -1 for n >= 8 (T[0..7] are all negative); with n ^ 8, hi = T[n] + 1 for n >= 8 and 0 for n < 8
// (the table T[8..15] + 1 = 2..114 is positive). lo + hi = T[n] either way, so each sub-block's
// integer dot - and every result - is bit for bit the one of PieceIQ4_XS. The lookups run in Dot,
// next to their dp4a, so a decoded block holds its 4 raw words instead of 16 table words (the
// gate/up kernel decodes two rows at a time under a 64-register cap).
struct PieceIQ4_XSOneRow : PieceIQ4_XS {
  struct W {
    uint32_t q[4];                  // the sub-block's qs words
    uint32_t lo_tab[2], hi_tab[2];  // T[0..7]; T[8..15] + 1
    float dl;
  };
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t, int ib, const GemvParams& p) {
    const uint2 h = raw.h, qa = raw.qa, qb = raw.qb;
    const uint32_t ls = Iq4XsSubScale(h, ib);
    return W{{qa.x, qa.y, qb.x, qb.y},
             {p.iq4nl[0], p.iq4nl[1]},
             {p.iq4nl[2] + 0x01010101u, p.iq4nl[3] + 0x01010101u},
             F16Bits(h.x) * static_cast<float>(static_cast<int>(ls) - 32)};
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    const uint32_t xw[8] = {x.a.x, x.a.y, x.a.z, x.a.w, x.b.x, x.b.y, x.b.z, x.b.w};
    int s_lo = 0, s_hi = 0;  // two chains of 8 dp4a, as long as PieceIQ4_XS::Dot's one
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Words 2i, 2i + 1 of the pair order: the low and high 16 bits' nibbles of q[i].
      const uint32_t flipped = w.q[i] ^ 0x88888888u;
      const uint32_t sel[2] = {w.q[i], w.q[i] >> 16}, sel_hi[2] = {flipped, flipped >> 16};
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int xi = static_cast<int>(xw[2 * i + half]);
        s_lo =
            __dp4a(static_cast<int>(PrmtSignMode(w.lo_tab[0], w.lo_tab[1], sel[half])), xi, s_lo);
        s_hi = __dp4a(static_cast<int>(PrmtSignMode(w.hi_tab[0], w.hi_tab[1], sel_hi[half])), xi,
                      s_hi);
      }
    }
    return (w.dl * x.d) * IntToFloat(s_lo + s_hi);
  }
};

// The piece for a decoded block that meets one activation row: PieceIQ4_XSOneRow for IQ4_XS, the
// type's own piece otherwise. Measured on the H200 (45 layers IQ4_XS, ms per step at 1 / 2 / 4 /
// 8 / 16 streams, two runs each, bench/gpu/results-h200-v15.txt call 2): 5.165-5.179 / 7.01-7.04 /
// 10.12-10.22 / 15.94-15.99 / 23.94-24.04 with PieceIQ4_XS, 4.874-4.889 / 6.78-6.79 / 9.82-9.84 /
// 15.16-15.18 / 22.84-22.91 with it (the one-row GEMV, the few-token MoE kernels and the grouped
// GEMV's one-pair chunks).
template <class P>
struct OneRowPieceOf {
  using type = P;
};
template <>
struct OneRowPieceOf<PieceIQ4_XS> {
  using type = PieceIQ4_XSOneRow;
};
template <class P>
using OneRowPiece = typename OneRowPieceOf<P>::type;

// ---- Q6_K: 210-byte blocks (2-byte aligned), 16 lanes per block, 2 blocks per warp step. ----
// Lane c takes half h = c / 8 and positions l0 = 4*(c%8) .. +3 of all four 32-element quarters k
// of that half (16 elements); each quarter is its own 32-activation quantization block.
struct PieceQ6_K {
  static constexpr int kLanes = 16, kElems = 256, kBytes = 210;
  static constexpr int kDepth1 = 2;  // pipeline depth with one activation row
  struct W {
    uint32_t v[4];  // signed bytes q - 32 of quarter k, positions l0..l0+3
    float dsc[4];   // d * scale of quarter k
  };
  struct X {
    uint32_t q[4];
    float d[4];
  };
  struct Raw {
    uint32_t w[10];  // aligned word pairs around ql0, ql1, qh, scales 0-3, scales 4-7 of the half
    unsigned short d;
  };
  template <class L = StreamLoad>
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const int h = c >> 3, l0 = 4 * (c & 7);
    // Every piece sits at the block's own 2-byte phase (all offsets are multiples of 4), so one
    // `off` serves all five: two aligned words each (the second only when unaligned).
    const uint32_t off = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(blk) & 3u);
    const int at[5] = {64 * h + l0, 64 * h + 32 + l0, 128 + 32 * h + l0, 192 + 8 * h, 196 + 8 * h};
    Raw raw;
#pragma unroll
    for (int i = 0; i < 5; ++i) {
      const unsigned* word = reinterpret_cast<const unsigned*>(blk + at[i] - off);
      raw.w[2 * i] = L::Load(word);
      raw.w[2 * i + 1] = off ? L::Load(word + 1) : 0u;
    }
    raw.d = L::Load(reinterpret_cast<const unsigned short*>(blk + 208));
    return raw;
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t b, int c, const GemvParams&) {
    const int sel = (4 * (c & 7)) >= 16 ? 1 : 0;
    const uint32_t off = static_cast<uint32_t>((2 * b) & 3);  // 210 b mod 4 (rows 16-aligned)
    uint32_t v[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) v[i] = __funnelshift_r(raw.w[2 * i], raw.w[2 * i + 1], 8 * off);
    const uint32_t ql0 = v[0], ql1 = v[1], qh = v[2], s03 = v[3], s47 = v[4];
    const float d = F16Bits(raw.d);
    W w;
    // 6-bit values 0..63 per byte, then - 32 per byte (no borrow: every byte is >= 0 before).
    w.v[0] = __vsub4((ql0 & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u), 0x20202020u);
    w.v[1] = __vsub4((ql1 & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u), 0x20202020u);
    w.v[2] = __vsub4(((ql0 >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u), 0x20202020u);
    w.v[3] = __vsub4(((ql1 >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u), 0x20202020u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int sb = sel + 2 * k;  // scale byte within the 8 of this half
      const uint32_t sbyte = sb < 4 ? Byte(s03, sb & 3) : Byte(s47, sb & 3);
      w.dsc[k] = d * static_cast<float>(static_cast<int8_t>(sbyte));
    }
    return w;
  }
  static __device__ __forceinline__ X LoadX(const GemvParams& p, int r, int64_t b, int c) {
    const int h = c >> 3, l0 = 4 * (c & 7);
    const int8_t* xq = p.xq + r * p.in + b * 256 + 128 * h + l0;
    const float2* xd = p.xd + r * (p.in / 32) + b * 8 + 4 * h;
    X x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x.q[k] = __ldg(reinterpret_cast<const unsigned*>(xq + 32 * k));
      x.d[k] = __ldg(&xd[k].x);
    }
    return x;
  }
  static __device__ __forceinline__ int XAt(int c) { return 128 * (c >> 3) + 4 * (c & 7); }
  static __device__ __forceinline__ int DAt(int c) { return 4 * (c >> 3); }
  static __device__ __forceinline__ X LoadXAt(const int8_t* xq, const float2* xd) {
    X x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x.q[k] = __ldg(reinterpret_cast<const unsigned*>(xq + 32 * k));
      x.d[k] = __ldg(&xd[k].x);
    }
    return x;
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v += (w.dsc[k] * x.d[k]) *
           IntToFloat(__dp4a(static_cast<int>(w.v[k]), static_cast<int>(x.q[k]), 0));
    }
    return v;
  }
};

// launch(P{}) for the int8-activation GEMV's piece of `type`; cudaErrorInvalidValue for a type
// without one. Q6_K is not here: WithQ8xPieceAll (gemv_q8x_pieces_low_bit.cuh, every launcher's
// dispatch) takes it first through Q6KPiece, and a case here would only instantiate every kernel
// once more for the piece not in use.
template <class Launch>
cudaError_t WithQ8xPiece(GgmlType type, Launch launch) {
  switch (type) {
    case GgmlType::kQ8_0:
      return launch(PieceQ8_0{});
    case GgmlType::kQ4_K:
      return launch(PieceQ4_K{});
    case GgmlType::kQ5_K:
      return launch(PieceQ5_K{});
    case GgmlType::kIQ4_XS:
      return launch(PieceIQ4_XS{});
    default:
      return cudaErrorInvalidValue;
  }
}

#endif  // STEPSERVE_KERNELS_MATMUL_GEMV_Q8X_PIECES_CUH_
