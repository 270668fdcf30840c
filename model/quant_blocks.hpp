// ggml's quantization block layouts, byte for byte as GGUF stores them. Blocks in a tensor are
// packed back to back with no alignment, so code copies a block out (memcpy) before reading
// its fields rather than casting a pointer into the file.
#pragma once

#include <cstdint>
#include <cstring>

namespace tapdiff {

inline constexpr int kQK = 32;    // elements per block, legacy quants
inline constexpr int kQK_K = 256; // elements per super-block, k-quants

struct BlockQ4_0 {  // x = d * (q - 8), q in 0..15; qs[j] low nibble: element j, high: j + 16
  std::uint16_t d;
  std::uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {  // x = d * q + m
  std::uint16_t d, m;
  std::uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {  // x = d * (q - 16); bit 4 of element j is bit j of qh
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {  // x = d * q + m
  std::uint16_t d, m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {  // x = d * q
  std::uint16_t d;
  std::int8_t qs[kQK];
};
// k-quants: 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes:
// x = d * sc[j] * q - dmin * m[j]
struct BlockQ4_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQK_K / 8];
  std::uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16 with int8 scales: x = d * scales[j] * (q - 32), q 6 bits (4 in ql, 2 in qh)
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];
  std::uint8_t qh[kQK_K / 4];
  std::int8_t scales[kQK_K / 16];
  std::uint16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

template <typename Block>
inline Block load_block(const void* src, std::int64_t index) {
  Block b;
  std::memcpy(&b, static_cast<const std::uint8_t*>(src) + index * sizeof(Block), sizeof(Block));
  return b;
}

template <typename Block>
inline void store_block(void* dst, std::int64_t index, const Block& b) {
  std::memcpy(static_cast<std::uint8_t*>(dst) + index * sizeof(Block), &b, sizeof(Block));
}

}  // namespace tapdiff
