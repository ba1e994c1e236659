// Int8-activation GEMV (GemvCudaActivations::kQ8, see matmul_cuda.h) and the activation quantizer.
//
// Why this shape: a decode GEMV must stream every weight byte from HBM once, and at 4 TB/s an
// IQ4_XS/Q4_K weight (~0.55 byte) arrives every ~0.14 ns per SM-cycle budget, so the per-weight
// work on the SM has to be a few instructions and ~1 byte of L1 traffic. The F32 path spends a
// 4-byte activation load plus a table lookup and a float convert per weight per output row and is
// L1-bound at 11-41% of HBM bandwidth (measured, docs/cuda-host.md). Here:
//  - activations are int8 (quantized once per call by QuantizeQ8Kernel: 1 byte per value, shared
//    by all output rows through L1/L2) and dotted 4 at a time with __dp4a on packed weight bytes;
//  - IQ4_XS nibbles go through the 16-entry table with __byte_perm on 4 registers (no shared
//    memory), Q4_K/Q6_K nibbles are masked into bytes, Q8_0 bytes are used as they are;
//  - integer dot sums become floats through the 2^23 exponent trick (two full-rate ops instead of
//    a quarter-rate I2F);
//  - each warp computes NR output rows that share the activation loads, and all activation rows
//    (batch) reuse one decode of the weights: batch 8 costs little more weight work than batch 1;
//  - before waiting for the quantizer (programmatic dependent launch), each warp prefetches the
//    start of its weight rows into L2, so the quantizer's run and the launch gap overlap HBM reads.
// The lane -> block-piece mapping per type keeps each warp's weight loads on one contiguous
// stretch of the row (coalesced), 16-byte loads where the block alignment allows.
#include <cstdint>

#include "kernels/matmul/gemv_cuda_internal.h"

namespace stepserve::kernels::gemv_internal {
namespace {

__device__ __forceinline__ float F16Bits(uint32_t h) {
  float f;
  const unsigned short s = static_cast<unsigned short>(h);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s));
  return f;
}

// Exact int -> float for |i| < 2^22: place i in the mantissa of 1.5 * 2^23 and subtract.
__device__ __forceinline__ float IntToFloat(int i) {
  return __int_as_float(0x4B400000 + i) - 12582912.0f;
}

__device__ __forceinline__ uint32_t Byte(uint32_t word, int k) { return (word >> (8 * k)) & 0xFFu; }

// Waits until the grid this one depends on (the quantizer) has finished and its writes are
// visible; returns at once when the kernel was launched without programmatic serialization.
__device__ __forceinline__ void WaitForPreviousGrid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

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
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    Raw raw;
    raw.d = __ldcs(reinterpret_cast<const unsigned short*>(blk));
    // 16 bytes at a 2-byte-aligned address: five aligned words (four when aligned), never a word
    // without a wanted byte (rows are padded to 16 bytes, so the last one stays in the row).
    const uintptr_t a = reinterpret_cast<uintptr_t>(blk + 2 + 16 * c);
    const uint32_t off = static_cast<uint32_t>(a & 3u);
    const unsigned* word = reinterpret_cast<const unsigned*>(a - off);
#pragma unroll
    for (int i = 0; i < 4; ++i) raw.v[i] = __ldcs(word + i);
    raw.v[4] = off ? __ldcs(word + 4) : 0u;
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
__device__ __forceinline__ uint32_t ScaleByte(uint4 h, int k) {
  const uint32_t word = k < 4 ? h.y : (k < 8 ? h.z : h.w);
  return Byte(word, k & 3);
}

