// The engine's f16/bf16 rounding: hand-checked values (ties to even, subnormals, overflow,
// NaN), every f16 value round-tripping, and agreement bit for bit with model/'s independent
// conversions over a sweep of float32 bit patterns.
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <vector>

#include "engine/kernels/element.hpp"
#include "engine/kernels/half.hpp"
#include "model/half.hpp"

namespace tapdiff::engine {
namespace {

struct HalfCase {
  const char* what;
  float in;
  std::uint16_t f16;
  std::uint16_t bf16;
};

const float kInf = std::numeric_limits<float>::infinity();

const HalfCase kCases[] = {
    {"one", 1.0f, 0x3c00, 0x3f80},
    {"minus two", -2.0f, 0xc000, 0xc000},
    {"zero", 0.0f, 0x0000, 0x0000},
    {"minus zero", -0.0f, 0x8000, 0x8000},
    {"0.1", 0.1f, 0x2e66, 0x3dcd},
    {"f16 max", 65504.0f, 0x7bff, 0x4780},
    {"65519 rounds down to f16 max", 65519.0f, 0x7bff, 0x4780},
    {"65520 is the f16 overflow tie: to even = inf", 65520.0f, 0x7c00, 0x4780},
    {"-65520 overflows to -inf", -65520.0f, 0xfc00, 0xc780},
    {"smallest f16 subnormal 2^-24", std::ldexp(1.0f, -24), 0x0001, 0x3380},
    {"negative smallest subnormal", -std::ldexp(1.0f, -24), 0x8001, 0xb380},
    {"2^-25 ties to zero (even)", std::ldexp(1.0f, -25), 0x0000, 0x3300},
    {"1.5 * 2^-25 rounds up to 2^-24", 1.5f * std::ldexp(1.0f, -25), 0x0001, 0x3340},
    {"1.5 subnormal units tie to 2 (even)", 3.0f * std::ldexp(1.0f, -25), 0x0002, 0x33c0},
    {"2.5 subnormal units tie to 2 (even)", 5.0f * std::ldexp(1.0f, -25), 0x0002, 0x3420},
    {"largest subnormal 1023 * 2^-24", 1023.0f * std::ldexp(1.0f, -24), 0x03ff, 0x3880},
    {"1023.5 units ties up to the smallest normal", 1023.5f * std::ldexp(1.0f, -24), 0x0400,
     0x3880},
    {"smallest f16 normal 2^-14", std::ldexp(1.0f, -14), 0x0400, 0x3880},
    {"1e-8 underflows to zero", 1e-8f, 0x0000, 0x322c},
    {"f16 tie to even (down): 1 + 2^-11", 1.0f + std::ldexp(1.0f, -11), 0x3c00, 0x3f80},
    {"f16 tie to even (up): 1 + 3 * 2^-11", 1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02, 0x3f80},
    {"bf16 tie to even (down): 1 + 2^-8", 1.0f + std::ldexp(1.0f, -8), 0x3c04, 0x3f80},
    {"bf16 tie to even (up): 1 + 3 * 2^-8", 1.0f + 3 * std::ldexp(1.0f, -8), 0x3c0c, 0x3f82},
    {"float max: bf16 overflows to inf", std::numeric_limits<float>::max(), 0x7c00, 0x7f80},
    {"infinity", kInf, 0x7c00, 0x7f80},
    {"minus infinity", -kInf, 0xfc00, 0xff80},
};

TEST(EngineHalf, HandCheckedValues) {
  for (const HalfCase& c : kCases) {
    EXPECT_EQ(f32_to_f16_bits(c.in), c.f16) << c.what;
    EXPECT_EQ(f32_to_bf16_bits(c.in), c.bf16) << c.what;
    EXPECT_EQ(f32_bits(round_to_f16(c.in)), f32_bits(f16_bits_to_f32(c.f16))) << c.what;
    EXPECT_EQ(f32_bits(round_to_bf16(c.in)), f32_bits(bf16_bits_to_f32(c.bf16))) << c.what;
  }
}

TEST(EngineHalf, NanStaysNanAndIsQuieted) {
  const float quiet = std::numeric_limits<float>::quiet_NaN();
  const float signaling = bits_f32(0x7f800001u);
  EXPECT_EQ(f32_to_f16_bits(quiet), 0x7e00);
  EXPECT_EQ(f32_to_f16_bits(signaling), 0x7e00);
  EXPECT_EQ(f32_to_bf16_bits(signaling), 0x7fc0);
  EXPECT_TRUE(std::isnan(round_to_f16(-quiet)));
  EXPECT_TRUE(std::isnan(round_to_bf16(-quiet)));
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(0x7c01)));
}

