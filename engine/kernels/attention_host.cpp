#include <cstring>

#include "engine/kernels/attention.hpp"
#include "engine/kernels/host_loop.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include "engine/kernels/avx512.hpp"
#define TD_ATTENTION_AVX2 1
#endif

namespace tapdiff::engine {
namespace {

#if TD_ATTENTION_AVX2
// Eight or sixteen cache elements from element i on, widened to floats. The cache holds what
// store_element wrote, so a 16-bit NaN is a quiet one: for every value the cache can hold the
// hardware's f16 conversion is f16_bits_to_f32's, and bf16's is a shift.
template <ElemType kType>
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 load8(const void* base, std::int64_t i) {
  if constexpr (kType == ElemType::f32) return _mm256_loadu_ps(static_cast<const float*>(base) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(base) + i));
  if constexpr (kType == ElemType::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <ElemType kType>
__attribute__((target("avx512f,f16c"), always_inline)) inline __m512 load16(const void* base, std::int64_t i) {
  if constexpr (kType == ElemType::f32) return _mm512_loadu_ps(static_cast<const float*>(base) + i);
  const __m256i h =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(base) + i));
  if constexpr (kType == ElemType::f16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The tails head_dot adds last, of n keys from element `at` of the cache on: each key's
// products over the columns after the last whole eight, in order.
template <ElemType kType>
inline void dot_tails(const AttentionArgs& a, const AttentionSpan& s, std::int64_t at, std::int64_t kv_row, int n,
                      float* tail) {
  for (int j = 0; j < n; ++j) {
    tail[j] = 0.0f;
    for (int d = a.head_dim / 8 * 8; d < a.head_dim; ++d)
      tail[j] += s.q[d] * load_element(a.k_cache, kType, at + j * kv_row + d);
  }
}

// attention_scores eight keys at a time: one register of head_dot's eight lanes per key, so
// eight independent sums run where head_dot's one waits on its additions. Two horizontal adds
// and the halves' sum make each key's (((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))), then
// + tail: head_dot's floats bit for bit (tests/engine/test_kernels.cpp). From key t on (the
// AVX-512 loop below takes the keys before it sixteen at a time).
template <ElemType kType>
__attribute__((target("avx2,f16c"), noinline)) void scores_avx2(const AttentionArgs& a, const AttentionSpan& s,
                                                                std::int64_t t) {
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  const int full = a.head_dim / 8 * 8;
  for (; t + 8 <= s.softmax_len; t += 8) {
    const std::int64_t keys = t * kv_row + s.k_offset;
    __m256 lanes[8];
#pragma GCC unroll 8
    for (__m256& l : lanes) l = _mm256_setzero_ps();
    for (int d = 0; d < full; d += 8) {
      const __m256 q = _mm256_loadu_ps(s.q + d);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        lanes[j] = _mm256_add_ps(lanes[j], _mm256_mul_ps(q, load8<kType>(a.k_cache, keys + j * kv_row + d)));
    }
    __m256 tails = _mm256_setzero_ps();
    if (full < a.head_dim) {
      alignas(32) float tail[8];
      dot_tails<kType>(a, s, keys, kv_row, 8, tail);
      tails = _mm256_load_ps(tail);
    }
    // Per 128-bit half: (l0 + l1), (l2 + l3) of keys 0, 1, then of 2, 3; then their sums.
    const __m256 k0123 = _mm256_hadd_ps(_mm256_hadd_ps(lanes[0], lanes[1]), _mm256_hadd_ps(lanes[2], lanes[3]));
    const __m256 k4567 = _mm256_hadd_ps(_mm256_hadd_ps(lanes[4], lanes[5]), _mm256_hadd_ps(lanes[6], lanes[7]));
    const __m256 low = _mm256_permute2f128_ps(k0123, k4567, 0x20), high = _mm256_permute2f128_ps(k0123, k4567, 0x31);
    const __m256 dots = _mm256_add_ps(_mm256_add_ps(low, high), tails);
    if (a.softcap > 0.0f) {
      alignas(32) float dot[8];
      _mm256_store_ps(dot, dots);
      for (int j = 0; j < 8; ++j) s.p[t + j] = attention_logit(a, s, dot[j]);
    } else {  // attention_logit without the cap: scale · dot
      _mm256_storeu_ps(s.p + t, _mm256_mul_ps(_mm256_set1_ps(s.scale), dots));
    }
  }
  for (; t < s.softmax_len; ++t) s.p[t] = attention_score(a, s, t);
}

// _mm256_hadd_ps(x, y) in each 256-bit half: x0 + x1, x2 + x3, y0 + y1, y2 + y3 per 128 bits.
__attribute__((target("avx512f"), always_inline)) inline __m512 add_pairs(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xdd));
}

// The same sixteen keys at a time where the CPU has AVX-512 F: keys t + j and t + 8 + j share
// register j, one in each 256-bit half, the query in both. The horizontal adds become
// shuffles of even and odd elements within 128-bit lanes and their sum, the same additions
// of the same pairs; the lanes are put back in key order before the halves' sum. Returns the
// first key it left to the eight-key loop.
template <ElemType kType>
__attribute__((target("avx512f,f16c"), noinline)) std::int64_t scores_avx512(const AttentionArgs& a,
                                                                        const AttentionSpan& s) {
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  const int full = a.head_dim / 8 * 8;
  std::int64_t t = s.first;
  for (; t + 16 <= s.softmax_len; t += 16) {
    const std::int64_t keys = t * kv_row + s.k_offset;
    __m512 lanes[8];
#pragma GCC unroll 8
    for (__m512& l : lanes) l = _mm512_setzero_ps();
    for (int d = 0; d < full; d += 8) {
      const __m512 q = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(s.q + d))));
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m512 both = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castps_pd(_mm512_castps256_ps512(load8<kType>(a.k_cache, keys + j * kv_row + d))),
            _mm256_castps_pd(load8<kType>(a.k_cache, keys + (8 + j) * kv_row + d)), 1));
        lanes[j] = _mm512_add_ps(lanes[j], _mm512_mul_ps(q, both));
      }
    }
    __m512 tails = _mm512_setzero_ps();
    if (full < a.head_dim) {
      alignas(64) float tail[16];
      dot_tails<kType>(a, s, keys, kv_row, 16, tail);
      tails = _mm512_load_ps(tail);
    }
    // 128-bit lanes of k0123: keys 0-3's (l0 + l1) + (l2 + l3), their (l4 + l5) + (l6 + l7),
    // then the same of keys 8-11; k4567 of keys 4-7 and 12-15.
    const __m512 k0123 = add_pairs(add_pairs(lanes[0], lanes[1]), add_pairs(lanes[2], lanes[3]));
    const __m512 k4567 = add_pairs(add_pairs(lanes[4], lanes[5]), add_pairs(lanes[6], lanes[7]));
    const __m512 low = _mm512_shuffle_f32x4(k0123, k4567, 0x88), high = _mm512_shuffle_f32x4(k0123, k4567, 0xdd);
    // low + high holds keys 0-3, 8-11, 4-7, 12-15.
    const __m512 sums = _mm512_shuffle_f32x4(_mm512_add_ps(low, high), _mm512_add_ps(low, high), 0xd8);
    const __m512 dots = _mm512_add_ps(sums, tails);
    if (a.softcap > 0.0f) {
      alignas(64) float dot[16];
      _mm512_store_ps(dot, dots);
      for (int j = 0; j < 16; ++j) s.p[t + j] = attention_logit(a, s, dot[j]);
    } else {
      _mm512_storeu_ps(s.p + t, _mm512_mul_ps(_mm512_set1_ps(s.scale), dots));
    }
  }
  return t;
}

