// The host GEMM's own products where op(A) is Aᵀ (the engine's weights, row-major [out, in])
// and the CPU has AVX-512: register tiles of kGemmTileRows rows of op(A) by 32 columns of
// op(B). Where the environment pins OPENBLAS_CORETYPE=Haswell (some of the machines measured),
// OpenBLAS runs AVX2 kernels at half the FMA width; where it does not, OpenBLAS is about as fast
// as the tiles. docs/engine.md, "Host GEMM", has the measurements.
//
// Each element of C is alpha times one fused multiply-add chain over p = 0..k-1 in order
// (plus beta times C): its value depends neither on the tile it falls in, nor on the slice of
// rows, nor on the thread count (tests/engine/test_gemm_tiles.cpp).
#pragma once

#include "engine/gemm/gemm.hpp"

namespace tapdiff::engine {

inline constexpr int kGemmTileRows = 12;

// Whether this machine runs the tiles at all (AVX-512 F).
bool gemm_tiles_supported();

// Computes C on up to `threads` OpenMP threads and returns true, or returns false where the
// tiles do not apply (op(A) not Aᵀ, a single column of B, no AVX-512): the caller then does.
bool gemm_tiles(const GemmArgs& g, int threads);

// Whether gemm_tiles_encoded multiplies a weight of this encoding: the tiles run here and
// dequant_avx512 decodes it (no decoder quirk).
bool gemm_tiles_decode(const Encoded& w);

// The product of a weight in its encoding (EncodedGemmArgs), each group of kGemmTileRows rows
// decoded (and rounded to g.round) into the thread's cache just before its tiles multiply it:
// the C that decoding W into a scratch matrix and gemm_tiles on it give, without that matrix
// going out to memory and back.
// False where it does not apply (gemm_tiles_decode).
bool gemm_tiles_encoded(const EncodedGemmArgs& g, int threads);

}  // namespace tapdiff::engine
