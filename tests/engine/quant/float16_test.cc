// F16ToF32 for all 65536 half patterns against an independent decoder written from IEEE 754
// (ldexp on the fields), and the round trip F32ToF16(F16ToF32(h)) == h for every non-NaN h.
#include "engine/quant/float16.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace stepserve {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

TEST(Float16Test, AllHalfPatternsDecodeExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const int sign = (h >> 15) & 1;
    const int exponent = (h >> 10) & 31;
    const int mantissa = h & 1023;
    const float got = F16ToF32(static_cast<uint16_t>(h));
    if (exponent == 31) {
      if (mantissa == 0) {
        EXPECT_TRUE(std::isinf(got) && std::signbit(got) == (sign != 0)) << h;
      } else {
        // ggml: quiet NaN, payload shifted left by 13 (spec B.2, e.g. 0x7C01 -> 0x7FC02000).
        EXPECT_EQ(Bits(got), (sign ? 0xFF800000u : 0x7F800000u) | 0x00400000u |
                                 (static_cast<uint32_t>(mantissa) << 13))
            << h;
      }
      continue;
    }
    const double magnitude =
        exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
    const float want = static_cast<float>(sign ? -magnitude : magnitude);
    ASSERT_EQ(Bits(got), Bits(want)) << "half 0x" << std::hex << h;
    EXPECT_EQ(F32ToF16(got), h) << "round trip of half 0x" << std::hex << h;
  }
  EXPECT_EQ(Bits(F16ToF32(0x7C01)), 0x7FC02000u);
}

}  // namespace
}  // namespace stepserve
