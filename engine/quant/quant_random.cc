// FillRandomBlocks: random but valid blocks for synthetic models of every dequantizable type.
//
// Each block is random bytes (every bit pattern of the quant/index/sign fields is valid, spec
// B.4-B.6), then its scale fields are overwritten. Per-type rules keep the values roughly
// zero-mean like real weights: the symmetric types get random signs or signed codes from the
// random bytes; the types with a min (Q2_K, Q4_K, Q5_K) get min = scale * (mid-code), so each
// sub-block is centred on zero. The super-scale is target_rms / (the RMS of that type's blocks at
// super-scale 1), measured once per type by dequantizing a few blocks, times a per-block jitter in
// [0.7, 1.3) so blocks differ in magnitude as real ones do.
#include <array>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"
#include "engine/quant/quant_internal.h"

namespace stepserve::quant {
namespace {

using internal::StoreF32;
using internal::StoreU16;

// SplitMix64: tiny state, good enough statistics, ~1 ns per 8 bytes.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  void Fill(uint8_t* p, int n) {
    for (; n >= 8; n -= 8, p += 8) {
      const uint64_t v = Next();
      std::memcpy(p, &v, 8);
    }
    if (n > 0) {
      const uint64_t v = Next();
      std::memcpy(p, &v, static_cast<size_t>(n));
    }
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * 0x1p-24f; }  // [0, 1)

 private:
  uint64_t state_;
};

// Stores `d` as an f16 scale that is always finite and positive: tiny values become the smallest
// subnormal, huge ones the largest finite half.
void StoreScale(uint8_t* p, float d) {
  uint16_t h = F32ToF16(d);
  if ((h & 0x7fff) == 0 || (h & 0x8000) != 0) h = 0x0001;
  if ((h & 0x7c00) == 0x7c00) h = 0x7bff;
  StoreU16(p, h);
}

// Eight 6-bit sub-scales in 32..63 with min = scale (Q4_K/Q5_K packing).
void RandomScaleMinK4(uint8_t* s, Rng& rng) {
  uint64_t bits = rng.Next();
  uint8_t sc[8];
  for (int j = 0; j < 8; ++j, bits >>= 5) sc[j] = static_cast<uint8_t>(32 + (bits & 31));
  internal::PackScaleMinK4(sc, sc, s);
}

// Writes one block of `type` with super-scale `d` (> 0).
void WriteBlock(GgmlType type, uint8_t* b, Rng& rng, float d) {
  switch (type) {
    case GgmlType::kQ8_0:
      rng.Fill(b + 2, 32);
      StoreScale(b, d);
      return;
    case GgmlType::kQ4_0:
    case GgmlType::kIQ4_NL:
      rng.Fill(b + 2, 16);
      StoreScale(b, d);
      return;
    case GgmlType::kQ2_K: {
      rng.Fill(b + 16, 64);
      uint64_t bits = rng.Next();
      for (int s = 0; s < 16; ++s, bits >>= 3) {
        const uint8_t sc = static_cast<uint8_t>(8 + (bits & 7));
        b[s] = static_cast<uint8_t>(sc | (sc << 4));  // min = scale: q in 0..3 centred at 1.5
      }
      StoreScale(b + 80, d);
      StoreScale(b + 82, 1.5f * d);
      return;
    }
    case GgmlType::kQ3_K:
      rng.Fill(b, 108);
      StoreScale(b + 108, d);
      return;
    case GgmlType::kQ4_K:
      RandomScaleMinK4(b + 4, rng);
      rng.Fill(b + 16, 128);
      StoreScale(b, d);
      StoreScale(b + 2, 7.5f * d);  // q in 0..15 centred at 7.5
      return;
    case GgmlType::kQ5_K:
      RandomScaleMinK4(b + 4, rng);
      rng.Fill(b + 16, 160);
      StoreScale(b, d);
      StoreScale(b + 2, 15.5f * d);  // q in 0..31 centred at 15.5
      return;
    case GgmlType::kQ6_K:
      rng.Fill(b, 208);
      StoreScale(b + 208, d);
      return;
    case GgmlType::kQ8_K: {
      rng.Fill(b + 4, 256);
      StoreF32(b, d);
      for (int s = 0; s < 16; ++s) {  // bsums must match qs for a valid block
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += static_cast<int8_t>(b[4 + 16 * s + l]);
        StoreU16(b + 260 + 2 * s, static_cast<uint16_t>(static_cast<int16_t>(sum)));
      }
      return;
    }
    case GgmlType::kIQ2_XXS:
    case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S:
    case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S:
    case GgmlType::kIQ4_XS:
      rng.Fill(b + 2, static_cast<int>(TypeInfo(type).block_bytes) - 2);
      StoreScale(b, d);
      return;
    default:
      return;  // float types are handled by FillFloats; others rejected before
  }
}

