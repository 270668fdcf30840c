#include "engine/kernels/matvec_avx512.hpp"

#include <cstddef>
#include <type_traits>

#include "engine/kernels/prefetch.hpp"
#include "model/ggml_type.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_MATVEC_AVX512 1
// GCC 12's AVX-512 inserts start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports once inlined here: every lane of their results is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace tapdiff::engine {

#if TD_MATVEC_AVX512
namespace {

#define TD_AVX512 __attribute__((target("avx512f,f16c")))
#define TD_AVX512_INLINE TD_AVX512 __attribute__((always_inline)) static inline

namespace dd = dequant_detail;

// A sub-block's 32 values: elements 0..15 and 16..31. As accumulators: matvec_row's slots.
struct Halves {
  __m512 lo, hi;
};

TD_AVX512_INLINE void multiply_add(Halves& acc, const Halves& w, const float* x) {
  acc.lo = _mm512_add_ps(acc.lo, _mm512_mul_ps(w.lo, _mm512_loadu_ps(x)));
  acc.hi = _mm512_add_ps(acc.hi, _mm512_mul_ps(w.hi, _mm512_loadu_ps(x + 16)));
}

// A block's fp16 scale: the hardware conversion, f16_bits_to_f32's value but for a NaN's bits.
TD_AVX512_INLINE float scale_f16(const std::uint8_t* p) { return _cvtsh_ss(dd::u16(p)); }

// Sixteen bytes, each in a 32-bit lane.
TD_AVX512_INLINE __m512i widen16(const std::uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// first, first + 1, ..., first + 15 as floats (small integers: exact).
TD_AVX512_INLINE __m512 iota(float first) {
  return _mm512_add_ps(_mm512_set1_ps(first),
                       _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

// Table lookups: lane i of the result is table[idx_i], idx_i's low 4 bits (permutexvar) or low
// 5 bits (bit 4 picking the second table) taken.
TD_AVX512_INLINE Halves look_up(const __m512& table, __m512i lo, __m512i hi) {
  return {_mm512_permutexvar_ps(lo, table), _mm512_permutexvar_ps(hi, table)};
}
TD_AVX512_INLINE Halves look_up(const Halves& table, __m512i lo, __m512i hi) {
  return {_mm512_permutex2var_ps(table.lo, lo, table.hi), _mm512_permutex2var_ps(table.lo, hi, table.hi)};
}

// The products of the columns [0, full) of one row (full a multiple of 32) into acc, per
// encoding; `row` is the row's first byte.

TD_AVX512_INLINE void sum_f32(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  const float* w = reinterpret_cast<const float*>(row);
  for (std::int64_t c = 0; c < full; c += 32) {
    prefetch_ahead<128>(w + c);
    multiply_add(acc, {_mm512_loadu_ps(w + c), _mm512_loadu_ps(w + c + 16)}, x + c);
  }
}

// 16-bit floats widened: f16_bits_to_f32's and bf16_bits_to_f32's values (the hardware's f16
// conversion gives a NaN other bits; a NaN weight's products are NaN either way).
TD_AVX512_INLINE __m512 widen_f16(const std::uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TD_AVX512_INLINE __m512 widen_bf16(const std::uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
TD_AVX512_INLINE void sum_f16(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  for (std::int64_t c = 0; c < full; c += 32) {
    prefetch_ahead<64>(row + 2 * c);
    multiply_add(acc, {widen_f16(row + 2 * c), widen_f16(row + 2 * c + 32)}, x + c);
  }
}
TD_AVX512_INLINE void sum_bf16(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  for (std::int64_t c = 0; c < full; c += 32) {
    prefetch_ahead<64>(row + 2 * c);
    multiply_add(acc, {widen_bf16(row + 2 * c), widen_bf16(row + 2 * c + 32)}, x + c);
  }
}

// Q8_0: float(q) * d.
TD_AVX512_INLINE void sum_q8_0(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  for (std::int64_t c = 0; c < full; c += 32) {
    const std::uint8_t* b = row + c / 32 * sizeof(BlockQ8_0);
    prefetch_ahead<sizeof(BlockQ8_0)>(b);
    const __m512 d = _mm512_set1_ps(scale_f16(b));
    const auto* qs = reinterpret_cast<const __m128i*>(b + offsetof(BlockQ8_0, qs));
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs + 1)));
    multiply_add(acc, {_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d)}, x + c);
  }
}

// Q4_0 and Q4_1: element j < 16 the low nibble of qs[j], element 16 + j its high nibble;
// the table holds float(q - 8) * d, or float(q) * d + m.
template <bool kOffset>
TD_AVX512_INLINE void sum_q4_legacy(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  constexpr std::size_t kBytes = kOffset ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0);
  constexpr std::size_t kQs = kOffset ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  for (std::int64_t c = 0; c < full; c += 32) {
    const std::uint8_t* b = row + c / 32 * kBytes;
    prefetch_ahead<kBytes>(b);
    const __m512 d = _mm512_set1_ps(scale_f16(b));
    const __m512 table = kOffset ? _mm512_add_ps(_mm512_mul_ps(iota(0), d), _mm512_set1_ps(scale_f16(b + offsetof(BlockQ4_1, m))))
                                 : _mm512_mul_ps(iota(-8), d);
    const __m512i q = widen16(b + kQs);
    multiply_add(acc, look_up(table, q, _mm512_srli_epi32(q, 4)), x + c);
  }
}

// Q5_0 and Q5_1: Q4's nibbles with bit j of qh as bit 4 of element j; the table holds
// float(q - 16) * d, or float(q) * d + m, for q = 0..31.
template <bool kOffset>
TD_AVX512_INLINE void sum_q5_legacy(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  constexpr std::size_t kBytes = kOffset ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
  constexpr std::size_t kQh = kOffset ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh);
  constexpr std::size_t kQs = kOffset ? offsetof(BlockQ5_1, qs) : offsetof(BlockQ5_0, qs);
  const __m512i nibble = _mm512_set1_epi32(0x0f), bit4 = _mm512_set1_epi32(0x10);
  for (std::int64_t c = 0; c < full; c += 32) {
    const std::uint8_t* b = row + c / 32 * kBytes;
    prefetch_ahead<kBytes>(b);
    const __m512 d = _mm512_set1_ps(scale_f16(b));
    Halves table;
    if (kOffset) {
      const __m512 m = _mm512_set1_ps(scale_f16(b + offsetof(BlockQ5_1, m)));
      table = {_mm512_add_ps(_mm512_mul_ps(iota(0), d), m), _mm512_add_ps(_mm512_mul_ps(iota(16), d), m)};
    } else {
      table = {_mm512_mul_ps(iota(-16), d), _mm512_mul_ps(iota(0), d)};
    }
    const std::uint32_t qh = dd::u32(b + kQh);
    const __m512i q = widen16(b + kQs);
    const __m512i lo = _mm512_and_si512(q, nibble), hi = _mm512_srli_epi32(q, 4);
    multiply_add(acc,
                 look_up(table, _mm512_mask_or_epi32(lo, __mmask16(qh), lo, bit4),
                         _mm512_mask_or_epi32(hi, __mmask16(qh >> 16), hi, bit4)),
                 x + c);
  }
}

