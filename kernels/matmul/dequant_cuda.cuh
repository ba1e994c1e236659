// Device-side dequantizers: 8 consecutive elements of a GGUF row per call, for every type
// DequantCudaSupports accepts. Shared by the row dequantizer (dequant_cuda.cu) and the generic
// GEMV (gemv_generic_cuda.cu); include only from .cu files.
//
// Each function mirrors its host twin in engine/quant (quant_legacy.cc, quant_k.cc, quant_iq.cc)
// with the same float32 rounding order: products and differences use __fmul_rn / __fsub_rn so
// nvcc cannot contract them into an FMA (the host library is built with -ffp-contract=off), which
// keeps the results bit-exact with DequantizeRow. Bytes are read one at a time: blocks of 34, 66,
// 74, ... bytes sit at arbitrary alignment inside a row. The functions are also host-callable so
// a CPU test (tests/gpu/dequant_cuda_host_test.cc) checks their block indexing against
// DequantizeRow on machines without a GPU.
#ifndef STEPSERVE_KERNELS_MATMUL_DEQUANT_CUDA_CUH_
#define STEPSERVE_KERNELS_MATMUL_DEQUANT_CUDA_CUH_

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/quant/float16.h"
#include "engine/quant/ggml_type.h"
#include "kernels/matmul/dequant_cuda.h"

// `#pragma unroll` inside these __host__ __device__ functions would reach the host compiler
// (which warns about the unknown pragma); the device pass alone gets it.
#ifdef __CUDA_ARCH__
#define STEPSERVE_DEQUANT_UNROLL _Pragma("unroll")
#else
#define STEPSERVE_DEQUANT_UNROLL
#endif

namespace stepserve::kernels::dequant_device {

// Elements and bytes per block (spec B.1), usable in device code.
struct BlockGeometry {
  int elems;
  int bytes;
};

__host__ __device__ constexpr BlockGeometry Geometry(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return {1, 4};
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return {1, 2};
    case GgmlType::kQ8_0:
      return {32, 34};
    case GgmlType::kIQ4_NL:
      return {32, 18};
    case GgmlType::kQ2_K:
      return {256, 84};
    case GgmlType::kQ3_K:
      return {256, 110};
    case GgmlType::kQ4_K:
      return {256, 144};
    case GgmlType::kQ5_K:
      return {256, 176};
    case GgmlType::kQ6_K:
      return {256, 210};
    case GgmlType::kIQ2_XXS:
      return {256, 66};
    case GgmlType::kIQ2_XS:
      return {256, 74};
    case GgmlType::kIQ2_S:
      return {256, 82};
    case GgmlType::kIQ3_XXS:
      return {256, 98};
    case GgmlType::kIQ3_S:
      return {256, 110};
    case GgmlType::kIQ4_XS:
      return {256, 136};
    default:
      return {0, 0};
  }
}

// Calls fn(std::integral_constant<GgmlType, T>{}) for the runtime `type` (host code: picks the
// kernel template instance); false for a type without a device dequantizer.
template <typename Fn>
bool DispatchDequantType(GgmlType type, Fn&& fn) {
#define STEPSERVE_DEQUANT_CASE(T)                         \
  case GgmlType::T:                                        \
    fn(std::integral_constant<GgmlType, GgmlType::T>{}); \
    return true;
  switch (type) {
    STEPSERVE_DEQUANT_CASE(kF32)
    STEPSERVE_DEQUANT_CASE(kF16)
    STEPSERVE_DEQUANT_CASE(kBF16)
    STEPSERVE_DEQUANT_CASE(kQ8_0)
    STEPSERVE_DEQUANT_CASE(kIQ4_NL)
    STEPSERVE_DEQUANT_CASE(kQ2_K)
    STEPSERVE_DEQUANT_CASE(kQ3_K)
    STEPSERVE_DEQUANT_CASE(kQ4_K)
    STEPSERVE_DEQUANT_CASE(kQ5_K)
    STEPSERVE_DEQUANT_CASE(kQ6_K)
    STEPSERVE_DEQUANT_CASE(kIQ2_XXS)
    STEPSERVE_DEQUANT_CASE(kIQ2_XS)
    STEPSERVE_DEQUANT_CASE(kIQ2_S)
    STEPSERVE_DEQUANT_CASE(kIQ3_XXS)
    STEPSERVE_DEQUANT_CASE(kIQ3_S)
    STEPSERVE_DEQUANT_CASE(kIQ4_XS)
    default:
      return false;
  }
#undef STEPSERVE_DEQUANT_CASE
}

