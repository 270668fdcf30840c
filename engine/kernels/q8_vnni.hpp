// What precision q8's AVX-512 VNNI products share on the host (matmul_q8_tiles_host.cpp for
// batches, matmul_q8_decode_host.cpp for one row): their target and the sum of a register's
// halves. Host only: include from x86-64 translation units compiled by GCC.
#pragma once

#include "engine/kernels/avx512.hpp"

#define TD_VNNI __attribute__((target("avx2,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define TD_VNNI_INLINE TD_VNNI __attribute__((always_inline)) static inline

namespace tapdiff::engine::q8_vnni {

// Lane i of the low half plus lane i of the high half (exact: 32-bit integers).
TD_VNNI_INLINE __m256i halves_added(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

}  // namespace tapdiff::engine::q8_vnni
