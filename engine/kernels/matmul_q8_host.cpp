#include <cstring>

#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matmul_q8.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_Q8_AVX2 1
#endif

namespace tapdiff::engine {
namespace {

#if TD_Q8_AVX2
// IntDotLoop's sums with AVX2, 32 products at a time: |w| times x with w's sign (maddubs
// takes an unsigned and a signed operand; |w| <= 128, |x| <= 127, so its pair sums fit in 16
// bits), then pairs of those times the groups' multipliers (madd), leaving 8 lanes of 32 bits,
// and the lanes of eight blocks added horizontally.
struct IntDotAvx2 {
  __attribute__((target("avx2"), always_inline)) static inline __m256i block(const std::int8_t* w, const std::int8_t* x,
                                                                           const std::int16_t* multiplier) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
    const __m256i m = _mm256_setr_m128i(_mm_set1_epi16(multiplier[0]), _mm_set1_epi16(multiplier[1]));
    return _mm256_madd_epi16(products, m);
  }
  // Not always_inline: matmul_q8_row<IntDotAvx2> is compiled for any x86-64 on its own, and
  // rows_avx2's flatten inlines it there.
  __attribute__((target("avx2"))) static void blocks(const std::int8_t* w, const std::int8_t* x,
                                                     const std::int16_t* multiplier, int blocks, std::int32_t* sums) {
    static_assert(kRunBlocks == 8, "one run is eight blocks: one horizontal sum");
    if (blocks < kRunBlocks) {  // a short run: the missing blocks' sums are 0
      alignas(32) std::int8_t w_run[kDecodeRun] = {}, x_run[kDecodeRun] = {};
      std::memcpy(w_run, w, std::size_t(blocks) * kQ8Block);
      std::memcpy(x_run, x, std::size_t(blocks) * kQ8Block);
      return IntDotAvx2::blocks(w_run, x_run, multiplier, kRunBlocks, sums);
    }
    const __m256i v[8] = {block(w, x, multiplier), block(w + 32, x + 32, multiplier + 2),
                          block(w + 64, x + 64, multiplier + 4), block(w + 96, x + 96, multiplier + 6),
                          block(w + 128, x + 128, multiplier + 8), block(w + 160, x + 160, multiplier + 10),
                          block(w + 192, x + 192, multiplier + 12), block(w + 224, x + 224, multiplier + 14)};
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