// A K-quant superblock's eight sub-block scales dj = d * sc[j] in lanes 0..7 and mins
// mj = dmin * m[j] in lanes 8..15 (dequant.hpp's products), and lane j of such a vector in
// every lane.
template <typename Block>
TD_AVX512_INLINE __m512 k_scales(const std::uint8_t* b) {
  const dd::KScales s = dd::k_scales_mins(b + offsetof(Block, scales));
  const __m512 ints = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&s))));
  const __m512 d = _mm512_set1_ps(scale_f16(b + offsetof(Block, d)));
  const __m512 dmin = _mm512_set1_ps(scale_f16(b + offsetof(Block, dmin)));
  return _mm512_mul_ps(ints, _mm512_mask_blend_ps(0xff00, d, dmin));
}
TD_AVX512_INLINE __m512 lane(const __m512& v, int j) { return _mm512_permutexvar_ps(_mm512_set1_epi32(j), v); }

// Q4_K and Q5_K sub-block j: its table of dj * float(q) - mj (q < 16, or q < 32 for Q5_K)
// and its values, from the 32-bit lanes holding its nibbles in their low 4 bits (Q5_K: with
// bit j of qh[l] as bit 4).
template <bool kFiveBits>
TD_AVX512_INLINE Halves k_sub_values(const __m512& scales, int j, const __m512i (&qh)[2], __m512i lo, __m512i hi) {
  const __m512 dj = lane(scales, j), mj = lane(scales, 8 + j);
  const __m512 table = _mm512_sub_ps(_mm512_mul_ps(dj, iota(0)), mj);
  if (!kFiveBits) return look_up(table, lo, hi);
  const __m512i nibble = _mm512_set1_epi32(0x0f), bit4 = _mm512_set1_epi32(0x10), bit = _mm512_set1_epi32(1 << j);
  lo = _mm512_and_si512(lo, nibble);
  hi = _mm512_and_si512(hi, nibble);
  return look_up(Halves{table, _mm512_sub_ps(_mm512_mul_ps(dj, iota(16)), mj)},
                 _mm512_mask_or_epi32(lo, _mm512_test_epi32_mask(qh[0], bit), lo, bit4),
                 _mm512_mask_or_epi32(hi, _mm512_test_epi32_mask(qh[1], bit), hi, bit4));
}

