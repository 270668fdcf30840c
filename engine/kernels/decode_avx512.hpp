// The host's AVX-512 decoders of every GGUF encoding, shared by the decode products
// (matvec_avx512_host.cpp) and dequantization (dequant_avx512_host.cpp): each sub-block of 32
// weights is decoded into two registers of sixteen floats and handed to a sink, which
// multiplies them into a row's sums or stores them. The four- and five-bit encodings decode
// through a table of the 16 or 32 values a block's integers can take, each computed with
// dequant.hpp's expression, so every weight is dequant.hpp's bit for bit; the others convert
// their integers as dequant.hpp does. The fp16 scales convert in hardware: f16_bits_to_f32's
// value but for a NaN's bits (a NaN stays a NaN).
//
// Included only by host .cpp files compiled for x86-64 with GCC or Clang (TD_DECODE_AVX512);
// every function carries its target attribute, so the rest of the file needs no -mavx512f.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "engine/kernels/dequant.hpp"
#include "engine/kernels/prefetch.hpp"
#include "model/ggml_type.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include "engine/kernels/avx512.hpp"
#include "engine/kernels/lanes_x86.hpp"
#define TD_DECODE_AVX512 1
#endif

#if TD_DECODE_AVX512
namespace tapdiff::engine::decode_avx512 {

#define TD_AVX512 __attribute__((target("avx512f,f16c")))
#define TD_AVX512_INLINE TD_AVX512 __attribute__((always_inline)) static inline

namespace dd = dequant_detail;

// Whether this CPU runs the decoders.
inline bool supported() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
  return yes;
}

// A sub-block's 32 values: elements 0..15 and 16..31.
struct Halves {
  __m512 lo, hi;
};

// round_to(kRound, v) of sixteen floats (half.hpp), bit for bit. f16 converts there and back in
// hardware: nearest even, infinity from 65520 on, subnormals kept, a NaN quieted with the top
// ten bits of its payload, as round_to_f16 does. bf16 is round_to_bf16's integer expression.
template <ElemType kRound>
TD_AVX512_INLINE __m512 round_lanes(__m512 v) {
  if constexpr (kRound == ElemType::f16) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else if constexpr (kRound == ElemType::bf16) {
    const __m512i u = _mm512_castps_si512(v), high = _mm512_set1_epi32(int(0xffff0000u));
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), high);
    const __m512i quiet_nan = _mm512_or_si512(_mm512_and_si512(u, high), _mm512_set1_epi32(0x400000));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet_nan));
  } else {
    return v;
  }
}

template <ElemType kRound>
TD_AVX512_INLINE Halves round_halves(const Halves& w) {
  return {round_lanes<kRound>(w.lo), round_lanes<kRound>(w.hi)};
}

TD_AVX512_INLINE float scale_f16(const std::uint8_t* p) { return _cvtsh_ss(dd::u16(p)); }

