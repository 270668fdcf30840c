// decoder_structure: rows a wrong decoder left, against rows any other bug leaves. The wrong
// decoders are written here two ways: a decoder of Q4_0 with its bug, and model/'s decoder fed
// the bytes a decoder reading the wrong bits would have read (a scale's index, a min's high
// bits, the quants' high bits): the same values as the buggy decoder's.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "diff/block_structure.hpp"
#include "model/dequantize.hpp"
#include "model/half.hpp"
#include "model/quant_blocks.hpp"
#include "model/quantize.hpp"

namespace tapdiff::diff {
namespace {

constexpr std::int64_t kRowElems = 512;
constexpr int kRows = 3;

std::vector<std::uint8_t> quantized_rows(GgmlType type) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> values(std::size_t(kRows * kRowElems));
  for (float& v : values) v = normal(rng);
  return quantize(type, values);
}

Rows decoded(GgmlType type, const std::vector<std::uint8_t>& bytes) {
  const std::size_t row_bytes = bytes.size() / kRows;
  Rows out(kRows, Row(kRowElems));
  for (int r = 0; r < kRows; ++r) dequantize_row(type, bytes.data() + std::size_t(r) * row_bytes, out[r].data(), kRowElems);
  return out;
}

// A Q4_0 decoder with one of two bugs: quants without their offset of 8, or the nibbles of byte j
// read as elements 2j and 2j + 1 (ggml's are j and j + 16).
Rows q4_0_decoded_wrong(const std::vector<std::uint8_t>& bytes, bool no_offset, bool interleaved) {
  Rows out(kRows, Row(kRowElems));
  for (int r = 0; r < kRows; ++r)
    for (std::int64_t b = 0; b < kRowElems / kQK; ++b) {
      const auto blk = load_block<BlockQ4_0>(bytes.data(), r * kRowElems / kQK + b);
      const float d = fp16_to_fp32(blk.d), offset = no_offset ? 0.0f : 8.0f;
      for (int j = 0; j < kQK / 2; ++j) {
        const int lo = interleaved ? 2 * j : j, hi = interleaved ? 2 * j + 1 : j + kQK / 2;
        out[r][std::size_t(b * kQK + lo)] = (float(blk.qs[j] & 0x0F) - offset) * d;
        out[r][std::size_t(b * kQK + hi)] = (float(blk.qs[j] >> 4) - offset) * d;
      }
    }
  return out;
}

TEST(DecoderStructure, QuantsInAnotherOrderAreNamed) {
  const auto bytes = quantized_rows(GgmlType::Q4_0);
  const std::string s = decoder_structure(decoded(GgmlType::Q4_0, bytes), q4_0_decoded_wrong(bytes, false, true),
                                          GgmlType::Q4_0);
  EXPECT_NE(s.find("in another order"), std::string::npos) << s;
  EXPECT_NE(s.find("48 of 48 Q4_0 blocks"), std::string::npos) << s;
}

TEST(DecoderStructure, AMissingZeroPointIsCountedInSteps) {
  const auto bytes = quantized_rows(GgmlType::Q4_0);
  const std::string s = decoder_structure(decoded(GgmlType::Q4_0, bytes), q4_0_decoded_wrong(bytes, true, false),
                                          GgmlType::Q4_0);
  EXPECT_NE(s.find("shifted by 8 quantization steps"), std::string::npos) << s;
}

// A decoder reading the wrong bits of a block: each block's byte at `offset` changed by `change`.
struct WrongBits {
  const char* what;
  GgmlType type;
  std::size_t block_bytes, offset;
  std::function<std::uint8_t(const std::uint8_t* block)> change;
  std::vector<const char*> words;  // phrases of the shape named
};

std::vector<WrongBits> wrong_bits() {
  const auto xor_with = [](std::size_t at, std::uint8_t mask) {
    return [=](const std::uint8_t* b) { return std::uint8_t(b[at] ^ mask); };
  };
  constexpr std::size_t q6_scales = offsetof(BlockQ6_K, scales), q6_qh = offsetof(BlockQ6_K, qh);
  constexpr std::size_t q4k_scales = offsetof(BlockQ4_K, scales);
  return {
      {"sub-block 5's scale read from sub-block 4", GgmlType::Q6_K, sizeof(BlockQ6_K), q6_scales + 5,
       [=](const std::uint8_t* b) { return b[q6_scales + 4]; },
       {"times a factor of its own, zero kept", "only in sub-block 5 of a block"}},
      {"a quant's high bits from another pair", GgmlType::Q6_K, sizeof(BlockQ6_K), q6_qh + 3, xor_with(q6_qh + 3, 0x30),
       {"whole multiple of 16 quantization steps", "high bits"}},
      // Byte 4 + j of the packed scales carries the min of sub-block 4 + j in its top two bits,
      // byte j the scale of sub-block 4 + j.
      {"a min's high bits", GgmlType::Q4_K, sizeof(BlockQ4_K), q4k_scales + 6, xor_with(q4k_scales + 6, 0xC0),
       {"shifted by a constant of its own", "only in sub-block 6 of a block"}},
      {"a scale's high bits", GgmlType::Q4_K, sizeof(BlockQ4_K), q4k_scales + 1, xor_with(q4k_scales + 1, 0xC0),
       {"affine map", "only in sub-block 5 of a block"}},
  };
}

TEST(DecoderStructure, BitsReadFromTheWrongPlaceAreNamed) {
  for (const WrongBits& w : wrong_bits()) {
    const auto bytes = quantized_rows(w.type);
    auto wrong = bytes;
    for (std::size_t at = 0; at + w.block_bytes <= wrong.size(); at += w.block_bytes)
      wrong[at + w.offset] = w.change(bytes.data() + at);
    const std::string s = decoder_structure(decoded(w.type, bytes), decoded(w.type, wrong), w.type);
    for (const char* phrase : w.words) EXPECT_NE(s.find(phrase), std::string::npos) << w.what << ": " << s;
  }
}

// What other bugs leave in an embedding row has none of these shapes.
TEST(DecoderStructure, OtherBugsHaveNoDecoderShape) {
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const Rows e = decoded(type, quantized_rows(type));
    const auto each = [&](auto f) {
      Rows x = e;
      for (std::size_t r = 0; r < x.size(); ++r)
        for (std::size_t i = 0; i < x[r].size(); ++i) x[r][i] = f(r, i);
      return x;
    };
    const std::string name = std::string(ggml_type_name(type));
    EXPECT_EQ(decoder_structure(e, e, type), "") << name;
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return e[(r + 1) % kRows][i]; }), type), "")
        << name << ": another token's row";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return e[r][i] * 1.25f; }), type), "")
        << name << ": the row scaled";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return e[r][i] + 0.125f; }), type), "")
        << name << ": a constant added";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return bf16_to_fp32(fp32_to_bf16(e[r][i])); }),
                                type),
              "")
        << name << ": rounded to bf16";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return e[r][(i + 1) % kRowElems]; }), type), "")
        << name << ": the row read one element late";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return i < 3 * kRowElems / 4 ? e[r][i] : 0.0f; }),
                                type),
              "")
        << name << ": the row's last quarter never written";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) { return i < kRowElems / 2 ? e[r][i] : 2 * e[r][i]; }),
                                type),
              "")
        << name << ": the row's second half scaled";
    EXPECT_EQ(decoder_structure(e, each([&](std::size_t r, std::size_t i) {
                                  return e[r][i] + 1e-3f * float((r * 7919 + i * 104729) % 201) - 0.1f;
                                }),
                                type),
              "")
        << name << ": noise";
  }
}

TEST(DecoderStructure, PlainFloatsHaveNoBlocks) {
  const Rows e = {{1, 2, 3, 4}}, x = {{2, 1, 4, 3}};
  EXPECT_EQ(decoder_structure(e, x, GgmlType::F32), "");
}

}  // namespace
}  // namespace tapdiff::diff
