// Decode products (matvec) on a CPU with AVX-512: matvec_row's products and order of sums, with
// each sub-block of 32 weights decoded into two registers of sixteen floats
// (decode_avx512.hpp) and multiplied there, never stored. Register lane s of the low half is
// matvec_row's slot s, of the high half slot 16 + s, so the results are matvec_row's bit for
// bit (tests/engine/test_kernels.cpp).
#pragma once

#include <cstdint>

#include "engine/kernels/matvec.hpp"

namespace tapdiff::engine {

// Whether matvec_avx512_rows computes `a`: no decoder quirk (the faults' decoders stay
// matvec_row's) and a CPU with AVX-512 F. Every precision: weights rounded to f16 or bf16 round
// in registers, as round_run rounds them.
bool matvec_avx512_applies(const MatvecArgs& a);

// Rows [r0, r1) of `a`, where matvec_avx512_applies(a).
void matvec_avx512_rows(const MatvecArgs& a, std::int64_t r0, std::int64_t r1);

}  // namespace tapdiff::engine
