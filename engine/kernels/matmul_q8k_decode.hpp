// One activation row (decode) against the K-quants at precision q8 on the host, with AVX-512
// BW and VNNI: two blocks of 32 a register, read from the encoded bytes. The integer lanes and
// the float arithmetic are matmul_q8k.hpp's, so the products are matmul_q8k_row's bit for bit
// (tests/engine/test_matmul_q8.cpp).
#pragma once

#include "engine/kernels/matmul_q8.hpp"

namespace tapdiff::engine {

// Multiplies `a` and returns true, or returns false where this does not apply (more than one
// activation row, blocks of 32, or a CPU without AVX-512 VNNI): the caller then does.
bool matmul_q8k_decode(const MatmulQ8Args& a);

}  // namespace tapdiff::engine