__device__ __forceinline__ void ScaleMinK4(uint4 h, int j, uint32_t* sc, uint32_t* m) {
  if (j < 4) {
    *sc = ScaleByte(h, j) & 63;
    *m = ScaleByte(h, j + 4) & 63;
  } else {
    *sc = (ScaleByte(h, j + 4) & 15) | ((ScaleByte(h, j - 4) >> 6) << 4);
    *m = (ScaleByte(h, j + 4) >> 4) | ((ScaleByte(h, j) >> 6) << 4);
  }
}

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
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const uint4* p = reinterpret_cast<const uint4*>(blk);
    return Raw{__ldcs(p), __ldcs(p + 1 + c)};
  }
  // The scale and min terms of the lane's two sub-blocks (shared with Q5_K's header layout).
  static __device__ __forceinline__ void SetScales(uint4 h, int c, W* w) {
    const int pair = c >> 1;
    uint32_t sc0, m0, sc1, m1;
    ScaleMinK4(h, 2 * pair, &sc0, &m0);
    ScaleMinK4(h, 2 * pair + 1, &sc1, &m1);
    const float d = F16Bits(h.x), dmin = (c & 1) ? 0.f : F16Bits(h.x >> 16);
    w->dl0 = d * static_cast<float>(sc0);
    w->dl1 = d * static_cast<float>(sc1);
    w->ml0 = dmin * static_cast<float>(m0);
    w->ml1 = dmin * static_cast<float>(m1);
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
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int c) {
    const uint4* p = reinterpret_cast<const uint4*>(blk);
    return Raw{__ldcs(p), __ldcs(p + 1 + (c & 1)), __ldcs(p + 3 + c)};
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
// Maps the 8 nibbles of `q` through the 16-entry int8 table `t` (entry k = byte k%4 of t[k/4]).
// Returns the entries for the low nibbles of bytes 0..3 (.x) and for the high nibbles (.y).
__device__ __forceinline__ uint2 Lookup16(uint32_t q, const uint32_t (&t)[4]) {
  uint32_t r[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Selector nibbles in order: low, high nibble of byte 2*half, then of byte 2*half+1.
    const uint32_t s = q >> (16 * half);
    const uint32_t sel = s & 0x7777u;
    const uint32_t lo8 = __byte_perm(t[0], t[1], sel);  // entries 0..7
    const uint32_t hi8 = __byte_perm(t[2], t[3], sel);  // entries 8..15
    // Byte n from hi8 (selector n + 4) where bit 3 of nibble n is set, else from lo8.
    r[half] = __byte_perm(lo8, hi8, 0x3210u | ((s & 0x8888u) >> 1));
  }
  // r[0] = {T(lo b0), T(hi b0), T(lo b1), T(hi b1)}, r[1] likewise for b2, b3: de-interleave.
  return make_uint2(__byte_perm(r[0], r[1], 0x6420u), __byte_perm(r[0], r[1], 0x7531u));
}

struct PieceIQ4_XS {
  static constexpr int kLanes = 8, kElems = 256, kBytes = 136;
  static constexpr int kDepth1 = 4;  // pipeline depth with one activation row
  struct W {
    uint32_t lo[4], hi[4];  // table values of elements 0..15 and 16..31 of the sub-block
    float dl;
  };
  struct X {
    uint4 lo, hi;
    float d;
  };
  struct Raw {
    uint2 h, qa, qb;
  };
  static __device__ __forceinline__ Raw LoadRaw(const uint8_t* blk, int ib) {
    return Raw{__ldcs(reinterpret_cast<const uint2*>(blk)),
               __ldcs(reinterpret_cast<const uint2*>(blk + 8 + 16 * ib)),
               __ldcs(reinterpret_cast<const uint2*>(blk + 16 + 16 * ib))};
  }
  static __device__ __forceinline__ W Decode(const Raw& raw, int64_t, int ib, const GemvParams& p) {
    const uint2 h = raw.h, qa = raw.qa, qb = raw.qb;
    const uint32_t ls =
        ((Byte(h.y, ib >> 1) >> (4 * (ib & 1))) & 15) | (((h.x >> (16 + 2 * ib)) & 3) << 4);
    W w;
    w.dl = F16Bits(h.x) * static_cast<float>(static_cast<int>(ls) - 32);
    const uint32_t t[4] = {p.iq4nl[0], p.iq4nl[1], p.iq4nl[2], p.iq4nl[3]};
    const uint32_t q[4] = {qa.x, qa.y, qb.x, qb.y};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint2 v = Lookup16(q[i], t);
      w.lo[i] = v.x;
      w.hi[i] = v.y;
    }
    return w;
  }
  static __device__ __forceinline__ X LoadX(const GemvParams& p, int r, int64_t b, int ib) {
    const int8_t* xq = p.xq + r * p.in + b * 256 + 32 * ib;
    X x;
    x.lo = __ldg(reinterpret_cast<const uint4*>(xq));
    x.hi = __ldg(reinterpret_cast<const uint4*>(xq + 16));
    x.d = __ldg(&p.xd[r * (p.in / 32) + b * 8 + ib].x);
    return x;
  }
  static __device__ __forceinline__ float Dot(const W& w, const X& x, int) {
    const uint32_t xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w};
    const uint32_t xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s = __dp4a(static_cast<int>(w.lo[i]), static_cast<int>(xl[i]), s);
      s = __dp4a(static_cast<int>(w.hi[i]), static_cast<int>(xh[i]), s);
    }
    return (w.dl * x.d) * IntToFloat(s);
  }
};

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
      raw.w[2 * i] = __ldcs(word);
      raw.w[2 * i + 1] = off ? __ldcs(word + 1) : 0u;
    }
    raw.d = __ldcs(reinterpret_cast<const unsigned short*>(blk + 208));
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

