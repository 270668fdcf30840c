// Block codecs: hand-built blocks with hand-computed values, quantize -> dequantize error
// bounds on seeded data, zero blocks, and the dispatchers' size check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/dequantize.hpp"
#include "model/ggml_type.hpp"
#include "model/quantize.hpp"

namespace tapdiff {
namespace {

// Parameterized cases are named after their type (AllTypes/QuantHandBlock.DecodesTo.../Q4_K), and
// each case struct has a PrintTo so gtest shows the type, not the struct's bytes.
template <typename Case>
std::string type_name_of(const ::testing::TestParamInfo<Case>& info) {
  return std::string(ggml_type_name(info.param.type));
}

// --- (a) hand-built blocks -------------------------------------------------------------------
// fp16 bit patterns used below: 1.0 = 0x3C00, 0.5 = 0x3800, 0.25 = 0x3400, 0.125 = 0x3000,
// 2.0 = 0x4000, -1.0 = 0xBC00.

struct Poke {  // bytes written at a byte offset into an otherwise zero buffer
  int offset;
  std::vector<std::uint8_t> bytes;
};

struct HandCase {
  GgmlType type;
  std::int64_t n;                            // elements decoded
  std::vector<Poke> pokes;
  std::vector<std::pair<int, float>> expect;  // element index -> exact value
};

const std::vector<HandCase>& hand_cases() {
  static const std::vector<HandCase> cases = {
      // 1.5f = 0x3FC00000, -2.0f = 0xC0000000, little-endian.
      {GgmlType::F32, 2, {{0, {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0}}},
       {{0, 1.5f}, {1, -2.0f}}},
      // 0x3C00 = 1, 0xC000 = -2, 0x0001 = 2^-24 (smallest subnormal), 0x7C00 = +inf.
      {GgmlType::F16, 4, {{0, {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0x00, 0x7C}}},
       {{0, 1.0f}, {1, -2.0f}, {2, 5.9604644775390625e-08f}, {3, INFINITY}}},
      // bf16 is the top half of a float: 0x3FC0 -> 1.5, 0xC080 -> -4.
      {GgmlType::BF16, 2, {{0, {0xC0, 0x3F, 0x80, 0xC0}}}, {{0, 1.5f}, {1, -4.0f}}},
      // Q4_0 (d | qs[16]): d = 0.5; qs[j] = (15 - j) << 4 | j, so element j < 16 has q = j and
      // element 16 + j has q = 15 - j; x = 0.5 * (q - 8).
      {GgmlType::Q4_0, 32,
       {{0, {0x00, 0x38}},
        {2, {0xF0, 0xE1, 0xD2, 0xC3, 0xB4, 0xA5, 0x96, 0x87, 0x78, 0x69, 0x5A, 0x4B, 0x3C, 0x2D,
             0x1E, 0x0F}}},
       {{0, -4.0f}, {8, 0.0f}, {15, 3.5f}, {16, 3.5f}, {20, 1.5f}, {31, -4.0f}}},
      // Q4_1 (d | m | qs[16]): d = 0.25, m = -1, same qs; x = 0.25 * q - 1.
      // e5: q 5 -> 0.25; e15: 15 -> 2.75; e20: 15 - 4 = 11 -> 1.75; e31: 0 -> -1.
      {GgmlType::Q4_1, 32,
       {{0, {0x00, 0x34, 0x00, 0xBC}},
        {4, {0xF0, 0xE1, 0xD2, 0xC3, 0xB4, 0xA5, 0x96, 0x87, 0x78, 0x69, 0x5A, 0x4B, 0x3C, 0x2D,
             0x1E, 0x0F}}},
       {{0, -1.0f}, {5, 0.25f}, {15, 2.75f}, {16, 2.75f}, {20, 1.75f}, {31, -1.0f}}},
      // Q5_0 (d | qh[4] | qs[16]): d = 1; qh = 01 00 80 FF sets bit 4 of elements 0, 23 and
      // 24..31; every qs byte is 0x3A: low 4 bits 10 (elements 0..15), 3 (16..31).
      // x = q - 16: e0 26 -> 10; e1 10 -> -6; e16 3 -> -13; e22 3 -> -13; e23 19 -> 3; e31 -> 3.
      {GgmlType::Q5_0, 32,
       {{0, {0x00, 0x3C, 0x01, 0x00, 0x80, 0xFF}}, {6, std::vector<std::uint8_t>(16, 0x3A)}},
       {{0, 10.0f}, {1, -6.0f}, {16, -13.0f}, {22, -13.0f}, {23, 3.0f}, {24, 3.0f}, {31, 3.0f}}},
      // Q5_1 (d | m | qh[4] | qs[16]): d = 0.5, m = 2; qh = 00 80 01 00 sets bit 4 of elements
      // 15 and 16; qs bytes 0xF1: low 1, high 15. x = 0.5 * q + 2:
      // e0 1 -> 2.5; e15 17 -> 10.5; e16 31 -> 17.5; e17 15 -> 9.5.
      {GgmlType::Q5_1, 32,
       {{0, {0x00, 0x38, 0x00, 0x40, 0x00, 0x80, 0x01, 0x00}},
        {8, std::vector<std::uint8_t>(16, 0xF1)}},
       {{0, 2.5f}, {14, 2.5f}, {15, 10.5f}, {16, 17.5f}, {17, 9.5f}, {31, 9.5f}}},
      // Q8_0 (d | qs[32] int8): d = 0.125; qs 0x80 = -128 -> -16, 0x7F = 127 -> 15.875,
      // 1 -> 0.125, 0xFF = -1 -> -0.125.
      {GgmlType::Q8_0, 32,
       {{0, {0x00, 0x30, 0x80, 0x7F, 0x01}}, {33, {0xFF}}},
       {{0, -16.0f}, {1, 15.875f}, {2, 0.125f}, {3, 0.0f}, {31, -0.125f}}},
      // Q4_K (d | dmin | scales[12] | qs[128]): d = 1, dmin = 0.5,
      // sc = {1, 2, 3, 4, 17, 33, 48, 63}, m = {0, 1, 2, 3, 20, 40, 63, 5}, packed as
      //   bytes 0..3  sc[0..3] | (sc[4..7] >> 4) << 6 = 41 82 C3 C4
      //   bytes 4..7  m[0..3]  | (m[4..7] >> 4) << 6  = 40 81 C2 03
      //   bytes 8..11 (sc[4..7] & 15) | (m[4..7] & 15) << 4 = 41 81 F0 5F
      // qs: sub-blocks 2g and 2g+1 share qs[32g..32g+31], low then high nibble.
      //   qs[0] = 2F: e0 (s0) q 15, e32 (s1) q 2; qs[33] = 7A: e65 (s2) 10, e97 (s3) 7;
      //   qs[95] = E3: e159 (s4) 3, e191 (s5) 14; qs[96] = 9C: e192 (s6) 12, e224 (s7) 9.
      // x = d*sc*q - dmin*m: e0 15; e1 0; e32 4 - 0.5 = 3.5; e33 -0.5; e65 30 - 1 = 29;
      // e97 28 - 1.5 = 26.5; e128 -10; e159 51 - 10 = 41; e191 462 - 20 = 442;
      // e192 576 - 31.5 = 544.5; e224 567 - 2.5 = 564.5; e255 -2.5.
      {GgmlType::Q4_K, 256,
       {{0, {0x00, 0x3C, 0x00, 0x38}},
        {4, {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81, 0xC2, 0x03, 0x41, 0x81, 0xF0, 0x5F}},
        {16 + 0, {0x2F}}, {16 + 33, {0x7A}}, {16 + 95, {0xE3}}, {16 + 96, {0x9C}}},
       {{0, 15.0f}, {1, 0.0f}, {32, 3.5f}, {33, -0.5f}, {65, 29.0f}, {97, 26.5f},
        {128, -10.0f}, {159, 41.0f}, {191, 442.0f}, {192, 544.5f}, {224, 564.5f},
        {255, -2.5f}}},
      // Q5_K (d | dmin | scales[12] | qh[32] | qs[128]): d, dmin, scales and qs as Q4_K.
      // Bit 4 of element 32s + l is bit s of qh[l]: qh[0] = 0x82 (e32, e224), qh[1] = 0x04
      // (e65), qh[31] = 0x10 (e159).
      // e32 q 18: 36 - 0.5 = 35.5; e64 q 0: -1; e65 q 26: 78 - 1 = 77; e97 q 7: 26.5;
      // e159 q 19: 323 - 10 = 313; e192 q 12: 544.5; e224 q 25: 1575 - 2.5 = 1572.5.
      {GgmlType::Q5_K, 256,
       {{0, {0x00, 0x3C, 0x00, 0x38}},
        {4, {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81, 0xC2, 0x03, 0x41, 0x81, 0xF0, 0x5F}},
        {16 + 0, {0x82, 0x04}}, {16 + 31, {0x10}},
        {48 + 0, {0x2F}}, {48 + 33, {0x7A}}, {48 + 95, {0xE3}}, {48 + 96, {0x9C}}},
       {{0, 15.0f}, {1, 0.0f}, {32, 35.5f}, {33, -0.5f}, {64, -1.0f}, {65, 77.0f},
        {97, 26.5f}, {159, 313.0f}, {191, 442.0f}, {192, 544.5f}, {224, 1572.5f}}},
      // Q6_K (ql[128] | qh[64] | scales[16] int8 | d): d = 0.5,
      // scales = {1..8, -1..-8}; element e uses scales[e / 16]. In half h (128 elements),
      // quarter k, lane l: low 4 bits from ql[64h + 32(k%2) + l] (low nibble k < 2, high
      // k >= 2), bits 4-5 from qh[32h + l] >> 2k. x = d * sc * (q - 32).
      //   ql[0] = A5: e0 5, e64 10;  qh[0] = E4 = 11 10 01 00: e0 +0, e32 +16, e64 +32, e96 +48
      //   ql[35] = 3C: e35 12, e99 3; qh[3] = 0C: e35 +48
      //   ql[80] = 01: e144 1, e208 0
      //   ql[127] = F7: e191 7, e255 15; qh[63] = 84: e191 +16, e255 +32
      // e0 q 5: 0.5*1*-27 = -13.5; e3 q 0: -16; e16 q 0: 0.5*2*-32 = -32; e32 q 16: 1.5*-16
      // = -24; e35 q 60: 1.5*28 = 42; e64 q 42: 2.5*10 = 25; e96 q 48: 3.5*16 = 56;
      // e99 q 3: 3.5*-29 = -101.5; e144 q 1: -1*-31 = 31; e191 q 23: -2*-9 = 18;
      // e208 q 0: -3*-32 = 96; e255 q 47: -4*15 = -60.
      {GgmlType::Q6_K, 256,
       {{0, {0xA5}}, {35, {0x3C}}, {80, {0x01}}, {127, {0xF7}},
        {128 + 0, {0xE4}}, {128 + 3, {0x0C}}, {128 + 63, {0x84}},
        {192, {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xFF, 0xFE, 0xFD, 0xFC, 0xFB,
               0xFA, 0xF9, 0xF8}},
        {208, {0x00, 0x38}}},
       {{0, -13.5f}, {3, -16.0f}, {16, -32.0f}, {32, -24.0f}, {35, 42.0f}, {64, 25.0f},
        {96, 56.0f}, {99, -101.5f}, {144, 31.0f}, {191, 18.0f}, {208, 96.0f}, {255, -60.0f}}},
  };
  return cases;
}

void PrintTo(const HandCase& c, std::ostream* os) { *os << ggml_type_name(c.type); }

class QuantHandBlock : public ::testing::TestWithParam<HandCase> {};

TEST_P(QuantHandBlock, DecodesToHandComputedValues) {
  const HandCase& c = GetParam();
  const auto& t = ggml_type_traits(c.type);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(c.n / t.block_elems * t.block_bytes));
  for (const Poke& p : c.pokes) {
    ASSERT_LE(p.offset + p.bytes.size(), bytes.size()) << "poke past the block";
    std::copy(p.bytes.begin(), p.bytes.end(), bytes.begin() + p.offset);
  }
  std::vector<float> y(static_cast<std::size_t>(c.n));
  dequantize_row(c.type, bytes.data(), y.data(), c.n);
  for (const auto& [index, value] : c.expect)
    EXPECT_EQ(y[static_cast<std::size_t>(index)], value) << "element " << index;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantHandBlock, ::testing::ValuesIn(hand_cases()),
                         type_name_of<HandCase>);

TEST(QuantHandBlock, CoversEveryType) {
  std::set<GgmlType> covered;
  for (const auto& c : hand_cases()) covered.insert(c.type);
  for (const auto& t : kGgmlTypes) EXPECT_TRUE(covered.count(t.type)) << t.name;
}

// --- (b) round trip on seeded data ----------------------------------------------------------
// Per block, |x - dequant(quant(x))| <= frac * measure + slack * amax, where measure is
//   kAmax        max |x|                         (symmetric formats)
//   kRange       max(x) - min(x)                 (legacy min/max formats)
//   kRangeZero   max(x) - min(0, min(x))         (k-quants: mins are stored as offsets <= 0)
// and slack covers rounding the block scales to fp16 (2^-11 relative each). The bounds hold
// while the legacy scales stay fp16-normal (>= 2^-14), as they do for the data below;
// subnormal scales lose relative precision. Measured worst error / bound is 0.87..0.99.
enum class Measure { kAmax, kRange, kRangeZero };

struct RoundTripCase {
  GgmlType type;
  Measure measure;
  float frac;
  float slack;
};

const std::vector<RoundTripCase>& round_trip_cases() {
  static const std::vector<RoundTripCase> cases = {
      {GgmlType::F32, Measure::kAmax, 0.0f, 0.0f},
      // Element-wise blocks: half an ulp, relative (all test values are fp16-normal).
      {GgmlType::F16, Measure::kAmax, 0x1p-11f, 0.0f},
      {GgmlType::BF16, Measure::kAmax, 0x1p-8f, 0.0f},
      // d = amax/8 with the signed extreme at q = 0; its opposite is capped at q = 15, one
      // full step short, so the bound is d (not d/2). fp16(d) adds up to 8 * d * 2^-11.
      {GgmlType::Q4_0, Measure::kAmax, 1.0f / 8, 0x1p-10f},
      {GgmlType::Q5_0, Measure::kAmax, 1.0f / 16, 0x1p-10f},
      // d = range/15, q = round: d/2; fp16 of d (15 steps) and of m add <= 2^-11*(range+amax).
      {GgmlType::Q4_1, Measure::kRange, 1.0f / 30, 0x1p-9f},
      {GgmlType::Q5_1, Measure::kRange, 1.0f / 62, 0x1p-9f},
      // d = amax/127, round to nearest: d/2 + 127 * d * 2^-11.
      {GgmlType::Q8_0, Measure::kAmax, 1.0f / 254, 0x1p-10f},
      // Sub-block step rounded up to a multiple of d = max_step/63, offset rounded to a
      // multiple of dmin = max_offset/63: error <= R/(2*15) * (1 + 1/63) * (1 + 1/126) ~ R/29.3.
      {GgmlType::Q4_K, Measure::kRangeZero, 1.0f / 29, 0.0f},
      {GgmlType::Q5_K, Measure::kRangeZero, 1.0f / 60, 0.0f},  // R/62 * 1.024 ~ R/60.5
      // Step amax/31 rounded up to a multiple of d = max_step/127: amax/62 * (1 + 1/127).
      {GgmlType::Q6_K, Measure::kAmax, 1.0f / 61, 0.0f},
  };
  return cases;
}

float uniform(std::mt19937& rng) {  // [-1, 1), independent of the library's distributions
  return float(rng() >> 8) * 0x1p-23f - 1.0f;
}

// Chunks of `len` values of varied shape: mixed magnitudes per 32 (so k-quant sub-block
// scales differ), small positive, large negative-shifted, an outlier, all negative, constant.
std::vector<float> seeded_values(std::int64_t len, int n_chunks, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x;
  for (int c = 0; c < n_chunks; ++c) {
    for (std::int64_t i = 0; i < len; ++i) {
      const float u = uniform(rng);
      switch (c % 6) {
        case 0: x.push_back(u * float(1 + (i / 32) % 4)); break;
        case 1: x.push_back(u * 1e-2f + 5e-3f); break;
        case 2: x.push_back(u * 300.0f - 150.0f); break;
        case 3: x.push_back(i == 5 ? -2.0e3f : u * 0.1f); break;
        case 4: x.push_back(-(u + 1.5f) * 10.0f); break;
        default: x.push_back(0.37f); break;
      }
    }
  }
  return x;
}

float block_measure(const float* x, std::int64_t n, Measure m) {
  float lo = x[0], hi = x[0], amax = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  switch (m) {
    case Measure::kAmax: return amax;
    case Measure::kRange: return hi - lo;
    case Measure::kRangeZero: return hi - std::min(0.0f, lo);
  }
  return 0;
}

void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << ggml_type_name(c.type); }

class QuantRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTrip, ErrorWithinBoundPerBlock) {
  const RoundTripCase& c = GetParam();
  const std::int64_t block = ggml_type_traits(c.type).block_elems;
  const std::int64_t len = std::max<std::int64_t>(block, 32);
  const std::vector<float> x = seeded_values(len, 24, 1234);
  const auto n = static_cast<std::int64_t>(x.size());
  const std::vector<std::uint8_t> q = quantize(c.type, x);
  std::vector<float> y(x.size());
  dequantize_row(c.type, q.data(), y.data(), n);

  float worst_excess = -1;  // error / bound of the worst element
  std::int64_t worst = -1;
  for (std::int64_t b = 0; b < n / block; ++b) {
    const float* xb = x.data() + b * block;
    const float bound = c.frac * block_measure(xb, block, c.measure) +
                        c.slack * block_measure(xb, block, Measure::kAmax);
    for (std::int64_t i = b * block; i < (b + 1) * block; ++i) {
      const float err = std::fabs(x[i] - y[i]);
      const float excess = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0f);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  EXPECT_LE(worst_excess, 1.0f) << "worst element " << worst << " (block " << worst / block
                                << "): x = " << x[worst] << ", dequantized " << y[worst];
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         type_name_of<RoundTripCase>);

TEST(QuantRoundTrip, CoversEveryType) {
  std::set<GgmlType> covered;
  for (const auto& c : round_trip_cases()) covered.insert(c.type);
  for (const auto& t : kGgmlTypes) EXPECT_TRUE(covered.count(t.type)) << t.name;
}

// --- (c) zeros, (d) size check --------------------------------------------------------------
struct TypeCase {
  GgmlType type;
};

void PrintTo(const TypeCase& c, std::ostream* os) { *os << ggml_type_name(c.type); }

// Every supported type, or only those with blocks of more than one element.
std::vector<TypeCase> type_cases(bool blocks_only) {
  std::vector<TypeCase> out;
  for (const auto& t : kGgmlTypes)
    if (!blocks_only || t.block_elems > 1) out.push_back({t.type});
  return out;
}

class QuantEveryType : public ::testing::TestWithParam<TypeCase> {};

TEST_P(QuantEveryType, ZeroBlocksDecodeToZero) {
  const GgmlTypeTraits& t = ggml_type_traits(GetParam().type);
  const auto n = 2 * std::max<std::int64_t>(t.block_elems, 32);
  const std::vector<float> x(static_cast<std::size_t>(n), 0.0f);
  const std::vector<std::uint8_t> q = quantize(t.type, x);
  ASSERT_EQ(q.size(), x.size() / static_cast<std::size_t>(t.block_elems) *
                          static_cast<std::size_t>(t.block_bytes));
  std::vector<float> y(x.size(), 1.0f);
  dequantize_row(t.type, q.data(), y.data(), static_cast<std::int64_t>(y.size()));
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], 0.0f) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantEveryType, ::testing::ValuesIn(type_cases(false)),
                         type_name_of<TypeCase>);

// Element-wise types (block size 1) have no partial blocks.
class QuantBlockType : public ::testing::TestWithParam<TypeCase> {};

TEST_P(QuantBlockType, DispatchersRejectPartialBlocks) {
  const GgmlTypeTraits& t = ggml_type_traits(GetParam().type);
  const std::int64_t n = t.block_elems + 1;
  std::vector<float> x(static_cast<std::size_t>(2 * t.block_elems), 0.0f);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(2 * t.block_bytes), 0);
  EXPECT_THROW(dequantize_row(t.type, q.data(), x.data(), n), std::invalid_argument);
  EXPECT_THROW(quantize_row(t.type, x.data(), q.data(), n), std::invalid_argument);
  EXPECT_THROW(quantize(t.type, std::vector<float>(static_cast<std::size_t>(n))),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(BlockTypes, QuantBlockType, ::testing::ValuesIn(type_cases(true)),
                         type_name_of<TypeCase>);

}  // namespace
}  // namespace tapdiff
