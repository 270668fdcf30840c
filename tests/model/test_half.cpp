// fp16 / bf16 conversions: hand-checked values, ties to even, subnormals, overflow, NaN.
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>

#include "model/half.hpp"

namespace tapdiff {
namespace {

struct HalfCase {
  const char* what;
  float in;
  std::uint16_t fp16;
  std::uint16_t bf16;
};

const HalfCase kCases[] = {
    {"one", 1.0f, 0x3c00, 0x3f80},
    {"minus two", -2.0f, 0xc000, 0xc000},
    {"zero", 0.0f, 0x0000, 0x0000},
    {"minus zero", -0.0f, 0x8000, 0x8000},
    {"fp16 max", 65504.0f, 0x7bff, 0x4780},
    {"just below fp16 overflow tie", 65519.99f, 0x7bff, 0x4780},
    {"fp16 overflow tie rounds to inf", 65520.0f, 0x7c00, 0x4780},
    {"smallest fp16 subnormal", std::ldexp(1.0f, -24), 0x0001, 0x3380},
    {"half the smallest subnormal ties to zero", std::ldexp(1.0f, -25), 0x0000, 0x3300},
    {"1.5x half-subnormal rounds up", 1.5f * std::ldexp(1.0f, -25), 0x0001, 0x3340},
    {"smallest fp16 normal", std::ldexp(1.0f, -14), 0x0400, 0x3880},
    {"fp16 tie to even (down)", 1.0f + std::ldexp(1.0f, -11), 0x3c00, 0x3f80},
    {"fp16 tie to even (up)", 1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02, 0x3f80},
    {"bf16 tie to even (down)", 1.0f + std::ldexp(1.0f, -8), 0x3c04, 0x3f80},
    {"bf16 tie to even (up)", 1.0f + 3 * std::ldexp(1.0f, -8), 0x3c0c, 0x3f82},
    {"infinity", std::numeric_limits<float>::infinity(), 0x7c00, 0x7f80},
    {"minus infinity", -std::numeric_limits<float>::infinity(), 0xfc00, 0xff80},
    {"0.1", 0.1f, 0x2e66, 0x3dcd},
};

TEST(Half, HandCheckedValues) {
  for (const auto& c : kCases) {
    EXPECT_EQ(fp32_to_fp16(c.in), c.fp16) << c.what;
    EXPECT_EQ(fp32_to_bf16(c.in), c.bf16) << c.what;
  }
}

TEST(Half, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(nan))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(nan))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(-nan))));
}

TEST(Half, EveryFp16ValueRoundTripsThroughFp32) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << "fp16 bits 0x" << std::hex << h;
  }
}

TEST(Half, EveryBf16ValueRoundTripsThroughFp32) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), h) << "bf16 bits 0x" << std::hex << h;
  }
}

TEST(Half, Fp16RoundingMatchesNearestRepresentable) {
  // For each fp16 interval [a, b], points strictly inside round to the nearer end.
  for (std::uint32_t h = 0x0001; h < 0x7bff; h += 37) {
    const float a = fp16_to_fp32(static_cast<std::uint16_t>(h));
    const float b = fp16_to_fp32(static_cast<std::uint16_t>(h + 1));
    EXPECT_EQ(fp32_to_fp16(a + (b - a) * 0.25f), h);
    EXPECT_EQ(fp32_to_fp16(a + (b - a) * 0.75f), h + 1);
  }
}

}  // namespace
}  // namespace tapdiff
