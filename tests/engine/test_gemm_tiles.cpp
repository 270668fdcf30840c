// The host GEMM's AVX-512 tiles (engine/gemm/gemm_tiles.hpp): every element of C is alpha times
// one fused multiply-add chain over k in order, plus beta times the old C, whatever the tile,
// the slice and the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/executor.hpp"
#include "engine/gemm/gemm_tiles.hpp"
#include "model/quantize.hpp"

namespace tapdiff::engine {
namespace {

// Values whose products and sums round (no short exact sums), some large, some negative.
std::vector<float> values(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  std::uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (float(s >> 8) / float(1 << 24) - 0.5f) * ((s & 7) == 0 ? 37.0f : 1.3f);
  }
  return v;
}

struct Case {
  int m, n, k;
  GemmOp op_b;
  int pad;  // added to every leading dimension
  float alpha, beta;
};

// C as the tiles must compute it, element by element.
std::vector<float> chains(const Case& c, const std::vector<float>& a, int lda, const std::vector<float>& b, int ldb,
                          const std::vector<float>& c0, int ldc) {
  std::vector<float> out = c0;
  for (int j = 0; j < c.n; ++j)
    for (int i = 0; i < c.m; ++i) {
      float s = 0.0f;
      for (int p = 0; p < c.k; ++p) {
        const float bp = c.op_b == GemmOp::N ? b[std::size_t(p + j * ldb)] : b[std::size_t(j + p * ldb)];
        s = std::fma(a[std::size_t(p + i * lda)], bp, s);
      }
      float& y = out[std::size_t(i + j * ldc)];
      y = c.beta == 0.0f ? c.alpha * s : c.alpha * s + c.beta * y;
    }
  return out;
}

TEST(GemmTiles, EveryElementIsOneFusedChainOverKInOrder) {
  if (!gemm_tiles_supported()) GTEST_SKIP() << "no AVX-512 F here: the host GEMM takes OpenBLAS for every product";
  // Row counts around the tile's 12 and column counts around its halves of 16 and panels of 32.
  const Case cases[] = {{12, 32, 64, GemmOp::N, 0, 1.0f, 0.0f},   {1, 2, 1, GemmOp::N, 0, 1.0f, 0.0f},
                        {13, 17, 7, GemmOp::N, 3, 1.0f, 0.0f},    {11, 16, 100, GemmOp::T, 1, 1.0f, 0.0f},
                        {25, 33, 96, GemmOp::N, 5, 0.5f, -2.0f}, {49, 70, 33, GemmOp::T, 0, -1.25f, 0.75f},
                        {96, 128, 576, GemmOp::N, 0, 1.0f, 0.0f}, {7, 3, 0, GemmOp::N, 2, 1.0f, 0.5f}};
  for (const Case& c : cases)
    for (const int threads : {1, 2, 3}) {
      const int lda = c.k + c.pad, ldb = (c.op_b == GemmOp::N ? c.k : c.n) + c.pad, ldc = c.m + c.pad;
      const std::vector<float> a = values(std::size_t(lda) * c.m, 1);
      const std::vector<float> b = values(std::size_t(ldb) * (c.op_b == GemmOp::N ? c.n : c.k), 2);
      const std::vector<float> c0 = values(std::size_t(ldc) * c.n, 3);
      std::vector<float> y = c0;
      ASSERT_TRUE(gemm_tiles(GemmArgs{GemmOp::T, c.op_b, c.m, c.n, c.k, c.alpha, a.data(), ElemType::f32, lda, b.data(),
                                      ElemType::f32, ldb, c.beta, y.data(), ldc},
                             threads));
      const std::vector<float> want = chains(c, a, lda, b, ldb, c0, ldc);
      for (std::size_t e = 0; e < y.size(); ++e) {
        // Rows past m (the padding of ldc) are never written.
        ASSERT_EQ(y[e], want[e]) << c.m << " x " << c.n << " x " << c.k << " op_b "
                                 << (c.op_b == GemmOp::N ? "N" : "T") << ", " << threads << " threads, C["
                                 << e % std::size_t(ldc) << ", " << e / std::size_t(ldc) << "]";
      }
    }
}

TEST(GemmTiles, BetaZeroNeverReadsC) {
  if (!gemm_tiles_supported()) GTEST_SKIP() << "no AVX-512 F here: the host GEMM takes OpenBLAS for every product";
  const int m = 14, n = 5, k = 9;
  const std::vector<float> a = values(std::size_t(m) * k, 4), b = values(std::size_t(k) * n, 5);
  std::vector<float> y(std::size_t(m) * n, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(gemm_tiles(
      GemmArgs{GemmOp::T, GemmOp::N, m, n, k, 1.0f, a.data(), ElemType::f32, k, b.data(), ElemType::f32, k, 0.0f, y.data(), m},
      2));
  for (std::size_t e = 0; e < y.size(); ++e) ASSERT_TRUE(std::isfinite(y[e])) << "C[" << e % m << ", " << e / m << "]";
}

// A weight in its encoding, decoded a group of rows at a time inside the tiles and rounded to
// the precision: the C of decoding it whole with the kernel body (dequant_body) and multiplying
// that, bit for bit.
TEST(GemmTiles, AnEncodedWeightGivesTheProductOfItsDecodedMatrix) {
  if (!gemm_tiles_supported()) GTEST_SKIP() << "no AVX-512 F here: an encoded weight is decoded into scratch slices for OpenBLAS";
  struct Shape {
    int m, n;
  };
  const Shape shapes[] = {{1, 1}, {12, 2}, {13, 17}, {25, 33}, {40, 70}};
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    ASSERT_TRUE(gemm_tiles_decode(Encoded{nullptr, t.type, {}})) << t.name;
    const int k = 512;
    for (const ElemType round : {ElemType::f32, ElemType::f16, ElemType::bf16})
      for (const Shape& s : shapes)
        for (const int threads : {1, 2, 3}) {
          const int ldb = k + 3, ldc = s.m + 2;
          const std::vector<std::uint8_t> w = quantize(t.type, values(std::size_t(s.m) * k, 6));
          const std::vector<float> b = values(std::size_t(ldb) * s.n, 7);
          std::vector<float> decoded(std::size_t(s.m) * k);
          DequantArgs whole{w.data(), t.type, decoded.data(), std::int64_t(decoded.size())};
          whole.round = round;
          for (std::int64_t u = 0; u < decode_runs(whole.n); ++u) dequant_body(whole, u);
          const Case c{s.m, s.n, k, GemmOp::N, 0, 1.0f, 0.0f};
          const std::vector<float> c0(std::size_t(ldc) * s.n, -3.0f);
          const std::vector<float> want = chains(c, decoded, k, b, ldb, c0, ldc);
          std::vector<float> y = c0;
          ASSERT_TRUE(gemm_tiles_encoded(
              EncodedGemmArgs{Encoded{w.data(), t.type, {}}, s.m, s.n, k, b.data(), ldb, y.data(), ldc, round}, threads));
          for (std::size_t e = 0; e < y.size(); ++e)
            ASSERT_EQ(y[e], want[e]) << t.name << " at " << elem_type_name(round) << ", " << s.m << " x " << s.n << ", "
                                     << threads << " threads, C[" << e % std::size_t(ldc) << ", "
                                     << e / std::size_t(ldc) << "]";
        }
  }
  DequantQuirks quirk;
  quirk.q8_quant_unsigned = true;
  EXPECT_FALSE(gemm_tiles_decode(Encoded{nullptr, GgmlType::Q8_0, quirk})) << "a fault's decoder stays the kernel body's";
}

// The host executor multiplies an encoded weight at every precision where the tiles run and
// checks its arguments; an executor without the tiles refuses.
TEST(GemmTiles, TheHostExecutorMultipliesEncodedWeightsWhereTheTilesRun) {
  const std::unique_ptr<Executor> ex = make_host_executor();
  const Encoded q4k{nullptr, GgmlType::Q4_K, {}};
  EXPECT_EQ(ex->gemm_decodes(q4k), gemm_tiles_supported());
  const std::vector<std::uint8_t> w = quantize(GgmlType::Q4_K, values(256, 8));
  const std::vector<float> b(512, 1.0f);
  std::vector<float> y(2);
  if (gemm_tiles_supported()) {  // the precision reaches the tiles: f16 rounds the decoded weights
    std::vector<float> at_f32(2), at_f16(2);
    ex->gemm_encoded(EncodedGemmArgs{Encoded{w.data(), GgmlType::Q4_K, {}}, 1, 2, 256, b.data(), 256, at_f32.data(), 1});
    ex->gemm_encoded(EncodedGemmArgs{Encoded{w.data(), GgmlType::Q4_K, {}}, 1, 2, 256, b.data(), 256, at_f16.data(), 1,
                                     ElemType::f16});
    EXPECT_NE(at_f16, at_f32);
  }
  EXPECT_THROW(ex->gemm_encoded(EncodedGemmArgs{Encoded{w.data(), GgmlType::Q4_K, {}}, 1, 2, 100, b.data(), 256, y.data(), 1}),
               std::invalid_argument)
      << "k inside a block";
  EXPECT_THROW(ex->gemm_encoded(EncodedGemmArgs{Encoded{w.data(), GgmlType::Q4_K, {}}, 1, 2, 256, b.data(), 100, y.data(), 1}),
               std::invalid_argument)
      << "ldb < k";
}

TEST(GemmTiles, TakenForTheEngineWeightLayoutWhereTheCpuHasAvx512) {
  const std::vector<float> a(64, 0.5f), b(64, 0.25f);
  std::vector<float> y(64);
  const auto tiled = [&](GemmOp op_a, int n) {
    return gemm_tiles(GemmArgs{op_a, GemmOp::N, 4, n, 4, 1.0f, a.data(), ElemType::f32, 4, b.data(), ElemType::f32, 4,
                               0.0f, y.data(), 4},
                      1);
  };
  EXPECT_EQ(tiled(GemmOp::T, 2), gemm_tiles_supported());
  EXPECT_FALSE(tiled(GemmOp::N, 2)) << "op(A) = A is OpenBLAS's";
  EXPECT_FALSE(tiled(GemmOp::T, 1)) << "one column of B is a decode step's sdot per element";
}

}  // namespace
}  // namespace tapdiff::engine