// Output elements [d, d + kRegs·8) of attention_values: the sums in registers where
// attention_outputs keeps them in the output row, each element still adding its keys' weighted
// values in key order from 0.
template <int kRegs, ElemType kType>
__attribute__((target("avx2,f16c"), always_inline)) inline void value_sums(const AttentionArgs& a,
                                                                          const AttentionSpan& s,
                                                                          std::int64_t kv_row, int d) {
  __m256 sums[kRegs];
  for (__m256& sum : sums) sum = _mm256_setzero_ps();
  for (std::int64_t t = s.first; t < s.visible; ++t) {
    const __m256 p = _mm256_set1_ps(s.p[t]);
    const std::int64_t row = t * kv_row + s.k_offset + d;
#pragma GCC unroll 8
    for (int j = 0; j < kRegs; ++j)
      sums[j] = _mm256_add_ps(sums[j], _mm256_mul_ps(p, load8<kType>(a.v_cache, row + 8 * j)));
  }
  for (int j = 0; j < kRegs; ++j) _mm256_storeu_ps(s.out + d + 8 * j, sums[j]);
}

// The same sixteen elements a register.
template <int kRegs, ElemType kType>
__attribute__((target("avx512f,f16c"), always_inline)) inline void value_sums16(const AttentionArgs& a,
                                                                          const AttentionSpan& s,
                                                                          std::int64_t kv_row, int d) {
  __m512 sums[kRegs];
  for (__m512& sum : sums) sum = _mm512_setzero_ps();
  for (std::int64_t t = s.first; t < s.visible; ++t) {
    const __m512 p = _mm512_set1_ps(s.p[t]);
    const std::int64_t row = t * kv_row + s.k_offset + d;
#pragma GCC unroll 4
    for (int j = 0; j < kRegs; ++j)
      sums[j] = _mm512_add_ps(sums[j], _mm512_mul_ps(p, load16<kType>(a.v_cache, row + 16 * j)));
  }
  for (int j = 0; j < kRegs; ++j) _mm512_storeu_ps(s.out + d + 16 * j, sums[j]);
}

