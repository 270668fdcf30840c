// One activation row (decode) at precision q8 on the host, with AVX-512 BW and VNNI: two blocks
// of 32 a register, read from the encoded bytes, for the legacy types and the K-quants. The
// integer sums and the float arithmetic are those of matmul_q8.hpp and matmul_q8k.hpp, so the
// products are matmul_q8_row's and matmul_q8k_row's bit for bit (tests/engine/test_matmul_q8.cpp).
#pragma once

#include "engine/kernels/matmul_q8.hpp"

namespace tapdiff::engine {

// Multiplies `a` and returns true, or returns false where this does not apply (more than one
// activation row, a type under a decoder quirk, or a CPU without AVX-512 VNNI): the caller
// then does.
bool matmul_q8_decode(const MatmulQ8Args& a);

}  // namespace tapdiff::engine