// acc[n][r] += output row o0 + n of matrix `w` dotted with activation row x_rows[r], r < n_rows.
// Per step every lane decodes its piece of one block of each of the NR weight rows, then each
// activation row's int8 piece is loaded once and dotted with all NR. Software pipeline: D steps
// of raw weight words in flight per warp (a register ring indexed only by unrolled constants);
// each step decodes the oldest slot, refills it with the step D ahead, then does the arithmetic,
// so HBM latency overlaps D - 1 steps of work. Rows past `out` re-read the last row.
template <class P, int R, int NR, int D>
__device__ __forceinline__ void AccumulateRows(const GemvParams& p, const uint8_t* w, int64_t o0,
                                               int lane, const int (&x_rows)[R], int n_rows,
                                               float (&acc)[NR][R]) {
  const uint8_t* rows[NR];
#pragma unroll
  for (int n = 0; n < NR; ++n) {
    rows[n] = w + (o0 + n < p.out ? o0 + n : p.out - 1) * p.w_row_bytes;
  }
  constexpr int kBlocksPerStep = 32 / P::kLanes;
  const int g = lane / P::kLanes, c = lane % P::kLanes;
  const int64_t nb = p.in / P::kElems;
  typename P::Raw ring[D][NR];
#pragma unroll
  for (int k = 0; k < D; ++k) {
    const int64_t bk = g + k * kBlocksPerStep;
#pragma unroll
    for (int n = 0; n < NR; ++n) {
      if (bk < nb) ring[k][n] = P::LoadRaw(rows[n] + bk * P::kBytes, c);
    }
  }
  for (int64_t b0 = g; b0 < nb; b0 += D * kBlocksPerStep) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      const int64_t b = b0 + k * kBlocksPerStep;
      if (b < nb) {
        typename P::W wv[NR];
#pragma unroll
        for (int n = 0; n < NR; ++n) wv[n] = P::Decode(ring[k][n], b, c, p);
        const int64_t next = b + D * kBlocksPerStep;
        if (next < nb) {
#pragma unroll
          for (int n = 0; n < NR; ++n) ring[k][n] = P::LoadRaw(rows[n] + next * P::kBytes, c);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < n_rows) {
            const typename P::X x = P::LoadX(p, x_rows[r], b, c);
#pragma unroll
            for (int n = 0; n < NR; ++n) acc[n][r] += P::Dot(wv[n], x, c);
          }
        }
      }
    }
  }
}

