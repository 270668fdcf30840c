#include "engine/kernels/quantize_q8.hpp"

#include <cmath>

#include "engine/kernels/host_loop.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_QUANTIZE_AVX2 1
#endif

namespace tapdiff::engine {
namespace {

#if TD_QUANTIZE_AVX2
#define TD_AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

// roundf eight lanes at once: the truncation, one away from zero where the part cut off is at
// least a half (exact: a float less its truncation is a float).
TD_AVX2_INLINE __m256 round_half_away(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 cut = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(cut, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
}

// quantize_q8_block eight values at a time, for a block of finite values with a finite 1 / d:
// the same amax (the largest |x|, in any order), d, integers (x id rounded, clamped) and sums;
// poison is +0, and d + 0 is d. Returns false, having written nothing, for any other block.
__attribute__((target("avx2"))) bool quantize_block_avx2(const QuantizeQ8Args& a, std::int64_t i) {
  const int size = a.out.block;
  const std::int64_t blocks = a.k / size, t = i / blocks, b = i % blocks;
  const float* x = a.x + t * a.ldx + b * size;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax8 = _mm256_setzero_ps(), poison = _mm256_setzero_ps();
  for (int j = 0; j < size; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, v), amax8);
    poison = _mm256_add_ps(poison, _mm256_mul_ps(v, _mm256_setzero_ps()));
  }
  if (_mm256_movemask_ps(_mm256_cmp_ps(poison, poison, _CMP_UNORD_Q)) != 0) return false;
  alignas(32) float lane[8];
  _mm256_store_ps(lane, amax8);
  float amax = 0.0f;
  for (const float v : lane) amax = v > amax ? v : amax;
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  if (!std::isfinite(id)) return false;
  std::int8_t* q = a.out.q + t * a.k + b * size;
  const __m256 scale = _mm256_set1_ps(id), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  for (int j0 = 0; j0 < size; j0 += kQ8Block) {
    __m256i ints[4];
    for (int g = 0; g < 4; ++g) {
      const __m256 v = round_half_away(_mm256_mul_ps(_mm256_loadu_ps(x + j0 + 8 * g), scale));
      ints[g] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
    }
    const __m256i words = _mm256_packs_epi32(ints[0], ints[1]), words2 = _mm256_packs_epi32(ints[2], ints[3]);
    // packs works within 128-bit halves: the permute puts the 32 bytes back in element order.
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j0), bytes);
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(ints[0], ints[1]), _mm256_add_epi32(ints[2], ints[3]));
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    const std::int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)));
    const std::int64_t sub = (t * a.k + b * size + j0) / kQ8Block;
    if (size == kQ8Block)
      a.out.ds[sub] = d * float(sum);
    else
      a.out.sums[sub] = std::int16_t(sum);
  }
  a.out.d[t * blocks + b] = d;
  return true;
}
#else
bool quantize_block_avx2(const QuantizeQ8Args&, std::int64_t) { return false; }
#endif

}  // namespace

void quantize_q8_host(const QuantizeQ8Args& a) {
#if TD_QUANTIZE_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
#else
  constexpr bool avx2 = false;
#endif
  host_for(a.n * (a.k / a.out.block), 4 * a.out.block, [&](std::int64_t i) {
    if (!(avx2 && quantize_block_avx2(a, i))) quantize_q8_block(a, i);
  });
}

}  // namespace tapdiff::engine
