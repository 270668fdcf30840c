// Batches of activation rows (prefill) on the host, register-tiled: four weight rows against
// four activation rows at a time, with AVX-512 VNNI's byte dot products. The integer sums and
// the float arithmetic are matmul_q8.hpp's and matmul_q8k.hpp's, so the products are those of
// matmul_q8_row and matmul_q8k_row bit for bit (tests/engine/test_matmul_q8.cpp).
#pragma once

#include "engine/kernels/matmul_q8.hpp"

namespace tapdiff::engine {

// Whether this machine runs the tiled products at all (AVX-512 VL, BW and VNNI, F16C).
bool q8_tiles_supported();

// Multiplies `a` tiled and returns true, or returns false where the tiles do not apply (one
// activation row, an encoding or quirk they do not take, or no VNNI): the caller then does.
bool matmul_q8_tiles(const MatmulQ8Args& a);

}  // namespace tapdiff::engine