// Warp-reduces acc and stores y[y_rows[r]][o0 + n] for r < n_rows, o0 + n < out.
template <int R, int NR>
__device__ __forceinline__ void StoreRows(const GemvParams& p, float (&acc)[NR][R], int lane,
                                          int64_t o0, const int64_t (&y_rows)[R], int n_rows) {
#pragma unroll
  for (int n = 0; n < NR; ++n) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        float v = acc[n][r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
        if (lane == 0 && o0 + n < p.out) p.y[y_rows[r] * p.y_stride + o0 + n] = v;
      }
    }
  }
}

// Up to the first 4 KiB of each of the warp's rows (one 128-byte line per lane) into L2 while the
// quantizer may still run: only weights are touched before WaitForPreviousGrid.
template <int NR>
__device__ __forceinline__ void PrefetchRows(const GemvParams& p, const uint8_t* w, int64_t o0,
                                             int lane) {
  const int64_t pre = p.w_row_bytes < 4096 ? p.w_row_bytes : 4096;
#pragma unroll
  for (int n = 0; n < NR; ++n) {
    const uint8_t* row = w + (o0 + n < p.out ? o0 + n : p.out - 1) * p.w_row_bytes;
    if (128 * lane < pre) PrefetchL2(row + 128 * lane);
  }
}

// One warp: output rows o0 .. o0+NR-1, all activation rows (batch) reusing one decode of the
// weights. With one activation row the whole 4096-row matrix is one wave only at >= 8 blocks per
// SM, so registers are capped at 64 there.
template <class P, int R, int NR, int D, bool kIndexed>
__global__ void __launch_bounds__(kThreads, R == 1 ? 8 : 1)
    GemvQ8Kernel(const __grid_constant__ GemvParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * NR;
  if (o0 >= p.out) return;
  // Indexed (MoE) mode: this grid row's expert matrix, activation row and output row. The ids
  // were complete before the quantizer this kernel may overlap with started, so reading them
  // before WaitForPreviousGrid is safe.
  const uint8_t* w = p.w;
  int x_row0 = 0;
  int64_t y_row0 = 0;
  if constexpr (kIndexed) {
    const int g = static_cast<int>(blockIdx.y);
    const int32_t id = p.matrix_ids[g];
    if (id < 0 || id >= p.n_matrices) {
      if (lane < NR && o0 + lane < p.out) p.y[g * p.y_stride + o0 + lane] = 0.f;
      return;
    }
    w += id * p.w_matrix_bytes;
    x_row0 = g / p.x_group_div;
    y_row0 = g;
  }
  PrefetchRows<NR>(p, w, o0, lane);
  WaitForPreviousGrid();
  int x_rows[R];
  int64_t y_rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    x_rows[r] = x_row0 + r;
    y_rows[r] = y_row0 + r;
  }
  float acc[NR][R] = {};
  AccumulateRows<P, R, NR, D>(p, w, o0, lane, x_rows, p.rows, acc);
  StoreRows<R, NR>(p, acc, lane, o0, y_rows, p.rows);
}

// Grouped mode (MoE with several tokens): grid y = slots; slot s holds the groups that picked one
// expert, so its matrix is streamed once per R of them instead of once per group. Slot arrays
// come from the grouping kernel, which ran before the quantizer this kernel may overlap with.
template <class P, int R, int NR, int D>
__global__ void __launch_bounds__(kThreads) GemvQ8GroupedKernel(const __grid_constant__ GemvParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * NR;
  if (o0 >= p.out) return;
  const int slot = static_cast<int>(blockIdx.y);
  const int32_t id = p.slot_matrix[slot];
  if (id == kSlotUnused) return;
  const int begin = p.slot_begin[slot], end = p.slot_begin[slot + 1];
  if (id < 0) {  // ids outside [0, n_matrices): zero rows, as the indexed mode writes
    for (int i = begin; i < end; ++i) {
      if (lane < NR && o0 + lane < p.out) p.y[p.group_order[i] * p.y_stride + o0 + lane] = 0.f;
    }
    return;
  }
  const uint8_t* w = p.w + id * p.w_matrix_bytes;
  PrefetchRows<NR>(p, w, o0, lane);
  WaitForPreviousGrid();
  for (int c0 = begin; c0 < end; c0 += R) {
    const int n_rows = end - c0 < R ? end - c0 : R;
    int x_rows[R];
    int64_t y_rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int group = p.group_order[c0 + (r < n_rows ? r : n_rows - 1)];
      x_rows[r] = group / p.x_group_div;
      y_rows[r] = group;
    }
    float acc[NR][R] = {};
    AccumulateRows<P, R, NR, D>(p, w, o0, lane, x_rows, n_rows, acc);
    StoreRows<R, NR>(p, acc, lane, o0, y_rows, n_rows);
  }
}