// RMS of the dequantized values of blocks written with super-scale 1, per type id.
float UnitRms(GgmlType type) {
  static const std::array<float, kGgmlTypeCount> kRms = [] {
    std::array<float, kGgmlTypeCount> rms{};
    constexpr int kBlocks = 64;
    for (int id = 0; id < kGgmlTypeCount; ++id) {
      const internal::Codec* codec = internal::FindCodec(static_cast<GgmlType>(id));
      if (codec == nullptr || codec->block_elems == 1) continue;
      uint8_t block[512];
      float values[256];
      Rng rng(0xCA11B8A7Eull + static_cast<uint64_t>(id));
      double sum_sq = 0.0;
      for (int i = 0; i < kBlocks; ++i) {
        for (int64_t done = 0; done < 256; done += codec->block_elems) {
          WriteBlock(codec->type, block, rng, 1.0f);
          codec->dequant(block, values + done, 1);
        }
        for (float v : values) sum_sq += static_cast<double>(v) * v;
      }
      rms[id] = static_cast<float>(std::sqrt(sum_sq / (kBlocks * 256.0)));
    }
    return rms;
  }();
  return kRms[static_cast<int>(type)];
}

// Plain types: uniform in [-a, a) with a = sqrt(3) * target, which has RMS = target.
void FillFloats(GgmlType type, uint8_t* dst, int64_t n, Rng& rng, float target_rms) {
  const float a = std::sqrt(3.0f) * target_rms;
  for (int64_t i = 0; i < n; ++i) {
    const float v = (2.0f * rng.Uniform() - 1.0f) * a;
    if (type == GgmlType::kF32) {
      StoreF32(dst + 4 * i, v);
    } else if (type == GgmlType::kF16) {
      StoreU16(dst + 2 * i, F32ToF16(v));
    } else {
      StoreU16(dst + 2 * i, F32ToBF16(v));
    }
  }
}

}  // namespace

absl::Status FillRandomBlocks(GgmlType type, void* dst, int64_t n_blocks, uint64_t seed,
                              float target_rms) {
  const internal::Codec* codec = internal::FindCodec(type);
  if (codec == nullptr) {
    return absl::UnimplementedError(
        absl::StrFormat("FillRandomBlocks: tensor type %s (id %d) is not supported",
                        GgmlTypeName(type), static_cast<int>(type)));
  }
  if (n_blocks < 0 || (n_blocks > 0 && dst == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "FillRandomBlocks: bad destination (%d blocks of %s)", n_blocks, GgmlTypeName(type)));
  }
  if (!(target_rms > 0.0f) || !std::isfinite(target_rms)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("FillRandomBlocks: target_rms must be finite and > 0, got %g", target_rms));
  }
  Rng rng(seed);
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (codec->block_elems == 1) {
    FillFloats(type, out, n_blocks, rng, target_rms);
    return absl::OkStatus();
  }
  const float d0 = target_rms / UnitRms(type);
  for (int64_t i = 0; i < n_blocks; ++i, out += codec->block_bytes) {
    WriteBlock(type, out, rng, d0 * (0.7f + 0.6f * rng.Uniform()));
  }
  return absl::OkStatus();
}

}  // namespace stepserve::quant
