// The encoded blocks as precision q8's host products read them with AVX2: one activation row in
// matmul_q8_host.cpp, batches in matmul_q8_tiles_host.cpp. Each gives the integers and scales
// unpack_run and unpack_k_run give (dequant.hpp's layouts), so both paths multiply the same
// numbers. Host only: include from x86-64 translation units compiled by GCC.
#pragma once

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "engine/kernels/dequant.hpp"
#include "engine/kernels/lanes_x86.hpp"

namespace tapdiff::engine::q8_avx2 {

#define TD_Q8_AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

TD_Q8_AVX2_INLINE __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The low 16 bits of eight 32-bit words, packed.
TD_Q8_AVX2_INLINE __m128i low_halves(__m256i words) {
  const __m256i packed = _mm256_packus_epi32(_mm256_and_si256(words, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256());
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

template <GgmlType kType>
using LegacyBlock = std::conditional_t<
    kType == GgmlType::Q4_0, BlockQ4_0,
    std::conditional_t<kType == GgmlType::Q4_1, BlockQ4_1,
                       std::conditional_t<kType == GgmlType::Q5_0, BlockQ5_0,
                                          std::conditional_t<kType == GgmlType::Q5_1, BlockQ5_1, BlockQ8_0>>>>;

// Byte j = 0x10 where bit j of the 32 bits at `bits` is set, else 0: Q5_0's and Q5_1's bit 4.
TD_Q8_AVX2_INLINE __m256i bit_4_of_bytes(const std::uint8_t* bits) {
  std::uint32_t word;
  memcpy(&word, bits, sizeof word);
  // Byte j takes byte j / 8 of the word, then is all ones exactly where its bit j % 8 is set.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(word)), _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i all_but_bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, all_but_bit), _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// A legacy block's 32 integers in element order: Q8_0's signed, the others' nibbles, the 16
// low then the 16 high, unsigned, with Q5_0's and Q5_1's bit 4 from qh (dequant.hpp's q5_ints).
template <GgmlType kType>
TD_Q8_AVX2_INLINE __m256i legacy_ints(const std::uint8_t* block) {
  if constexpr (kType == GgmlType::Q8_0) {
    return load32(block + offsetof(BlockQ8_0, qs));
  } else {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(LegacyBlock<kType>, qs)));
    const __m256i nibbles = _mm256_and_si256(_mm256_setr_m128i(packed, _mm_srli_epi16(packed, 4)), _mm256_set1_epi8(0x0F));
    if constexpr (kType == GgmlType::Q5_0 || kType == GgmlType::Q5_1)
      return _mm256_or_si256(nibbles, bit_4_of_bytes(block + offsetof(LegacyBlock<kType>, qh)));
    return nibbles;
  }
}

// The scales and offsets of eight blocks, as unpack_run's, from their first 32-bit words
// (`heads`: d in the low halves, m in the high): the fp16 d widened (exact), Q4_0's offset -8 d,
// Q5_0's -16 d, Q4_1's and Q5_1's m, Q8_0's none.
template <GgmlType kType>
__attribute__((target("avx2,f16c"), always_inline)) static inline void legacy_scales(__m256i heads, __m256& scale, __m256& offset) {
  scale = _mm256_cvtph_ps(low_halves(heads));
  if constexpr (kType == GgmlType::Q4_0 || kType == GgmlType::Q5_0)
    offset = _mm256_mul_ps(_mm256_set1_ps(kType == GgmlType::Q4_0 ? -8.0f : -16.0f), scale);
  else if constexpr (kType == GgmlType::Q4_1 || kType == GgmlType::Q5_1)
    offset = _mm256_cvtph_ps(low_halves(_mm256_srli_epi32(heads, 16)));
  else
    offset = _mm256_setzero_ps();
}

// The first words of the blocks from `run` on: gathered (those in `present`; the others 0),
// or the first n moved into lanes one by one (lanes_x86.hpp). The one-row products
// (matmul_q8_decode) ran 15 to 22% faster with the moves on an AMD EPYC VM (Zen 4), Q4_0 to
// Q8_0 alike (bench_matmul's q8 column). The 16-row tiles gather: with the moves their Q4_0
// ran at 148 to 160 billion weights/s (gathered mostly 112 to 120, once 154) but their Q5_0 at
// 105 to 118 (gathered 145 to 160); neither is worth a per-type choice yet.
template <GgmlType kType>
__attribute__((target("avx2"), always_inline)) static inline __m256i legacy_heads_gathered(const std::uint8_t* run, __m256i present) {
  return _mm256_mask_i32gather_epi32(
      _mm256_setzero_si256(), reinterpret_cast<const int*>(run),
      _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(sizeof(LegacyBlock<kType>)))),
      present, 1);
}
template <GgmlType kType>
__attribute__((target("avx2"), always_inline)) static inline __m256i legacy_heads_moved(const std::uint8_t* run, int n) {
  const auto head = [&](int b) { return b < n ? int(dequant_detail::u32(run + b * sizeof(LegacyBlock<kType>))) : 0; };
  return _mm256_setr_m128i(four_lanes(head, 0), four_lanes(head, 4));
}