TEST(EngineHalf, EveryF16ValueRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_bits_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16_bits(f), h) << "f16 bits 0x" << std::hex << h;
  }
}

// The engine's conversions and model/'s were written independently; they must agree on every
// float32 pattern in a dense sweep (all exponents, mantissa ends, both signs).
TEST(EngineHalf, AgreesWithModelConversionsBitForBit) {
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 65521) {
    const float f = bits_f32(static_cast<std::uint32_t>(u));
    ASSERT_EQ(f32_to_f16_bits(f), fp32_to_fp16(f)) << "f32 bits 0x" << std::hex << u;
    ASSERT_EQ(f32_to_bf16_bits(f), fp32_to_bf16(f)) << "f32 bits 0x" << std::hex << u;
  }
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    ASSERT_EQ(f32_bits(f16_bits_to_f32(b)), f32_bits(fp16_to_fp32(b))) << std::hex << h;
    ASSERT_EQ(f32_bits(bf16_bits_to_f32(b)), f32_bits(bf16_to_fp32(b))) << std::hex << h;
  }
}

// round_to_* are the conversions composed, written without branches: the same bits on a dense
// sweep of float32 patterns (NaN payloads, subnormals, the overflow edge), through the
// vectorized run as well as one value at a time.
TEST(EngineHalf, RoundingEqualsTheComposedConversionsBitForBit) {
  std::vector<float> run;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) run.push_back(bits_f32(static_cast<std::uint32_t>(u)));
  for (std::uint32_t edge : {0x38800000u, 0x387fffffu, 0x477ff000u, 0x477fefffu, 0x7f800000u, 0x7f800001u,
                             0x33000000u, 0x33000001u, 0x337fffffu, 0x7fc00000u, 0xffc01234u})
    run.push_back(bits_f32(edge));
  for (ElemType t : {ElemType::f16, ElemType::bf16}) {
    std::vector<float> rounded = run;
    round_run(t, rounded.data(), int(rounded.size()));
    for (std::size_t i = 0; i < run.size(); ++i) {
      const float f = run[i];
      const std::uint32_t want = t == ElemType::f16 ? f32_bits(f16_bits_to_f32(f32_to_f16_bits(f)))
                                                    : f32_bits(bf16_bits_to_f32(f32_to_bf16_bits(f)));
      ASSERT_EQ(f32_bits(round_to(t, f)), want) << elem_type_name(t) << " of 0x" << std::hex << f32_bits(f);
      ASSERT_EQ(f32_bits(rounded[i]), want) << elem_type_name(t) << " run, 0x" << std::hex << f32_bits(f);
    }
  }
}

TEST(EngineHalf, TypedStoresRoundAndLoadsWiden) {
  std::uint16_t h[1] = {};
  store_element(h, ElemType::f16, 0, 65520.0f);
  EXPECT_EQ(h[0], 0x7c00);
  EXPECT_TRUE(std::isinf(load_element(h, ElemType::f16, 0)));
  store_element(h, ElemType::bf16, 0, 1.0f + 3 * std::ldexp(1.0f, -8));
  EXPECT_EQ(load_element(h, ElemType::bf16, 0), 1.0f + std::ldexp(1.0f, -6));
  float f[1] = {};
  store_element(f, ElemType::f32, 0, 0.1f);
  EXPECT_EQ(load_element(f, ElemType::f32, 0), 0.1f);
}

}  // namespace
}  // namespace tapdiff::engine