// One thread per 4 activations, 8 threads per 32-value block (a row holds whole blocks, so the
// 8 lanes of a group are always all active or all past the end together).
__global__ void __launch_bounds__(256)
    QuantizeQ8Kernel(const __grid_constant__ GemvParams p, int8_t* xq, float2* xd) {
  // Let the dependent GEMV launch now; it waits for this grid's completion before reading.
  asm volatile("griddepcontrol.launch_dependents;");
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = p.in / 4;
  if (t >= per_row * p.rows) return;
  const int64_t r = t / per_row, k = 4 * (t - r * per_row);
  const float4 v = __ldg(reinterpret_cast<const float4*>(p.x + r * p.x_stride + k));
  const unsigned mask = 0xFFu << (threadIdx.x & 24);
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, off));
  const float d = amax / 127.0f;
  int q[4] = {0, 0, 0, 0};
  if (d > 0.f) {  // IEEE division, so a host reference can reproduce every byte
    q[0] = __float2int_rn(v.x / d);
    q[1] = __float2int_rn(v.y / d);
    q[2] = __float2int_rn(v.z / d);
    q[3] = __float2int_rn(v.w / d);
  }
  int sum = q[0] + q[1] + q[2] + q[3];
#pragma unroll
  for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(mask, sum, off);
  const uint32_t packed =
      (static_cast<uint32_t>(q[0]) & 0xFFu) | ((static_cast<uint32_t>(q[1]) & 0xFFu) << 8) |
      ((static_cast<uint32_t>(q[2]) & 0xFFu) << 16) | ((static_cast<uint32_t>(q[3]) & 0xFFu) << 24);
  *reinterpret_cast<uint32_t*>(xq + r * p.in + k) = packed;
  if ((threadIdx.x & 7) == 0) {
    xd[r * (p.in / 32) + k / 32] = make_float2(d, d * static_cast<float>(sum));
  }
}

// Launches `kernel` with one warp per NR output rows (grid x) and `grid_y` grid rows, optionally
// with programmatic stream serialization (see LaunchGemvQ8x).
template <int NR>
cudaError_t LaunchWarpRows(void (*kernel)(GemvParams), const GemvParams& p, int64_t grid_y,
                           bool overlap_previous, cudaStream_t stream) {
  const int64_t warps = (p.out + NR - 1) / NR;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock),
                     static_cast<unsigned>(grid_y));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = overlap_previous ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

template <class P, int R, int NR, int D, bool kIndexed = false>
cudaError_t Launch(const GemvParams& p, bool overlap_previous, cudaStream_t stream,
                   int64_t groups = 1) {
  return LaunchWarpRows<NR>(GemvQ8Kernel<P, R, NR, D, kIndexed>, p, groups, overlap_previous,
                            stream);
}

// Activation-row bound R (compile time, accumulators in registers), output rows per warp NR
// (sharing activation loads) and pipeline depth D. Measured on the H200 (docs/cuda-host.md): the
// first version (no ring, NR up to 4) stalled on load latency (ncu: 68% of stall cycles waiting on
// L1TEX) and had too few warps at NR = 4, so NR stays at 2 and the ring keeps loads in flight.
template <class P>
cudaError_t LaunchRows(const GemvParams& p, bool overlap_previous, cudaStream_t stream) {
  if (p.rows == 1) return Launch<P, 1, 1, P::kDepth1>(p, overlap_previous, stream);
  if (p.rows <= 4) return Launch<P, 4, 2, 2>(p, overlap_previous, stream);
  if (p.rows <= 8) return Launch<P, 8, 2, 2>(p, overlap_previous, stream);
  return Launch<P, 16, 2, 2>(p, overlap_previous, stream);
}

}  // namespace