__host__ __device__ __forceinline__ uint32_t LoadU16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}
__host__ __device__ __forceinline__ uint32_t LoadU32(const uint8_t* p) {
  return LoadU16(p) | (LoadU16(p + 2) << 16);
}
__host__ __device__ __forceinline__ float LoadF16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(LoadU16(p))));
#else
  return F16ToF32(static_cast<uint16_t>(LoadU16(p)));
#endif
}
__host__ __device__ __forceinline__ float BitsToFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
__host__ __device__ __forceinline__ uint32_t FloatToBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}
// The host versions (only the CPU test of these functions runs them) store the product through a
// volatile so no host compiler contracts it either.
__host__ __device__ __forceinline__ float Mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  volatile float product = a * b;
  return product;
#endif
}
__host__ __device__ __forceinline__ float MulSub(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(__fmul_rn(a, b), c);
#else
  return Mul(a, b) - c;
#endif
}

// y[j] = +-(db * grid byte j), negated where bit j of `signs` is set (sign applied after the
// rounded product, as the host does).
__host__ __device__ __forceinline__ void EmitGrid8(float db, uint64_t grid, uint32_t signs, float* y) {
  STEPSERVE_DEQUANT_UNROLL
  for (int j = 0; j < 8; ++j) {
    const float v = Mul(db, static_cast<float>((grid >> (8 * j)) & 0xFF));
    y[j] = BitsToFloat(FloatToBits(v) ^ (((signs >> j) & 1u) << 31));
  }
}

// The K-quant super-block position of group g (8 elements) for the 128/32/16 layouts of Q2_K,
// Q3_K and Q6_K: half-block h (128), quarter k (32), sixteenth `half` (16), first element l0 of
// the group inside its 16 (Q2_K/Q3_K) or 32 (Q6_K).
struct KPos {
  int h, k, half, l16, l32;
};
__host__ __device__ __forceinline__ KPos KPosition(int g) {
  KPos p;
  p.h = g / 16;
  p.k = (g / 4) % 4;
  p.half = (g / 2) % 2;
  p.l16 = 8 * (g % 2);
  p.l32 = 8 * (g % 4);
  return p;
}

