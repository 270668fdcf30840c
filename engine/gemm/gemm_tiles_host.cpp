#include "engine/gemm/gemm_tiles.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/kernels/dequant_avx512.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_GEMM_TILES 1
#endif

namespace tapdiff::engine {

#if TD_GEMM_TILES
namespace {

#define TD_AVX512 __attribute__((target("avx512f")))

constexpr int kPanel = 32;  // columns of op(B) a tile spans: two vectors of 16

// op(B) copied in panels of kPanel columns, so that a tile reads element p of its kPanel
// columns as two vectors: element (p, j) of op(B) lands at kPanel·k·q + kPanel·p + j % kPanel,
// q = j / kPanel; the last panel is zero past column n. Written in order, one p at a time: the
// panel is larger than L1, and filling it a column at a time missed on every write.
void pack_panel(const GemmArgs& g, int q, float* packed) {
  // Element (p, j) of op(B) is B[p + j·ldb] (op N: column j contiguous) or B[j + p·ldb] (op T).
  const std::int64_t p_step = g.op_b == GemmOp::N ? 1 : g.ldb, j_step = g.op_b == GemmOp::N ? g.ldb : 1;
  const float* first = static_cast<const float*>(g.b) + std::int64_t(q) * kPanel * j_step;
  const int cols = std::min(kPanel, g.n - q * kPanel);
  float* dst = packed + std::int64_t(q) * kPanel * g.k;
  for (int p = 0; p < g.k; ++p, dst += kPanel) {
    const float* at = first + p * p_step;
    int jj = 0;
    for (; jj < cols; ++jj) dst[jj] = at[jj * j_step];
    for (; jj < kPanel; ++jj) dst[jj] = 0.0f;
  }
}

// Rows i..i+R-1 of op(A) (rows of the weight, contiguous in p) against a panel's first 16·V
// columns: R·V accumulators, each element's chain one lane. out[r][j] receives (r, j).
template <int R, int V>
TD_AVX512 void tile(const float* a, int lda, const float* panel, int k, float (&out)[kGemmTileRows][kPanel]) {
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int p = 0; p < k; ++p) {
    __m512 b[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(panel + std::int64_t(p) * kPanel + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[std::int64_t(r) * lda + p]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(ar, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(&out[r][16 * v], acc[r][v]);
}

using TileFn = void (*)(const float*, int, const float*, int, float (&)[kGemmTileRows][kPanel]);

template <int V, int... R>
constexpr auto tiles_by_rows(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&tile<R + 1, V>...};
}
// [V - 1][R - 1]: the tile for R rows and 16·V columns.
const std::array<std::array<TileFn, kGemmTileRows>, 2> kTiles = {
    tiles_by_rows<1>(std::make_integer_sequence<int, kGemmTileRows>{}),
    tiles_by_rows<2>(std::make_integer_sequence<int, kGemmTileRows>{})};

// Rows [i, i + rows) of C from the packed panels, rows <= kGemmTileRows: the rows of op(A)
// that rows_of_a(i, rows) returns (lda apart) against every panel in turn (they stay in cache
// across the panels).
template <typename RowsOfA>
void tile_group(const GemmArgs& g, const float* packed, int i, int rows, int lda, const RowsOfA& rows_of_a) {
  const int panels = (g.n + kPanel - 1) / kPanel;
  float out[kGemmTileRows][kPanel];
  const float* a = rows_of_a(i, rows);
  for (int q = 0; q < panels; ++q) {
    const int cols = std::min(kPanel, g.n - q * kPanel);
    kTiles[cols > 16][rows - 1](a, lda, packed + std::int64_t(q) * kPanel * g.k, g.k, out);
    for (int jj = 0; jj < cols; ++jj) {
      float* c = g.c + std::int64_t(q * kPanel + jj) * g.ldc + i;
      for (int r = 0; r < rows; ++r)
        c[r] = g.beta == 0.0f ? g.alpha * out[r][jj] : g.alpha * out[r][jj] + g.beta * c[r];
    }
  }
}

// C on up to `threads` OpenMP threads: op(B) packed into panels, then the groups of
// kGemmTileRows rows handed out a few at a time as threads come free (a VM's two threads do
// not always run at the same speed).
template <typename RowsOfA>
void tiles(const GemmArgs& g, int threads, int lda, const RowsOfA& rows_of_a) {
  const int panels = (g.n + kPanel - 1) / kPanel;
  static thread_local std::vector<float> buffer;  // the caller's, grown to the largest B
  buffer.resize(std::size_t(panels) * kPanel * g.k);
  float* packed = buffer.data();  // a thread_local named inside the region would be each thread's own
  const int groups = (g.m + kGemmTileRows - 1) / kGemmTileRows;
  const int parts = std::max(1, std::min(threads, groups));
#pragma omp parallel num_threads(parts) if (parts > 1)
  {
#pragma omp for schedule(static)
    for (int q = 0; q < panels; ++q) pack_panel(g, q, packed);
#pragma omp for schedule(dynamic, 2)
    for (int group = 0; group < groups; ++group) {
      const int i = group * kGemmTileRows;
      tile_group(g, packed, i, std::min(kGemmTileRows, g.m - i), lda, rows_of_a);
    }
  }
}

}  // namespace

bool gemm_tiles_supported() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
}

bool gemm_tiles(const GemmArgs& g, int threads) {
  if (g.op_a != GemmOp::T || g.n < 2 || !gemm_tiles_supported()) return false;
  const auto* a = static_cast<const float*>(g.a);
  tiles(g, threads, g.lda, [&](int i, int) { return a + std::int64_t(i) * g.lda; });
  return true;
}

bool gemm_tiles_decode(const Encoded& w) {
  DequantArgs d;
  d.type = w.type;
  d.quirks = w.quirks;
  return gemm_tiles_supported() && dequant_avx512_applies(d);
}

bool gemm_tiles_encoded(const EncodedGemmArgs& e, int threads) {
  if (!gemm_tiles_decode(e.w)) return false;
  const GemmArgs g{GemmOp::T, GemmOp::N, e.m, e.n, e.k, 1.0f, nullptr, ElemType::f32, e.k, e.b, ElemType::f32, e.ldb,
                   0.0f, e.c, e.ldc};
  tiles(g, threads, e.k, [&](int i, int rows) {
    static thread_local std::vector<float> decoded;  // each thread's group of rows
    decoded.resize(std::size_t(kGemmTileRows) * std::size_t(e.k));
    DequantArgs d{e.w.bytes, e.w.type, decoded.data(), std::int64_t(rows) * e.k, e.w.quirks};
    d.first = std::int64_t(i) * e.k;
    d.round = e.round;
    dequant_avx512_range(d, 0, d.n);
    return static_cast<const float*>(decoded.data());
  });
  return true;
}

#else

bool gemm_tiles_supported() { return false; }
bool gemm_tiles(const GemmArgs&, int) { return false; }
bool gemm_tiles_decode(const Encoded&) { return false; }
bool gemm_tiles_encoded(const EncodedGemmArgs&, int) { return false; }

#endif

}  // namespace tapdiff::engine