// Sixteen bytes, each in a 32-bit lane.
TD_AVX512_INLINE __m512i widen16(const std::uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 0, 1, ..., 15; and first, first + 1, ..., first + 15 as floats (small integers: exact).
TD_AVX512_INLINE __m512i iota_epi32() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
TD_AVX512_INLINE __m512 iota(float first) { return _mm512_add_ps(_mm512_set1_ps(first), _mm512_cvtepi32_ps(iota_epi32())); }

// R rows side by side: row i's first byte; and how far ahead of a read to ask for the lines
// (prefetch.hpp), one or more passes of the group ahead: the rows are contiguous, so the
// group reads R streams that each next group continues.
template <int R>
struct RowGroup {
  const std::uint8_t* row[R];
  std::int64_t ahead;
};

// The first 16 or 32 bits of the blocks at p, p + kStride, ... (the first n <= 16; the
// others 0), moved into a register lane by lane (lanes_x86.hpp).
template <std::size_t kStride>
TD_AVX512_INLINE __m256i first_halves(const std::uint8_t* p, int n) {
  const auto at = [&](int k) { return k < n ? int(dd::u16(p + k * kStride)) : 0; };
  return _mm256_inserti128_si256(_mm256_castsi128_si256(eight_lanes16(at, 0)), eight_lanes16(at, 8), 1);
}
template <std::size_t kStride>
TD_AVX512_INLINE __m512i first_words(const std::uint8_t* p, int n) {
  const auto at = [&](int k) { return k < n ? int(dd::u32(p + k * kStride)) : 0; };
  const __m512i low = _mm512_inserti32x4(_mm512_castsi128_si512(four_lanes(at, 0)), four_lanes(at, 4), 1);
  return _mm512_inserti32x4(_mm512_inserti32x4(low, four_lanes(at, 8), 2), four_lanes(at, 12), 3);
}

// The scale d of blocks [b0, b0 + n) of each row (n <= 16) as floats in first, and where
// kSecond the offset m in second, which the loops then broadcast from memory: the blocks' first
// 16 or 32 bits (d, then m) converted sixteen at a time. A block's own scalar conversion and
// broadcast had been a third of its instructions; a gather of sixteen blocks' first words
// cost an AMD EPYC VM (Zen 4) 10 to 18% of the legacy encodings' matvec (bench_matmul: Q4_0
// 37.4 billion weights/s gathered, 44.2 so).
template <int R, std::size_t kBlockBytes, bool kSecond>
TD_AVX512_INLINE void block_scales(const RowGroup<R>& g, std::int64_t b0, int n, float (*first)[16],
                                   float (*second)[16]) {
  static_assert(offsetof(BlockQ4_0, d) == 0 && offsetof(BlockQ5_0, d) == 0 && offsetof(BlockQ8_0, d) == 0 &&
                offsetof(BlockQ4_1, d) == 0 && offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ5_1, d) == 0 &&
                offsetof(BlockQ5_1, m) == 2);
  for (int i = 0; i < R; ++i) {
    const std::uint8_t* base = g.row[i] + b0 * std::int64_t(kBlockBytes);
    if constexpr (kSecond) {
      const __m512i both = first_words<kBlockBytes>(base, n);
      _mm512_store_ps(first[i], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(both)));
      _mm512_store_ps(second[i], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(both, 16))));
    } else {
      _mm512_store_ps(first[i], _mm512_cvtph_ps(first_halves<kBlockBytes>(base, n)));
    }
  }
}

// Table lookups: lane i of the result is table[idx_i], idx_i's low 4 bits (permutexvar) or low
// 5 bits (bit 4 picking the second table) taken.
TD_AVX512_INLINE Halves look_up(const __m512& table, __m512i lo, __m512i hi) {
  return {_mm512_permutexvar_ps(lo, table), _mm512_permutexvar_ps(hi, table)};
}
TD_AVX512_INLINE Halves look_up(const Halves& table, __m512i lo, __m512i hi) {
  return {_mm512_permutex2var_ps(table.lo, lo, table.hi), _mm512_permutex2var_ps(table.lo, hi, table.hi)};
}

// a's bits where mask has ones, b's elsewhere: (a & mask) | (b & ~mask), one ternary-logic op.
TD_AVX512_INLINE __m512i select_bits(__m512i mask, __m512i a, __m512i b) { return _mm512_ternarylogic_epi32(a, b, mask, 0xe4); }

// The sub-blocks of columns [0, full) of R rows (full a multiple of 32), per encoding: each
// row's in column order, sink(i, c, w) receiving row i's values w of columns c..c + 31. The
// rows interleave, so a sink that sums gives the core R independent chains of additions,
// where one row waits on the latency of every add (4 cycles a sub-block on the CPUs measured).

#define TD_FOR_ROWS _Pragma("GCC unroll 8") for (int i = 0; i < R; ++i)

template <int R, typename Sink>
TD_AVX512_INLINE void decode_f32(const RowGroup<R>& g, std::int64_t full, const Sink& sink) {
  for (std::int64_t c = 0; c < full; c += 32) {
    TD_FOR_ROWS {
      const float* w = reinterpret_cast<const float*>(g.row[i]) + c;
      prefetch_from<128>(w, g.ahead);
      sink(i, c, Halves{_mm512_loadu_ps(w), _mm512_loadu_ps(w + 16)});
    }
  }
}