__host__ __device__ __forceinline__ void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Group g (elements 8g .. 8g+7) of the block at `b`.
template <GgmlType kType>
__host__ __device__ __forceinline__ void DequantBlockGroup(const uint8_t* b, int g,
                                                  const DequantTables& t, float* y) {
  if constexpr (kType == GgmlType::kQ8_0) {
    const float d = LoadF16(b);
    const uint8_t* qs = b + 2 + 8 * g;
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) y[j] = Mul(static_cast<float>(static_cast<int8_t>(qs[j])), d);
  } else if constexpr (kType == GgmlType::kIQ4_NL) {
    const float d = LoadF16(b);
    const uint8_t* qs = b + 2 + 8 * (g & 1);
    const int shift = 4 * (g >> 1);
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) {
      y[j] = Mul(d, static_cast<float>(t.iq4nl_values[(qs[j] >> shift) & 15]));
    }
  } else if constexpr (kType == GgmlType::kQ2_K) {
    const KPos p = KPosition(g);
    const int sc = b[8 * p.h + 2 * p.k + p.half];
    const float dl = Mul(LoadF16(b + 80), static_cast<float>(sc & 15));
    const float ml = Mul(LoadF16(b + 82), static_cast<float>(sc >> 4));
    const uint8_t* q = b + 16 + 32 * p.h + 16 * p.half + p.l16;
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) y[j] = MulSub(dl, static_cast<float>((q[j] >> (2 * p.k)) & 3), ml);
  } else if constexpr (kType == GgmlType::kQ3_K) {
    const KPos p = KPosition(g);
    const uint8_t* s = b + 96;
    const int i = 8 * p.h + 2 * p.k + p.half;
    const int low4 = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
    const int high2 = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    const float dl = Mul(LoadF16(b + 108), static_cast<float>((low4 | (high2 << 4)) - 32));
    const uint8_t* q = b + 32 + 32 * p.h + 16 * p.half + p.l16;
    const uint8_t* hm = b + 16 * p.half + p.l16;
    const int hbit_shift = 4 * p.h + p.k;
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) {
      // A set hmask bit means "no offset" (spec B.5, Q3_K).
      const int q3 = ((q[j] >> (2 * p.k)) & 3) - (((hm[j] >> hbit_shift) & 1) ? 0 : 4);
      y[j] = Mul(dl, static_cast<float>(q3));
    }
  } else if constexpr (kType == GgmlType::kQ4_K || kType == GgmlType::kQ5_K) {
    const int sub = g / 4;  // 32-element sub-block
    const int l0 = 8 * (g % 4);
    int sc, m;
    ScaleMinK4(sub, b + 4, &sc, &m);
    const float d1 = Mul(LoadF16(b), static_cast<float>(sc));
    const float m1 = Mul(LoadF16(b + 2), static_cast<float>(m));
    const int shift = 4 * (sub & 1);
    if constexpr (kType == GgmlType::kQ4_K) {
      const uint8_t* q = b + 16 + 32 * (sub / 2) + l0;
      STEPSERVE_DEQUANT_UNROLL
      for (int j = 0; j < 8; ++j) y[j] = MulSub(d1, static_cast<float>((q[j] >> shift) & 15), m1);
    } else {
      const uint8_t* qh = b + 16 + l0;
      const uint8_t* q = b + 48 + 32 * (sub / 2) + l0;
      STEPSERVE_DEQUANT_UNROLL
      for (int j = 0; j < 8; ++j) {
        const int q5 = ((q[j] >> shift) & 15) | (((qh[j] >> sub) & 1) << 4);
        y[j] = MulSub(d1, static_cast<float>(q5), m1);
      }
    }
  } else if constexpr (kType == GgmlType::kQ6_K) {
    const KPos p = KPosition(g);
    const int half = p.l32 / 16;
    // (d * scale) * q, not d * (scale * q) (spec B.9).
    const float dl = Mul(LoadF16(b + 208),
                         static_cast<float>(static_cast<int8_t>(b[192 + 8 * p.h + 2 * p.k + half])));
    const uint8_t* low = b + 64 * p.h + 32 * (p.k % 2) + p.l32;
    const int low_shift = p.k < 2 ? 0 : 4;
    const uint8_t* qh = b + 128 + 32 * p.h + p.l32;
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) {
      const int q = (((low[j] >> low_shift) & 15) | (((qh[j] >> (2 * p.k)) & 3) << 4)) - 32;
      y[j] = Mul(dl, static_cast<float>(q));
    }
  } else if constexpr (kType == GgmlType::kIQ2_XXS) {
    const int ib = g / 4, l = g % 4;
    const uint8_t* gp = b + 2 + 8 * ib;
    const uint32_t w = LoadU32(gp + 4);
    const float db = Mul(Mul(LoadF16(b), 0.5f + static_cast<float>(w >> 28)), 0.25f);
    EmitGrid8(db, t.iq2xxs_grid[gp[l]], t.ksigns[(w >> (7 * l)) & 127], y);
  } else if constexpr (kType == GgmlType::kIQ2_XS || kType == GgmlType::kIQ2_S) {
    const int ib = g / 4, l = g % 4;
    const int sc = b[kType == GgmlType::kIQ2_XS ? 66 + ib : 74 + ib];
    const float db =
        Mul(Mul(LoadF16(b), 0.5f + static_cast<float>(l < 2 ? (sc & 15) : (sc >> 4))), 0.25f);
    if constexpr (kType == GgmlType::kIQ2_XS) {
      const uint32_t v = LoadU16(b + 2 + 2 * (4 * ib + l));
      EmitGrid8(db, t.iq2xs_grid[v & 511], t.ksigns[v >> 9], y);
    } else {
      const int idx = b[2 + 4 * ib + l] | (((b[66 + ib] >> (2 * l)) & 3) << 8);
      EmitGrid8(db, t.iq2s_grid[idx], b[34 + 4 * ib + l], y);
    }
  } else if constexpr (kType == GgmlType::kIQ3_XXS) {
    const int ib = g / 4, l = g % 4;
    const uint8_t* qs = b + 2 + 8 * ib + 2 * l;
    const uint32_t w = LoadU32(b + 66 + 4 * ib);
    const float db = Mul(Mul(LoadF16(b), 0.5f + static_cast<float>(w >> 28)), 0.5f);
    const uint64_t grid = static_cast<uint64_t>(t.iq3xxs_grid[qs[0]]) |
                          (static_cast<uint64_t>(t.iq3xxs_grid[qs[1]]) << 32);
    EmitGrid8(db, grid, t.ksigns[(w >> (7 * l)) & 127], y);
  } else if constexpr (kType == GgmlType::kIQ3_S) {
    const int ib = g / 4, l = g % 4;
    const int ls = (b[106 + ib / 2] >> (4 * (ib % 2))) & 15;
    const float db = Mul(LoadF16(b), static_cast<float>(1 + 2 * ls));
    const uint8_t* qs = b + 2 + 8 * ib + 2 * l;
    const int qh = b[66 + ib];
    const int idx0 = qs[0] | (((qh >> (2 * l)) & 1) << 8);
    const int idx1 = qs[1] | (((qh >> (2 * l + 1)) & 1) << 8);
    const uint64_t grid = static_cast<uint64_t>(t.iq3s_grid[idx0]) |
                          (static_cast<uint64_t>(t.iq3s_grid[idx1]) << 32);
    EmitGrid8(db, grid, b[74 + 4 * ib + l], y);
  } else if constexpr (kType == GgmlType::kIQ4_XS) {
    const int ib = g / 4, sub = g % 4;
    const uint32_t scales_h = LoadU16(b + 2);
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = Mul(LoadF16(b), static_cast<float>(ls - 32));
    const uint8_t* q = b + 8 + 16 * ib + 8 * (sub & 1);
    const int shift = 4 * (sub >> 1);
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) {
      y[j] = Mul(dl, static_cast<float>(t.iq4nl_values[(q[j] >> shift) & 15]));
    }
  } else {
    static_assert(Geometry(kType).elems > 1, "plain types go through DequantGroup");
  }
}

