#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matmul_q8.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_Q8_AVX2 1
#endif

namespace tapdiff::engine {
namespace {

#if TD_Q8_AVX2
// IntDotLoop's sums with AVX2, 32 products at a time. maddubs multiplies unsigned by signed
// bytes and adds pairs into 16 bits: unsigned integers go in as they are, signed ones as |q|
// with x given q's sign (|q| <= 128, |x| <= 127: the pair sums fit). madd then adds pairs of
// those into 32 bits, times the groups' multipliers, and the lanes of eight blocks are added
// horizontally.
struct IntDotAvx2 {
  template <IntForm form>
  __attribute__((target("avx2"), always_inline)) static inline __m256i block(const IntRun& run, int b,
                                                                           const std::int8_t* x) {
    const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(run.q + b * kQ8Block));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + b * kQ8Block));
    if (form == IntForm::unsigned_ints) return _mm256_madd_epi16(_mm256_maddubs_epi16(qv, xv), _mm256_set1_epi16(1));
    const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(qv, qv), _mm256_sign_epi8(xv, qv));
    if (form == IntForm::signed_ints) return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
    const __m256i m = _mm256_setr_m128i(_mm_set1_epi16(run.multiplier[2 * b]), _mm_set1_epi16(run.multiplier[2 * b + 1]));
    return _mm256_madd_epi16(products, m);
  }
  // Not always_inline: matmul_q8_row<IntDotAvx2> is compiled for any x86-64 on its own, and
  // rows_avx2's flatten inlines it there.
  __attribute__((target("avx2"))) static void blocks(const IntRun& run, const std::int8_t* x, int blocks,
                                                     std::int32_t* sums) {
    static_assert(kRunBlocks == 8, "one run is eight blocks: one horizontal sum");
    const bool whole = blocks == kRunBlocks;
    switch (run.form) {
      case IntForm::unsigned_ints:
        return whole ? sum8<IntForm::unsigned_ints, true>(run, x, blocks, sums)
                     : sum8<IntForm::unsigned_ints, false>(run, x, blocks, sums);
      case IntForm::signed_ints:
        return whole ? sum8<IntForm::signed_ints, true>(run, x, blocks, sums)
                     : sum8<IntForm::signed_ints, false>(run, x, blocks, sums);
      case IntForm::scaled_groups:
        return whole ? sum8<IntForm::scaled_groups, true>(run, x, blocks, sums)
                     : sum8<IntForm::scaled_groups, false>(run, x, blocks, sums);
    }
  }
  // A short run (not whole) reads only its blocks; the missing blocks' sums are 0.
  template <IntForm form, bool whole>
  __attribute__((target("avx2"), always_inline)) static inline void sum8(const IntRun& run, const std::int8_t* x,
                                                                       int blocks, std::int32_t* sums) {
    if (whole) {
      const __m256i v[8] = {block<form>(run, 0, x), block<form>(run, 1, x), block<form>(run, 2, x),
                            block<form>(run, 3, x), block<form>(run, 4, x), block<form>(run, 5, x),
                            block<form>(run, 6, x), block<form>(run, 7, x)};
      return add_lanes(v, sums);
    }
    __m256i v[8];
    for (int i = 0; i < 8; ++i) v[i] = i < blocks ? block<form>(run, i, x) : _mm256_setzero_si256();
    add_lanes(v, sums);
  }
  // sums[i] = the sum of v[i]'s eight lanes.
  __attribute__((target("avx2"), always_inline)) static inline void add_lanes(const __m256i (&v)[8],
                                                                            std::int32_t* sums) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    // Lanes (0, 1, 2, 3 | 0, 1, 2, 3) and (4, 5, 6, 7 | 4, 5, 6, 7): halves of each block's sum.
    const __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
    const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums), s);
  }
};

__attribute__((target("avx2"), flatten)) void rows_avx2(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1,
                                                        std::int64_t t0, std::int64_t t1) {
  for (std::int64_t r = r0; r < r1; ++r) matmul_q8_row<IntDotAvx2>(a, r, t0, t1);
}
#endif

void rows_loop(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1, std::int64_t t0, std::int64_t t1) {
  for (std::int64_t r = r0; r < r1; ++r) matmul_q8_row<IntDotLoop>(a, r, t0, t1);
}

constexpr std::int64_t kRowsPerTask = 16;

}  // namespace

void matmul_q8_host(const MatmulQ8Args& a) {
#if TD_Q8_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const auto rows = avx2 ? rows_avx2 : rows_loop;
#else
  const auto rows = rows_loop;
#endif
  const std::int64_t tasks = (a.rows + kRowsPerTask - 1) / kRowsPerTask;
  // Tiles of activation rows outermost: a tile's activations stay in cache while every
  // weight row passes over them.
  for (std::int64_t t0 = 0; t0 < a.n; t0 += kQ8Tile) {
    const std::int64_t t1 = t0 + kQ8Tile < a.n ? t0 + kQ8Tile : a.n;
    host_for(tasks, kRowsPerTask * a.k * (t1 - t0), [&](std::int64_t task) {
      const std::int64_t r0 = task * kRowsPerTask;
      rows(a, r0, r0 + kRowsPerTask < a.rows ? r0 + kRowsPerTask : a.rows, t0, t1);
    });
  }
}

}  // namespace tapdiff::engine