cudaError_t LaunchQuantizeQ8(const GemvParams& p, int8_t* xq, float2* xd, cudaStream_t stream) {
  const int64_t threads = p.in / 4 * p.rows;
  const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
  QuantizeQ8Kernel<<<grid, 256, 0, stream>>>(p, xq, xd);
  return cudaGetLastError();
}

cudaError_t LaunchGemvQ8x(GgmlType type, const GemvParams& p, bool overlap_previous,
                          cudaStream_t stream) {
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchRows<PieceQ8_0>(p, overlap_previous, stream);
    case GgmlType::kQ4_K:
      return LaunchRows<PieceQ4_K>(p, overlap_previous, stream);
    case GgmlType::kQ5_K:
      return LaunchRows<PieceQ5_K>(p, overlap_previous, stream);
    case GgmlType::kQ6_K:
      return LaunchRows<PieceQ6_K>(p, overlap_previous, stream);
    case GgmlType::kIQ4_XS:
      return LaunchRows<PieceIQ4_XS>(p, overlap_previous, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

namespace {

template <class P>
cudaError_t LaunchGrouped(const GemvParams& p, int64_t slots, bool overlap_previous,
                          cudaStream_t stream) {
  constexpr int kR = 4, kNR = 2, kD = 2;  // the rows <= 4 shape of LaunchRows
  return LaunchWarpRows<kNR>(GemvQ8GroupedKernel<P, kR, kNR, kD>, p, slots, overlap_previous,
                             stream);
}

}  // namespace

cudaError_t LaunchGemvQ8xGrouped(GgmlType type, const GemvParams& p, int64_t slots,
                                 bool overlap_previous, cudaStream_t stream) {
  if (p.slot_matrix == nullptr || p.slot_begin == nullptr || p.group_order == nullptr ||
      slots < 1 || slots > 65535) {
    return cudaErrorInvalidValue;
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return LaunchGrouped<PieceQ8_0>(p, slots, overlap_previous, stream);
    case GgmlType::kQ4_K:
      return LaunchGrouped<PieceQ4_K>(p, slots, overlap_previous, stream);
    case GgmlType::kQ5_K:
      return LaunchGrouped<PieceQ5_K>(p, slots, overlap_previous, stream);
    case GgmlType::kQ6_K:
      return LaunchGrouped<PieceQ6_K>(p, slots, overlap_previous, stream);
    case GgmlType::kIQ4_XS:
      return LaunchGrouped<PieceIQ4_XS>(p, slots, overlap_previous, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchGemvQ8xIndexed(GgmlType type, const GemvParams& p, int64_t groups,
                                 bool overlap_previous, cudaStream_t stream) {
  if (p.matrix_ids == nullptr || p.rows != 1 || groups < 1 || groups > 65535) {
    return cudaErrorInvalidValue;
  }
  switch (type) {
    case GgmlType::kQ8_0:
      return Launch<PieceQ8_0, 1, 1, PieceQ8_0::kDepth1, true>(p, overlap_previous, stream, groups);
    case GgmlType::kQ4_K:
      return Launch<PieceQ4_K, 1, 1, PieceQ4_K::kDepth1, true>(p, overlap_previous, stream, groups);
    case GgmlType::kQ5_K:
      return Launch<PieceQ5_K, 1, 1, PieceQ5_K::kDepth1, true>(p, overlap_previous, stream, groups);
    case GgmlType::kQ6_K:
      return Launch<PieceQ6_K, 1, 1, PieceQ6_K::kDepth1, true>(p, overlap_previous, stream, groups);
    case GgmlType::kIQ4_XS:
      return Launch<PieceIQ4_XS, 1, 1, PieceIQ4_XS::kDepth1, true>(p, overlap_previous, stream,
                                                                  groups);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace stepserve::kernels::gemv_internal