// A legacy type whose one-row products read the encoded bytes in registers: not under a
// decoder quirk (matmul_q8_row decodes those, through unpack_run).
inline bool legacy_in_registers(const Encoded& w) {
  const DequantQuirks q = w.quirks;
  const GgmlType t = w.type;
  return !q.q8_scale_as_bf16 && !q.q8_block_stride_quants && !q.q8_quant_unsigned &&
         (t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
          t == GgmlType::Q8_0);
}

// One run's q8_block_term floats added into a row's eight lanes, lane i taking block i of the
// run at `run` (its first n <= 8 blocks; the other lanes are left as they are, their blocks not
// read): the run's integer sums, the activations' scales dx and scaled sums dsx of those blocks. The same
// operations in the same order as matmul_q8_row's (no FMA).
template <GgmlType kType>
__attribute__((target("avx2,f16c"), always_inline)) static inline __m256 legacy_run_added(
    __m256 lanes, const std::uint8_t* run, int n, __m256i sums, const float* dx, const float* dsx) {
  const __m256i present = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 d, offset;
  legacy_scales<kType>(legacy_heads_moved<kType>(run, n), d, offset);
  const __m256 ax = _mm256_maskload_ps(dx, present), as = _mm256_maskload_ps(dsx, present);
  const __m256 term = _mm256_add_ps(_mm256_mul_ps(ax, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sums))), _mm256_mul_ps(offset, as));
  return _mm256_blendv_ps(lanes, _mm256_add_ps(lanes, term), _mm256_castsi256_ps(present));
}

// Q4_K: 32 bytes of nibbles at qs + 32 c are blocks 2c (low) and 2c + 1 (high), 0..15.
TD_Q8_AVX2_INLINE void q4_k_blocks(const std::uint8_t* qs, int c, __m256i& low, __m256i& high) {
  const __m256i packed = load32(qs + 32 * c), low4 = _mm256_set1_epi8(0x0F);
  low = _mm256_and_si256(packed, low4);
  high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
}

// Q5_K: q4_k_blocks' integers with bit j of each byte of qh (32 bytes) as bit 4 of block j.
TD_Q8_AVX2_INLINE void q5_k_fifth_bits(const std::uint8_t* qh, int c, __m256i& low, __m256i& high) {
  const __m256i bits = load32(qh), bit = _mm256_set1_epi8(0x01);
  low = _mm256_or_si256(low, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * c), bit), 4));
  high = _mm256_or_si256(high, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * c + 1), bit), 4));
}

// Q6_K's two high bits at `shift` in each byte of qh, moved to bits 4 and 5.
template <int shift>
TD_Q8_AVX2_INLINE __m256i q6_k_high(__m256i qh) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), _mm256_set1_epi8(0x03)), 4);
}

// Q6_K half h of superblock b: its four blocks' integers into q[0..3] (dequant.hpp's q6_k_quarter_ints)
// unsigned, q + 32 (0..63).
TD_Q8_AVX2_INLINE void q6_k_blocks(const std::uint8_t* b, int h, __m256i* q) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i l0 = load32(b + offsetof(BlockQ6_K, ql) + 64 * h), l1 = load32(b + offsetof(BlockQ6_K, ql) + 64 * h + 32);
  const __m256i hb = load32(b + offsetof(BlockQ6_K, qh) + 32 * h);
  q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), q6_k_high<0>(hb));
  q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4), q6_k_high<2>(hb));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), q6_k_high<4>(hb));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), q6_k_high<6>(hb));
}

}  // namespace tapdiff::engine::q8_avx2