// 16-bit floats widened: f16_bits_to_f32's and bf16_bits_to_f32's values (the hardware's f16
// conversion gives a NaN other bits).
TD_AVX512_INLINE __m512 widen_f16(const std::uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TD_AVX512_INLINE __m512 widen_bf16(const std::uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
template <int R, bool kBf16, typename Sink>
TD_AVX512_INLINE void decode_16bit(const RowGroup<R>& g, std::int64_t full, const Sink& sink) {
  for (std::int64_t c = 0; c < full; c += 32) {
    TD_FOR_ROWS {
      const std::uint8_t* w = g.row[i] + 2 * c;
      prefetch_from<64>(w, g.ahead);
      sink(i, c, kBf16 ? Halves{widen_bf16(w), widen_bf16(w + 32)} : Halves{widen_f16(w), widen_f16(w + 32)});
    }
  }
}

// The legacy encodings' blocks of 32 in [0, full), each row's in turn per column:
// body(i, b, c, d, m) for row i's block at b, columns c..c + 31, d its scale and m its offset
// in every lane (m where kOffset only).
template <int R, std::size_t kBytes, bool kOffset, typename Body>
TD_AVX512_INLINE void legacy_blocks(const RowGroup<R>& g, std::int64_t full, const Body& body) {
  for (std::int64_t c0 = 0; c0 < full; c0 += 16 * 32) {
    const int n = int(std::min<std::int64_t>(16, (full - c0) / 32));
    alignas(64) float d[R][16], m[R][16];
    block_scales<R, kBytes, kOffset>(g, c0 / 32, n, d, m);
    for (int k = 0; k < n; ++k) {
      const std::int64_t c = c0 + 32 * k;
      TD_FOR_ROWS {
        const std::uint8_t* b = g.row[i] + c / 32 * std::int64_t(kBytes);
        prefetch_from<kBytes>(b, g.ahead);
        body(i, b, c, _mm512_set1_ps(d[i][k]), kOffset ? _mm512_set1_ps(m[i][k]) : _mm512_setzero_ps());
      }
    }
  }
}
#define TD_BLOCK_BODY \
  [&](int i, const std::uint8_t* b, std::int64_t c, __m512 d, [[maybe_unused]] __m512 m) TD_AVX512 __attribute__((always_inline))

// Q8_0: float(q) * d.
template <int R, typename Sink>
TD_AVX512_INLINE void decode_q8_0(const RowGroup<R>& g, std::int64_t full, const Sink& sink) {
  legacy_blocks<R, sizeof(BlockQ8_0), false>(g, full, TD_BLOCK_BODY {
    const auto* qs = reinterpret_cast<const __m128i*>(b + offsetof(BlockQ8_0, qs));
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs + 1)));
    sink(i, c, Halves{_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d)});
  });
}

// Q4_0 and Q4_1: element j < 16 the low nibble of qs[j], element 16 + j its high nibble;
// the table holds float(q - 8) * d, or float(q) * d + m.
template <int R, bool kOffset, ElemType kRound, typename Sink>
TD_AVX512_INLINE void decode_q4_legacy(const RowGroup<R>& g, std::int64_t full, const Sink& sink) {
  constexpr std::size_t kBytes = kOffset ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0);
  constexpr std::size_t kQs = kOffset ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  legacy_blocks<R, kBytes, kOffset>(g, full, TD_BLOCK_BODY {
    const __m512 table =
        round_lanes<kRound>(kOffset ? _mm512_add_ps(_mm512_mul_ps(iota(0), d), m) : _mm512_mul_ps(iota(-8), d));
    const __m512i q = widen16(b + kQs);
    sink(i, c, look_up(table, q, _mm512_srli_epi32(q, 4)));
  });
}

