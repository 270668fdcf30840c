// The host executor's GEMM: the engine's weight products on AVX-512 take gemm_tiles.hpp's
// register tiles; the rest OpenBLAS, on row slices of C, one slice per OpenMP thread (sgemm;
// for a single column of B, sdot per element or sgemv).
// OpenBLAS itself runs single-threaded (HostExecutor sets it): its pthread pool and the
// OpenMP pool would otherwise busy-wait against each other between calls, which measured 5-6x
// slower on 2 cores (docs/engine.md). Each C element is still one OpenBLAS dot product over
// k, and the slices depend only on the thread count, so results are deterministic.
#include <algorithm>
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>
#include <stdexcept>

#include "engine/gemm/gemm.hpp"
#include "engine/gemm/gemm_tiles.hpp"
#include "engine/kernels/host_loop.hpp"

namespace tapdiff::engine {
namespace {

CBLAS_TRANSPOSE cblas_op(GemmOp op) { return op == GemmOp::T ? CblasTrans : CblasNoTrans; }

// Below this a product stays on the calling thread: waking a sleeping OpenMP thread
// (OMP_WAIT_POLICY=passive, the setting for shared machines) costs more than a second thread
// saves on a 576-wide model's q/o projections (6.6e5 flops); where waiting threads spin, the
// q/k/v/o projections split too. docs/engine.md "Threads" has the measurements both ways.
std::int64_t min_parallel_flops() {
  return omp_threads_spin() ? std::int64_t(1) << 17 : std::int64_t(1) << 20;
}
constexpr int kSliceAlign = 16;  // rows per slice a multiple of the micro-kernel height

}  // namespace

void gemm_host(const GemmArgs& g) {
  if (g.a_type != ElemType::f32 || g.b_type != ElemType::f32)
    throw std::invalid_argument(
        fmt::format("gemm: the host executor takes f32 operands, got {} and {}",
                    elem_type_name(g.a_type), elem_type_name(g.b_type)));
  if (g.m == 0 || g.n == 0) return;
  const auto* a = static_cast<const float*>(g.a);
  const auto* b = static_cast<const float*>(g.b);
  const std::int64_t flops = 2 * std::int64_t(g.m) * g.n * g.k;
  const int threads = flops >= min_parallel_flops() ? omp_get_max_threads() : 1;
  if (gemm_tiles(g, threads)) return;
  const int parts = std::min(threads, (g.m + kSliceAlign - 1) / kSliceAlign);
  const int rows = (g.m + parts - 1) / parts;
  const int slice = (rows + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
  for (int p = 0; p < parts; ++p) {
    const int i0 = std::min(g.m, p * slice), i1 = std::min(g.m, i0 + slice);
    if (i0 >= i1) continue;
    // Rows i0..i1 of op(A): rows of A under N, columns of A (ld apart) under T.
    const float* a_slice = g.op_a == GemmOp::N ? a + i0 : a + std::int64_t(i0) * g.lda;
    if (g.n == 1) {
      // One column of op(B) (a decode step). That column is contiguous under N (k × 1) and
      // has its elements ldb apart under T (1 × k).
      const int incx = g.op_b == GemmOp::N ? 1 : g.ldb;
      if (g.op_a == GemmOp::T) {
        // Each row of op(A) is a contiguous column of A: one OpenBLAS dot per element of C.
        // On these machines sdot streams weights of a few hundred rows far faster than sgemv_t
        // (bench/results/models.md, "decode GEMVs alone").
        for (int i = i0; i < i1; ++i) {
          const float dot = cblas_sdot(g.k, a + std::int64_t(i) * g.lda, 1, b, incx);
          g.c[i] = g.beta == 0.0f ? g.alpha * dot : g.alpha * dot + g.beta * g.c[i];
        }
      } else {
        cblas_sgemv(CblasColMajor, CblasNoTrans, i1 - i0, g.k, g.alpha, a_slice, g.lda, b, incx,
                    g.beta, g.c + i0, 1);
      }
    } else {
      cblas_sgemm(CblasColMajor, cblas_op(g.op_a), cblas_op(g.op_b), i1 - i0, g.n, g.k, g.alpha,
                  a_slice, g.lda, b, g.ldb, g.beta, g.c + i0, g.ldc);
    }
  }
}

void gemm_encoded_host(const EncodedGemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  const std::int64_t flops = 2 * std::int64_t(g.m) * g.n * g.k;
  if (!gemm_tiles_encoded(g, flops >= min_parallel_flops() ? omp_get_max_threads() : 1))
    throw std::invalid_argument(
        fmt::format("gemm_encoded: the host's tiles do not multiply {} here", ggml_type_traits(g.w.type).name));
}

}  // namespace tapdiff::engine