// From element d on.
template <ElemType kType>
__attribute__((target("avx2,f16c"), noinline)) void values_avx2(const AttentionArgs& a, const AttentionSpan& s,
                                                                int d) {
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  for (; d + 64 <= a.head_dim; d += 64) value_sums<8, kType>(a, s, kv_row, d);
  for (; d + 8 <= a.head_dim; d += 8) value_sums<1, kType>(a, s, kv_row, d);
  for (; d < a.head_dim; ++d) {
    float sum = 0.0f;
    for (std::int64_t t = s.first; t < s.visible; ++t)
      sum += s.p[t] * load_element(a.v_cache, kType, t * kv_row + s.k_offset + d);
    s.out[d] = sum;
  }
}

// The elements before the one it returns, 64 at a time, where the CPU has AVX-512 F.
template <ElemType kType>
__attribute__((target("avx512f,f16c"), noinline)) int values_avx512(const AttentionArgs& a, const AttentionSpan& s) {
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  int d = 0;
  for (; d + 64 <= a.head_dim; d += 64) value_sums16<4, kType>(a, s, kv_row, d);
  return d;
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

template <ElemType kType>
void attention_in_eights(const AttentionArgs& a, const AttentionSpan& s) {
  const bool wide = has_avx512();
  scores_avx2<kType>(a, s, wide ? scores_avx512<kType>(a, s) : s.first);
  attention_softmax(a, s);
  values_avx2<kType>(a, s, wide ? values_avx512<kType>(a, s) : 0);
}
#endif

// The body's loops run where the CPU has no AVX2 or F16C (or on another architecture).
void attention_one(const AttentionArgs& a, std::int64_t i, [[maybe_unused]] bool in_eights) {
  const AttentionSpan s = attention_span(a, i);
#if TD_ATTENTION_AVX2
  if (in_eights)
    return with_elem_type(a.cache_type, [&](auto type) { attention_in_eights<decltype(type)::value>(a, s); });
#endif
  attention_scores(a, s);
  attention_softmax(a, s);
  attention_values(a, s);
}

}  // namespace

bool attention_host_in_eights([[maybe_unused]] const AttentionArgs& a) {
#if TD_ATTENTION_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return avx2;
#else
  return false;
#endif
}

// Under a causal mask later rows see more keys: rows are taken from both ends in turn, so each
// thread's contiguous share of the loop holds about the same work.
void attention_host(const AttentionArgs& a) {
  const bool in_eights = attention_host_in_eights(a);
  host_for(a.n_rows * a.n_head, 4 * a.n_keys * a.head_dim, [&](std::int64_t i) {
    const std::int64_t k = i / a.n_head, row = k % 2 == 0 ? k / 2 : a.n_rows - 1 - k / 2;
    attention_one(a, row * a.n_head + i % a.n_head, in_eights);
  });
}

}  // namespace tapdiff::engine