// Q5_0 and Q5_1: Q4's nibbles with bit j of qh as bit 4 of element j; the table holds
// float(q - 16) * d, or float(q) * d + m, for q = 0..31.
template <int R, bool kOffset, ElemType kRound, typename Sink>
TD_AVX512_INLINE void decode_q5_legacy(const RowGroup<R>& g, std::int64_t full, const Sink& sink) {
  constexpr std::size_t kBytes = kOffset ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
  constexpr std::size_t kQh = kOffset ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh);
  constexpr std::size_t kQs = kOffset ? offsetof(BlockQ5_1, qs) : offsetof(BlockQ5_0, qs);
  // Rotated left by these, qh has bit j (elements j < 16) or bit 16 + j in bit 4, the index
  // bit above a nibble; the lookup ignores the bits above.
  const __m512i rotate_lo = _mm512_and_si512(_mm512_sub_epi32(_mm512_set1_epi32(4), iota_epi32()), _mm512_set1_epi32(31));
  const __m512i rotate_hi = _mm512_and_si512(_mm512_sub_epi32(_mm512_set1_epi32(20), iota_epi32()), _mm512_set1_epi32(31));
  const __m512i nibble = _mm512_set1_epi32(0x0f);
  legacy_blocks<R, kBytes, kOffset>(g, full, TD_BLOCK_BODY {
    const Halves table = round_halves<kRound>(
        kOffset ? Halves{_mm512_add_ps(_mm512_mul_ps(iota(0), d), m), _mm512_add_ps(_mm512_mul_ps(iota(16), d), m)}
                : Halves{_mm512_mul_ps(iota(-16), d), _mm512_mul_ps(iota(0), d)});
    const __m512i qh = _mm512_set1_epi32(int(dd::u32(b + kQh)));
    const __m512i q = widen16(b + kQs);
    sink(i, c,
         look_up(table, select_bits(nibble, q, _mm512_rolv_epi32(qh, rotate_lo)),
                 select_bits(nibble, _mm512_srli_epi32(q, 4), _mm512_rolv_epi32(qh, rotate_hi))));
  });
}

// A K-quant superblock's eight sub-block scales dj = d * sc[j] in out[0..7] and mins
// mj = dmin * m[j] in out[8..15] (dequant.hpp's products), stored for the loops to broadcast.
template <typename Block>
TD_AVX512_INLINE void k_scales(const std::uint8_t* b, float* out) {
  const dd::KScales s = dd::k_scales_mins(b + offsetof(Block, scales));
  const __m512 ints = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_set_epi32(int(s.m >> 32), int(s.m), int(s.sc >> 32), int(s.sc))));
  const __m512 d = _mm512_set1_ps(scale_f16(b + offsetof(Block, d)));
  const __m512 dmin = _mm512_set1_ps(scale_f16(b + offsetof(Block, dmin)));
  _mm512_store_ps(out, _mm512_mul_ps(ints, _mm512_mask_blend_ps(0xff00, d, dmin)));
}

// Q4_K and Q5_K sub-block j: its table of dj * float(q) - mj (q < 16, or q < 32 for Q5_K)
// and its values, from the 32-bit lanes holding its nibbles in their low 4 bits (Q5_K: with
// bit j of qh[l] as bit 4, rotated there and joined to the nibble by one ternary-logic op, as
// the Q5 legacy blocks do; the lookup ignores the bits above).
template <bool kFiveBits, ElemType kRound>
TD_AVX512_INLINE Halves k_sub_values(const float* scales, int j, const __m512i (&qh)[2], __m512i lo, __m512i hi) {
  const __m512 dj = _mm512_set1_ps(scales[j]), mj = _mm512_set1_ps(scales[8 + j]);
  const __m512 table = round_lanes<kRound>(_mm512_sub_ps(_mm512_mul_ps(dj, iota(0)), mj));
  if (!kFiveBits) return look_up(table, lo, hi);
  // Rotate counts mod 32 (right for j > 4), broadcast from memory: a load. Broadcasting 4 - j
  // from a register, on the shuffle port the lookups need, gave bench_matmul's Q5_K matvec 21.4
  // to 21.7 billion weights/s against 22.5 to 23.3 (three runs each, alternating).
  alignas(64) static constexpr std::int32_t kRotateToBit4[8] = {4, 3, 2, 1, 0, 31, 30, 29};
  const __m512i nibble = _mm512_set1_epi32(0x0f), rotate = _mm512_set1_epi32(kRotateToBit4[j]);
  return look_up(Halves{table, round_lanes<kRound>(_mm512_sub_ps(_mm512_mul_ps(dj, iota(16)), mj))},
                 select_bits(nibble, lo, _mm512_rolv_epi32(qh[0], rotate)),
                 select_bits(nibble, hi, _mm512_rolv_epi32(qh[1], rotate)));
}

