// OpenBLAS SGEMM throughput on the GEMMs of one engine prefill step: the yardstick the engine's
// prefill (pp128) is judged by.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace tapdiff::bench {

// C [m, n] = op(A) B with op(A) = Aᵀ, A a weight stored [k, m] column-major (ld k) and B the
// activations [k, n] (ld k): the engine's gemm(T, N, out, n, in, ...) convention.
struct GemmShape {
  int m = 0, n = 0, k = 0;
  int count = 0;  // how many distinct weights of this shape one step multiplies
};

// The projections of every layer for a batch of n_tokens positions (q, k, v, attn_output,
// ffn_gate, ffn_up, ffn_down), and the output head for the last position only.
std::vector<GemmShape> prefill_gemms(const ModelConfig& c, int n_tokens);
double gemm_flops(const std::vector<GemmShape>& shapes);  // 2·m·n·k summed

// Best-of-`reps` seconds for one pass over every shape (each weight a distinct matrix) with
// cblas_sgemm, single-threaded on a row slice per OpenMP thread: OpenBLAS as an OpenMP program
// runs it (its own pthread pool beside OpenMP's busy-waits against it, docs/engine.md
// "Threads"), and the engine's host GEMM before its AVX-512 tiles.
double time_sgemm(const std::vector<GemmShape>& shapes, int reps);
// The same pass through the engine's host GEMM (engine::gemm_host on the OpenMP threads: the
// AVX-512 tiles where the CPU has them, else single-threaded OpenBLAS in row slices; for
// prefill_gemms(c, 1), a decode step's weight GEMVs: one sdot per output, products under its
// flop threshold on one thread).
double time_gemm_host(const std::vector<GemmShape>& shapes, int reps);
// A decode step's weight GEMVs as OpenBLAS sgemv_t calls (the engine's path before it took
// sdot), every one split into one row slice per OpenMP thread.
double time_decode_sgemv_all_split(const ModelConfig& c, int reps);

}  // namespace tapdiff::bench