// Q4_K and Q5_K: sub-blocks j and j + 1 take the low and high nibbles of the same 32 bytes.
template <bool kFiveBits>
TD_AVX512_INLINE void sum_k4_k5(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  using Block = std::conditional_t<kFiveBits, BlockQ5_K, BlockQ4_K>;
  for (std::int64_t c0 = 0; c0 < full; c0 += kQK_K) {
    const std::uint8_t* b = row + c0 / kQK_K * sizeof(Block);
    prefetch_ahead<sizeof(Block)>(b);
    const __m512 scales = k_scales<Block>(b);
    __m512i qh[2] = {};
    if (kFiveBits) {
      qh[0] = widen16(b + offsetof(BlockQ5_K, qh));
      qh[1] = widen16(b + offsetof(BlockQ5_K, qh) + 16);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
      if (c0 + 32 * j >= full) break;
      const std::uint8_t* ql = b + offsetof(Block, qs) + 32 * (j / 2);
      const __m512i lo = widen16(ql), hi = widen16(ql + 16);
      multiply_add(acc, k_sub_values<kFiveBits>(scales, j, qh, lo, hi), x + c0 + 32 * j);
      if (c0 + 32 * (j + 1) >= full) break;
      multiply_add(acc, k_sub_values<kFiveBits>(scales, j + 1, qh, _mm512_srli_epi32(lo, 4), _mm512_srli_epi32(hi, 4)),
                   x + c0 + 32 * (j + 1));
    }
  }
}

// Q6_K quarter k of a half, lanes h = 0 (elements 0..15) or 1: float(q - 32), q the low
// (k < 2) or high nibbles of ql[32 (k % 2) + l] with bits 2k, 2k + 1 of qh[l] as bits 4, 5.
TD_AVX512_INLINE __m512 q6_k_ints(const __m512i (&low)[2][2], const __m512i (&high)[2], int k, int h) {
  const __m512i l4 = _mm512_and_si512(_mm512_srli_epi32(low[k % 2][h], 4 * (k / 2)), _mm512_set1_epi32(0x0f));
  const __m512i h2 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(high[h], 2 * k), _mm512_set1_epi32(0x03)), 4);
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(l4, h2), _mm512_set1_epi32(32)));
}

