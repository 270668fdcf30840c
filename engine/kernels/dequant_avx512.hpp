// Dequantization on a CPU with AVX-512: dequant_body's values, decoded a sub-block of 32 at a
// time into registers (decode_avx512.hpp) and stored, instead of the kernel body's scalar
// loops. The host's GEMM tiles decode an encoded weight's rows this way (gemm_tiles.hpp).
#pragma once

#include <cstdint>

#include "engine/kernels/dequant.hpp"

namespace tapdiff::engine {

// Whether dequant_avx512_range computes `a`: values stored as float32 (rounded to a.round
// first, as round_run rounds them), no decoder quirk (the faults' decoders stay
// dequant_body's), and a CPU with AVX-512 F.
bool dequant_avx512_applies(const DequantArgs& a);

// Elements [e0, e1) of a's destination, e0 a multiple of the type's block size and e1 too or
// a.n, where dequant_avx512_applies(a). The values are dequant_body's, but for a NaN's bits.
void dequant_avx512_range(const DequantArgs& a, std::int64_t e0, std::int64_t e1);

}  // namespace tapdiff::engine