// Elements 8 * group .. 8 * group + 7 of the row at `row` (`cols` elements). Plain types (F32,
// F16, BF16) may end mid-group: elements at or past `cols` come back as 0. Quantized types have
// whole blocks (cols is a multiple of the block size).
template <GgmlType kType>
__host__ __device__ __forceinline__ void DequantGroup(const uint8_t* row, int64_t group, int64_t cols,
                                             const DequantTables& t, float* y) {
  constexpr BlockGeometry kGeo = Geometry(kType);
  if constexpr (kGeo.elems == 1) {
    const int64_t e0 = 8 * group;
    STEPSERVE_DEQUANT_UNROLL
    for (int j = 0; j < 8; ++j) {
      const int64_t e = e0 + j;
      float v = 0.0f;
      if (e < cols) {
        if constexpr (kType == GgmlType::kF32) {
          v = reinterpret_cast<const float*>(row)[e];
        } else if constexpr (kType == GgmlType::kF16) {
          v = LoadF16(row + 2 * e);
        } else {  // BF16: the top half of a float32
          v = BitsToFloat(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[e]) << 16);
        }
      }
      y[j] = v;
    }
  } else {
    constexpr int kGroups = kGeo.elems / 8;
    DequantBlockGroup<kType>(row + (group / kGroups) * kGeo.bytes,
                             static_cast<int>(group % kGroups), t, y);
  }
}

}  // namespace stepserve::kernels::dequant_device

#endif  // STEPSERVE_KERNELS_MATMUL_DEQUANT_CUDA_CUH_