// Q6_K: each half of 128 elements reads 64 bytes of ql and 32 of qh; its elements are
// (d * scale) * float(q - 32), a scale each 16.
TD_AVX512_INLINE void sum_q6_k(const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  for (std::int64_t c0 = 0; c0 < full; c0 += kQK_K) {
    const std::uint8_t* b = row + c0 / kQK_K * sizeof(BlockQ6_K);
    prefetch_ahead<sizeof(BlockQ6_K)>(b);
    // The sixteen scales d * sc[i] (dequant.hpp's products), a lane each.
    const __m512 scales = _mm512_mul_ps(
        _mm512_set1_ps(scale_f16(b + offsetof(BlockQ6_K, d))),
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(BlockQ6_K, scales))))));
    for (int half = 0; half < 2; ++half) {
      if (c0 + 128 * half >= full) break;
      const std::uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * half;
      const std::uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * half;
      const __m512i low[2][2] = {{widen16(ql), widen16(ql + 16)}, {widen16(ql + 32), widen16(ql + 48)}};
      const __m512i high[2] = {widen16(qh), widen16(qh + 16)};
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = c0 + 128 * half + 32 * k;
        if (c >= full) break;
        const __m512 d0 = lane(scales, 8 * half + 2 * k), d1 = lane(scales, 8 * half + 2 * k + 1);
        multiply_add(acc, {_mm512_mul_ps(d0, q6_k_ints(low, high, k, 0)), _mm512_mul_ps(d1, q6_k_ints(low, high, k, 1))},
                     x + c);
      }
    }
  }
}

TD_AVX512 void sum_row(GgmlType type, const std::uint8_t* row, const float* x, std::int64_t full, Halves& acc) {
  switch (type) {
    case GgmlType::F32: return sum_f32(row, x, full, acc);
    case GgmlType::F16: return sum_f16(row, x, full, acc);
    case GgmlType::BF16: return sum_bf16(row, x, full, acc);
    case GgmlType::Q8_0: return sum_q8_0(row, x, full, acc);
    case GgmlType::Q4_0: return sum_q4_legacy<false>(row, x, full, acc);
    case GgmlType::Q4_1: return sum_q4_legacy<true>(row, x, full, acc);
    case GgmlType::Q5_0: return sum_q5_legacy<false>(row, x, full, acc);
    case GgmlType::Q5_1: return sum_q5_legacy<true>(row, x, full, acc);
    case GgmlType::Q4_K: return sum_k4_k5<false>(row, x, full, acc);
    case GgmlType::Q5_K: return sum_k4_k5<true>(row, x, full, acc);
    case GgmlType::Q6_K: return sum_q6_k(row, x, full, acc);
  }
}

}  // namespace

bool matvec_avx512_applies(const MatvecArgs& a) {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
  return supported && a.round == ElemType::f32 && !a.w.quirks.any();
}

TD_AVX512 void matvec_avx512_rows(const MatvecArgs& a, std::int64_t r0, std::int64_t r1) {
  const GgmlTypeTraits& traits = ggml_type_traits(a.w.type);
  const std::int64_t row_bytes = a.cols / traits.block_elems * std::int64_t(traits.block_bytes);
  const std::int64_t full = a.k / kMatvecSlots * kMatvecSlots;
  const bool blocks = traits.block_elems > 1;
  for (std::int64_t r = r0; r < r1; ++r) {
    Halves acc = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    sum_row(a.w.type, a.w.bytes + r * row_bytes, a.x, full, acc);
    // The columns after the last whole 32 add in order into the tail, as matvec_row's do: a
    // block type's are the start of one sub-block, a plain type's exactly what is left.
    float tail = 0.0f;
    if (full < a.k) {
      float w[kDecodeRun];
      if (blocks) decode_sub_block(a.w, r * a.cols + full, w);
      else decode_run(a.w, r * a.cols + full, int(a.k - full), w);
      for (std::int64_t c = full; c < a.k; ++c) tail += w[c - full] * a.x[c];
    }
    float slots[kMatvecSlots];
    _mm512_storeu_ps(slots, acc.lo);
    _mm512_storeu_ps(slots + 16, acc.hi);
    a.y[r] = sum_slots(tail, slots);
  }
}

#else

bool matvec_avx512_applies(const MatvecArgs&) { return false; }
void matvec_avx512_rows(const MatvecArgs&, std::int64_t, std::int64_t) {}

#endif

}  // namespace tapdiff::engine
