// Small integers put into vector lanes one by one, for the host's x86 kernels. Built through an
// array in memory instead, the vector's load waits for the stores it spans (a load is not
// forwarded from several), and GCC's own assembly of _mm_setr_epi32 and of such copies can do
// the same: a Q4_1 matvec ran at 23.9 billion weights/s against 38 to 40 so
// (docs/engine.md, "Weights in their encoding"). Host only: include from x86-64 translation
// units compiled by GCC or Clang.
#pragma once

#include <immintrin.h>

namespace tapdiff::engine {

// at(k), at(k + 1), at(k + 2), at(k + 3) in lanes 0..3.
template <typename At>
__attribute__((target("sse4.1"), always_inline)) inline __m128i four_lanes(const At& at, int k) {
  return _mm_insert_epi32(_mm_insert_epi32(_mm_insert_epi32(_mm_cvtsi32_si128(at(k)), at(k + 1), 1), at(k + 2), 2),
                          at(k + 3), 3);
}

// at(k), ..., at(k + 7) in the eight 16-bit lanes.
template <typename At>
__attribute__((target("sse4.1"), always_inline)) inline __m128i eight_lanes16(const At& at, int k) {
  __m128i v = _mm_cvtsi32_si128(at(k));
  v = _mm_insert_epi16(v, at(k + 1), 1);
  v = _mm_insert_epi16(v, at(k + 2), 2);
  v = _mm_insert_epi16(v, at(k + 3), 3);
  v = _mm_insert_epi16(v, at(k + 4), 4);
  v = _mm_insert_epi16(v, at(k + 5), 5);
  v = _mm_insert_epi16(v, at(k + 6), 6);
  return _mm_insert_epi16(v, at(k + 7), 7);
}

}  // namespace tapdiff::engine