// The sub-blocks [0, subs) of superblock sb of each row, whose first column is c0.
// Q4_K and Q5_K: sub-blocks j and j + 1 take the low and high nibbles of the same 32 bytes.
// The loop over sub-block pairs stays a loop: unrolled, R rows' superblocks were more code
// than the decoded-instruction cache holds, and decoding them became the bound.
template <int R, bool kFiveBits, ElemType kRound, typename Sink>
TD_AVX512_INLINE void k4_k5_superblock(const RowGroup<R>& g, std::int64_t sb, std::int64_t c0, int subs, const Sink& sink) {
  using Block = std::conditional_t<kFiveBits, BlockQ5_K, BlockQ4_K>;
  const std::uint8_t* b[R];
  alignas(64) float scales[R][16];
  __m512i qh[R][2] = {};
  TD_FOR_ROWS {
    b[i] = g.row[i] + sb * std::int64_t(sizeof(Block));
    prefetch_from<sizeof(Block)>(b[i], g.ahead);
    k_scales<Block>(b[i], scales[i]);
    if (kFiveBits) {
      qh[i][0] = widen16(b[i] + offsetof(BlockQ5_K, qh));
      qh[i][1] = widen16(b[i] + offsetof(BlockQ5_K, qh) + 16);
    }
  }
#pragma GCC unroll 1
  for (int j = 0; j < subs; j += 2) {
    TD_FOR_ROWS {
      const std::uint8_t* ql = b[i] + offsetof(Block, qs) + 32 * (j / 2);
      const __m512i lo = widen16(ql), hi = widen16(ql + 16);
      sink(i, c0 + 32 * j, k_sub_values<kFiveBits, kRound>(scales[i], j, qh[i], lo, hi));
      if (j + 1 < subs)
        sink(i, c0 + 32 * (j + 1),
             k_sub_values<kFiveBits, kRound>(scales[i], j + 1, qh[i], _mm512_srli_epi32(lo, 4), _mm512_srli_epi32(hi, 4)));
    }
  }
}

// Every superblock in [0, full): superblock(sb, c0, subs) with c0 its first column and subs
// its whole sub-blocks. A whole superblock passes the constant 8, so that an unrolled loop over
// its sub-blocks has no exits and a sink's sums stay in registers; a last partial one (k inside
// it) passes its count.
template <typename Superblock>
TD_AVX512_INLINE void for_superblocks(std::int64_t full, const Superblock& superblock) {
  for (std::int64_t c0 = 0; c0 < full; c0 += kQK_K) {
    const int subs = int(std::min<std::int64_t>(8, (full - c0) / 32));
    if (subs == 8) superblock(c0 / kQK_K, c0, 8);
    else superblock(c0 / kQK_K, c0, subs);
  }
}
#define TD_SUPERBLOCK_BODY [&](std::int64_t sb, std::int64_t c0, int subs) TD_AVX512 __attribute__((always_inline))

// Q6_K quarter k of a half, lanes h = 0 (elements 0..15) or 1: float(q - 32) * 2^26, q the low
// (k < 2) or high nibbles of ql[32 (k % 2) + l] with bits 2k, 2k + 1 of qh[l] as bits 4, 5.
// q - 32 is q with bit 5 flipped read as a signed 6-bit integer: `flipped` holds qh[l] ^ 0xaa
// (and that >> 4), so shifts put the nibble and the two bits in a lane's top six bits, one
// ternary-logic op joins them over zeros, and the conversion is exact. A scale multiplied by
// 2^-26 (exact: every product stays normal) then gives dequant.hpp's products bit for bit, in
// half the integer operations of extracting q and subtracting 32.
TD_AVX512_INLINE __m512 q6_k_ints_2p26(const __m512i (&low)[2][2], const __m512i (&flipped)[2][2], int k, int h) {
  const __m512i nibble = k < 2 ? _mm512_slli_epi32(low[k % 2][h], 26) : _mm512_slli_epi32(low[k % 2][h], 22);
  const __m512i bits = k < 3 ? _mm512_slli_epi32(flipped[0][h], 30 - 2 * k) : _mm512_slli_epi32(flipped[1][h], 28);
  return _mm512_cvtepi32_ps(select_bits(_mm512_set1_epi32(0x3c000000), nibble, bits));
}

// Q6_K: each half of 128 elements reads 64 bytes of ql and 32 of qh; its elements are
// (d * scale) * float(q - 32), a scale each 16.
template <int R, typename Sink>
TD_AVX512_INLINE void q6_k_superblock(const RowGroup<R>& g, std::int64_t sb, std::int64_t c0, int subs, const Sink& sink) {
  TD_FOR_ROWS {
    const std::uint8_t* b = g.row[i] + sb * std::int64_t(sizeof(BlockQ6_K));
    prefetch_from<sizeof(BlockQ6_K)>(b, g.ahead);
    // The sixteen scales d * sc[i] (dequant.hpp's products) times 2^-26, stored for the loop to
    // broadcast: d * 2^-26 is exact (a nonzero f16 is at least 2^-24), so each product is d * sc[i]
    // rounded as dequant.hpp rounds it, times 2^-26.
    alignas(64) float scales[16];
    _mm512_store_ps(scales, _mm512_mul_ps(_mm512_set1_ps(scale_f16(b + offsetof(BlockQ6_K, d)) * 0x1p-26f),
                                          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                              reinterpret_cast<const __m128i*>(b + offsetof(BlockQ6_K, scales)))))));
    for (int half = 0; half < 2; ++half) {
      if (4 * half >= subs) break;
      const std::uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * half;
      const std::uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * half;
      const __m512i low[2][2] = {{widen16(ql), widen16(ql + 16)}, {widen16(ql + 32), widen16(ql + 48)}};
      const __m512i flip = _mm512_set1_epi32(0xaa);
      const __m512i f0 = _mm512_xor_si512(widen16(qh), flip), f1 = _mm512_xor_si512(widen16(qh + 16), flip);
      const __m512i flipped[2][2] = {{f0, f1}, {_mm512_srli_epi32(f0, 4), _mm512_srli_epi32(f1, 4)}};
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        if (4 * half + k >= subs) break;
        const __m512 d0 = _mm512_set1_ps(scales[8 * half + 2 * k]), d1 = _mm512_set1_ps(scales[8 * half + 2 * k + 1]);
        sink(i, c0 + 128 * half + 32 * k,
             Halves{_mm512_mul_ps(d0, q6_k_ints_2p26(low, flipped, k, 0)),
                    _mm512_mul_ps(d1, q6_k_ints_2p26(low, flipped, k, 1))});
      }
    }
  }
}

// Every sub-block of columns [0, full) of the R rows of an encoding, into sink, each value
// rounded to kRound (round_lanes): the four- and five-bit encodings round their tables, 16 or 32
// values a block, the others every value.
template <int R, ElemType kRound = ElemType::f32, typename Sink>
TD_AVX512_INLINE void decode_rows(GgmlType type, const RowGroup<R>& g, std::int64_t full, const Sink& sink) {
  const auto rounded = [&](int i, std::int64_t c, const Halves& w) TD_AVX512 __attribute__((always_inline)) {
    sink(i, c, round_halves<kRound>(w));
  };
  switch (type) {
    case GgmlType::F32: return decode_f32<R>(g, full, rounded);
    case GgmlType::F16: return decode_16bit<R, false>(g, full, rounded);
    case GgmlType::BF16: return decode_16bit<R, true>(g, full, rounded);
    case GgmlType::Q8_0: return decode_q8_0<R>(g, full, rounded);
    case GgmlType::Q4_0: return decode_q4_legacy<R, false, kRound>(g, full, sink);
    case GgmlType::Q4_1: return decode_q4_legacy<R, true, kRound>(g, full, sink);
    case GgmlType::Q5_0: return decode_q5_legacy<R, false, kRound>(g, full, sink);
    case GgmlType::Q5_1: return decode_q5_legacy<R, true, kRound>(g, full, sink);
    case GgmlType::Q4_K:
      return for_superblocks(full, TD_SUPERBLOCK_BODY { k4_k5_superblock<R, false, kRound>(g, sb, c0, subs, sink); });
    case GgmlType::Q5_K:
      return for_superblocks(full, TD_SUPERBLOCK_BODY { k4_k5_superblock<R, true, kRound>(g, sb, c0, subs, sink); });
    case GgmlType::Q6_K:
      return for_superblocks(full, TD_SUPERBLOCK_BODY { q6_k_superblock<R>(g, sb, c0, subs, rounded); });
  }
}

#undef TD_FOR_ROWS
#undef TD_BLOCK_BODY
#undef TD_SUPERBLOCK_BODY

// A sink's signature, for its users: [&](int i, std::int64_t c, const Halves& w) TD_DECODE_SINK.
#define TD_DECODE_SINK TD_AVX512 __attribute__((always_inline))

}  // namespace tapdiff::engine::decode_avx512
#endif
