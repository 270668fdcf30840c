// Precision q8's kernels on the host executor: activations quantized in blocks of 32 (q8_0) and
// of 256 (q8_K, for the K-quants), and the integer products of every block type against
// model/'s decoding of the weights (the oracle, in double), batch against single rows, the AVX2
// sums against the portable ones, and the decoder quirks faults plant.
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>

#include "engine/executor.hpp"
#include "engine/kernels/matmul_q8_tiles.hpp"
#include "engine/kernels/matmul_q8_decode.hpp"
#include "kernel_test_util.hpp"
#include "model/dequantize.hpp"
#include "model/quantize.hpp"

namespace tapdiff::engine {
namespace {

using test::all_close;
using test::arbitrary_bytes;
using test::same_floats;
using test::test_values;

// n rows of k activations quantized by the host executor in blocks of `block`, with their storage.
struct Quantized {
  std::vector<std::int8_t> q;
  std::vector<float> d, ds;
  std::vector<std::int16_t> sums;
  int block = kQ8Block;
  Q8Rows rows() { return Q8Rows{q.data(), d.data(), ds.data(), sums.data(), block}; }
  // Row t alone.
  Q8Rows row(std::int64_t t, std::int64_t k) {
    return Q8Rows{q.data() + t * k, d.data() + t * k / block, ds.data() + t * k / kQ8Block,
                  sums.data() + t * k / kQ8Block, block};
  }
};

Quantized quantize_rows(Executor& ex, const std::vector<float>& x, std::int64_t n, std::int64_t k,
                        int block = kQ8Block) {
  const auto size = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  Quantized out{std::vector<std::int8_t>(size(n * k)), std::vector<float>(size(n * k / block)),
                std::vector<float>(size(n * k / kQ8Block)), std::vector<std::int16_t>(size(n * k / kQ8Block)), block};
  ex.quantize_q8(QuantizeQ8Args{x.data(), k, n, k, out.rows()});
  return out;
}

TEST(Q8, TheHostQuantizesAsThePortableBodyBitForBit) {
  // The host's vector quantizer against quantize_q8_block, blocks of 32 and 256: halves that
  // roundf takes away from zero, a value at the clamp, an all-zero block, a block whose 1 / d
  // overflows (denormal amax), NaN and infinity (the body's own path), negative zeros.
  auto ex = make_host_executor();
  const std::int64_t n = 3, k = 512;
  std::vector<float> x = test_values(std::size_t(n * k), 5, 3.0f);
  for (std::size_t i = 0; i < 32; ++i) x[i] = (float(i) - 16.0f) * 0.5f;  // amax 8: id 127 / 8
  for (std::size_t i = 32; i < 64; ++i) x[i] = float(i) - 48.5f;            // id 1: every x id a half
  x[40] = 127.0f, x[41] = -127.0f;
  for (std::size_t i = 64; i < 96; ++i) x[i] = -0.0f;
  for (std::size_t i = 96; i < 128; ++i) x[i] = 1e-42f * float(i % 3);
  x[130] = std::numeric_limits<float>::quiet_NaN();
  x[700] = std::numeric_limits<float>::infinity();
  x[1100] = -std::numeric_limits<float>::infinity();
  for (const int block : {kQ8Block, kQ8KBlock}) {
    Quantized host = quantize_rows(*ex, x, n, k, block);
    Quantized body{std::vector<std::int8_t>(host.q.size(), 99), std::vector<float>(host.d.size(), 99.0f),
                   std::vector<float>(host.ds.size(), 99.0f), std::vector<std::int16_t>(host.sums.size(), 99), block};
    const QuantizeQ8Args a{x.data(), k, n, k, body.rows()};
    for (std::int64_t i = 0; i < n * k / block; ++i) quantize_q8_block(a, i);
    EXPECT_EQ(host.q, body.q) << "blocks of " << block;
    EXPECT_EQ(0, std::memcmp(host.d.data(), body.d.data(), host.d.size() * sizeof(float))) << "blocks of " << block;
    if (block == kQ8Block)
      EXPECT_EQ(0, std::memcmp(host.ds.data(), body.ds.data(), host.ds.size() * sizeof(float)));
    else
      EXPECT_EQ(host.sums, body.sums);
  }
}

// y[t][r] = sum_c W[r, c] d_x q_x[t, c] in double, W decoded by model/.
std::vector<double> oracle(GgmlType type, const std::vector<std::uint8_t>& bytes, std::int64_t rows,
                           std::int64_t cols, std::int64_t k, const Quantized& x, std::int64_t n) {
  std::vector<float> w(std::size_t(rows * cols));
  dequantize_row(type, bytes.data(), w.data(), rows * cols);
  std::vector<double> y(std::size_t(n * rows));
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < k; ++c)
        y[std::size_t(t * rows + r)] += double(w[std::size_t(r * cols + c)]) * x.d[std::size_t((t * k + c) / x.block)] *
                                        x.q[std::size_t(t * k + c)];
  return y;
}

TEST(Q8, ActivationsAreQuantizedPerBlockOf32) {
  auto ex = make_host_executor();
  const std::int64_t n = 3, k = 96;
  std::vector<float> x = test_values(std::size_t(n * k), 3, 5.0f);
  x[40] = 0.0f;
  for (std::size_t i = 64; i < 96; ++i) x[i] = 0.0f;  // an all-zero block: scale 0, integers 0
  const Quantized xq = quantize_rows(*ex, x, n, k);
  for (std::int64_t b = 0; b < n * k / kQ8Block; ++b) {
    float amax = 0;
    std::int32_t sum = 0;
    for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::abs(x[std::size_t(b * kQ8Block + j)]));
    const float d = xq.d[std::size_t(b)];
    EXPECT_EQ(d, amax / 127.0f) << "block " << b;
    for (int j = 0; j < kQ8Block; ++j) {
      const std::size_t i = std::size_t(b * kQ8Block + j);
      EXPECT_EQ(xq.q[i], d == 0 ? 0 : std::int8_t(std::round(x[i] * (1.0f / d)))) << "value " << i;
      sum += xq.q[i];
    }
    EXPECT_EQ(xq.ds[std::size_t(b)], d * float(sum)) << "block " << b;
  }
}

TEST(Q8, ActivationsAreQuantizedPerBlockOf256WithSumsPer32) {
  auto ex = make_host_executor();
  const std::int64_t n = 2, k = 512;
  std::vector<float> x = test_values(std::size_t(n * k), 4, 5.0f);
  for (std::size_t i = 256; i < 512; ++i) x[i] = 0.0f;  // an all-zero block: scale 0, integers 0
  const Quantized xq = quantize_rows(*ex, x, n, k, kQ8KBlock);
  for (std::int64_t b = 0; b < n * k / kQ8KBlock; ++b) {
    float amax = 0;
    for (int j = 0; j < kQ8KBlock; ++j) amax = std::max(amax, std::abs(x[std::size_t(b * kQ8KBlock + j)]));
    const float d = xq.d[std::size_t(b)];
    EXPECT_EQ(d, amax / 127.0f) << "block " << b;
    for (int j = 0; j < kQ8KBlock; ++j) {
      const std::size_t i = std::size_t(b * kQ8KBlock + j);
      EXPECT_EQ(xq.q[i], d == 0 ? 0 : std::int8_t(std::round(x[i] * (1.0f / d)))) << "value " << i;
    }
  }
  for (std::int64_t g = 0; g < n * k / kQ8Block; ++g) {
    std::int32_t sum = 0;
    for (int j = 0; j < kQ8Block; ++j) sum += xq.q[std::size_t(g * kQ8Block + j)];
    EXPECT_EQ(xq.sums[std::size_t(g)], sum) << "group of 32 " << g;
  }
}

TEST(Q8, EveryBlockTypeMultipliesItsDecodedWeights) {
  auto ex = make_host_executor();
  const std::int64_t rows = 37, n = 3;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const Encoded probe{nullptr, t.type, {}};
    if (!q8_multipliable(probe)) continue;
    // Whole 256-runs plus a short run (legacy types), or 3 k-blocks.
    const std::int64_t cols = t.block_elems == 256 ? 768 : 608;
    const std::vector<std::uint8_t> bytes = quantize(t.type, test_values(std::size_t(rows * cols), 61, 0.1f));
    const std::vector<float> x = test_values(std::size_t(n * cols), 62, 2.0f);
    Quantized xq = quantize_rows(*ex, x, n, cols, q8_activation_block(Encoded{nullptr, t.type, {}}, cols));
    std::vector<float> y(std::size_t(n * rows), -7.0f);
    ex->matmul_q8(MatmulQ8Args{Encoded{bytes.data(), t.type, {}}, cols, rows, cols, xq.rows(), n, y.data(), rows});
    EXPECT_TRUE(all_close(y, oracle(t.type, bytes, rows, cols, cols, xq, n), 1e-5, 1e-5)) << t.name;
  }
}

TEST(Q8, ABatchGivesEachRowsSingleProductBitForBit) {
  // Prefill and decode run the same sums: row t of a batch is what row t alone gives (which for
  // Q4_K reads the encoded bytes), and rows past a tile of kQ8Tile are no different.
  auto ex = make_host_executor();
  const std::int64_t rows = 20, cols = 512, n = kQ8Tile + 3;
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K})
    for (const int block : {kQ8Block, kQ8KBlock}) {
      const std::vector<std::uint8_t> bytes = quantize(type, test_values(std::size_t(rows * cols), 71, 0.1f));
      Quantized xq = quantize_rows(*ex, test_values(std::size_t(n * cols), 72, 3.0f), n, cols, block);
      std::vector<float> batch(std::size_t(n * rows));
      ex->matmul_q8(MatmulQ8Args{Encoded{bytes.data(), type, {}}, cols, rows, cols, xq.rows(), n, batch.data(), rows});
      for (std::int64_t t = 0; t < n; ++t) {
        std::vector<float> single(static_cast<std::size_t>(rows));
        ex->matmul_q8(MatmulQ8Args{Encoded{bytes.data(), type, {}}, cols, rows, cols, xq.row(t, cols), 1, single.data(), rows});
        EXPECT_EQ(0, std::memcmp(single.data(), batch.data() + t * rows, single.size() * sizeof(float)))
            << ggml_type_traits(type).name << ", blocks of " << block << ", row " << t;
      }
    }
}

// The host executor's products of `type` against `portable`, the body the CUDA executor runs,
// bit for bit, for 1, 2, 5, kQ8Tile + 1 and 67 activation rows in blocks of `block` (on a CPU
// with AVX-512 VNNI, batches take matmul_q8_tiles: 67 rows are more than one of its passes),
// 9 and 11 weight rows (tiles of four with one and three rows over), every column or fewer
// (k < cols: rows of weights are longer than those of activations), results ldy apart with
// gaps between them that must stay as they were.
using RowBody = void (*)(const MatmulQ8Args&, std::int64_t, std::int64_t, std::int64_t);
void expect_host_is_portable(Executor& ex, GgmlType type, std::int64_t cols, int block, RowBody portable_row) {
  for (const std::int64_t rows : {std::int64_t{9}, std::int64_t{11}}) {
    const std::vector<std::uint8_t> bytes = quantize(type, test_values(std::size_t(rows * cols), 81, 0.3f));
    const std::int64_t ldy = rows + 3;
    for (const std::int64_t k : {cols, cols > 512 ? cols - 256 : std::int64_t{256}})
      for (const std::int64_t n : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, std::int64_t{kQ8Tile + 1}, std::int64_t{67}}) {
        Quantized xq = quantize_rows(ex, test_values(std::size_t(n * k), 82, 1.0f), n, k, block);
        const MatmulQ8Args a{Encoded{bytes.data(), type, {}}, cols, rows, k, xq.rows(), n, nullptr, ldy};
        std::vector<float> host(std::size_t(n * ldy), -7.0f), loop(std::size_t(n * ldy), -7.0f);
        MatmulQ8Args on_host = a;
        on_host.y = host.data();
        ex.matmul_q8(on_host);
        MatmulQ8Args portable = a;
        portable.y = loop.data();
        for (std::int64_t t0 = 0; t0 < n; t0 += kQ8Tile)
          for (std::int64_t r = 0; r < rows; ++r) portable_row(portable, r, t0, std::min(n, t0 + kQ8Tile));
        EXPECT_EQ(0, std::memcmp(host.data(), loop.data(), host.size() * sizeof(float)))
            << ggml_type_traits(type).name << ", blocks of " << block << ", " << rows << " x " << k << " of " << cols
            << ", " << n << " rows";
      }
  }
}

TEST(Q8, TheHostSumsAreThePortableSumsBitForBit) {
  // Blocks of 32: the host's vector sums (from unpacked runs; for one row of a legacy type
  // from the encoded bytes in registers; for batches in register tiles), every block
  // type, a short last run for the legacy ones.
  auto ex = make_host_executor();
  for (const GgmlTypeTraits& t : kGgmlTypes)
    if (q8_multipliable(Encoded{nullptr, t.type, {}}))
      expect_host_is_portable(*ex, t.type, t.block_elems == 256 ? 512 : 320, kQ8Block, matmul_q8_row<IntDotLoop>);
}

TEST(Q8, TheHostKQuantLanesAreThePortableLanesBitForBit) {
  // Blocks of 256: the host's eight-lane sums (for one row, from the encoded bytes) against
  // KDotLoop's.
  auto ex = make_host_executor();
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    expect_host_is_portable(*ex, type, 768, kQ8KBlock, matmul_q8k_row<KDotLoop>);
}

// One activation row of `type` in blocks of `block` against arbitrary bytes (finite, then any),
// 37 rows (not whole tasks of 16), k = each of ks: matmul_q8_decode takes it exactly where the
// CPU has AVX-512 VNNI, and the executor's floats are portable_row's.
void expect_decode_is_portable(Executor& ex, GgmlType type, std::int64_t cols, std::vector<std::int64_t> ks, int block,
                               RowBody portable_row) {
  const std::int64_t rows = 37;
  Quantized xq = quantize_rows(ex, test_values(std::size_t(cols), 95, 2.0f), 1, cols, block);
  for (const bool finite : {true, false})
    for (const std::int64_t k : ks) {
      const std::vector<std::uint8_t> bytes = arbitrary_bytes(ggml_type_traits(type), rows * cols, finite);
      std::vector<float> host(std::size_t(rows), -7.0f), portable(std::size_t(rows), -7.0f);
      const MatmulQ8Args a{Encoded{bytes.data(), type, {}}, cols, rows, k, xq.rows(), 1, host.data(), rows};
      EXPECT_EQ(matmul_q8_decode(a), q8_tiles_supported()) << ggml_type_traits(type).name;
      ex.matmul_q8(a);
      MatmulQ8Args loop = a;
      loop.y = portable.data();
      for (std::int64_t r = 0; r < rows; ++r) portable_row(loop, r, 0, 1);
      EXPECT_TRUE(same_floats(host, portable))
          << ggml_type_traits(type).name << (finite ? ", finite" : ", any bytes") << ", k " << k;
    }
}

TEST(Q8, DecodeOfKQuantsIsThePortableRowForAnyBytes) {
  // matmul_q8k_row's floats for any bytes: every integer and 6-bit scale a block can hold,
  // Q6_K's negative scales, subnormal, huge and (not finite) NaN and infinite d and dmin; every
  // column or the first 512 of 768.
  auto ex = make_host_executor();
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    expect_decode_is_portable(*ex, type, 768, {768, 512}, kQ8KBlock, matmul_q8k_row<KDotLoop>);
  // Not one row, or not blocks of 256: the caller's.
  const std::int64_t rows = 37, cols = 768;
  const std::vector<std::uint8_t> q4_k = quantize(GgmlType::Q4_K, test_values(std::size_t(rows * cols), 96, 0.3f));
  Quantized two = quantize_rows(*ex, test_values(std::size_t(2 * cols), 97), 2, cols, kQ8KBlock);
  Quantized small = quantize_rows(*ex, test_values(std::size_t(cols), 98), 1, cols, kQ8Block);
  std::vector<float> y(std::size_t(2 * rows));
  EXPECT_FALSE(matmul_q8_decode(MatmulQ8Args{Encoded{q4_k.data(), GgmlType::Q4_K, {}}, cols, rows, cols, two.rows(), 2, y.data(), rows}));
  EXPECT_FALSE(matmul_q8_decode(MatmulQ8Args{Encoded{q4_k.data(), GgmlType::Q4_K, {}}, cols, rows, cols, small.rows(), 1, y.data(), rows}));
}

TEST(Q8, DecodeOfLegacyTypesIsThePortableRowForAnyBytes) {
  // matmul_q8_row's floats for any bytes of Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: every nibble, fifth
  // bit and Q8_0 integer (-128 included); subnormal, huge, NaN and infinite d and m; 10 blocks (a
  // short last run of two) or 9 (a run of one: a pair without its second block), the 9 also as a
  // whole row, whose weights and activations end where the run does (the sanitizer suite sees a
  // read past them).
  auto ex = make_host_executor();
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0}) {
    expect_decode_is_portable(*ex, type, 320, {320, 288}, kQ8Block, matmul_q8_row<IntDotLoop>);
    expect_decode_is_portable(*ex, type, 288, {288}, kQ8Block, matmul_q8_row<IntDotLoop>);
  }
  // A decoder quirk (a fault) is matmul_q8_row's to decode.
  const std::int64_t rows = 37, cols = 320;
  Quantized xq = quantize_rows(*ex, test_values(std::size_t(cols), 99, 2.0f), 1, cols, kQ8Block);
  const std::vector<std::uint8_t> q8 = quantize(GgmlType::Q8_0, test_values(std::size_t(rows * cols), 100, 0.3f));
  DequantQuirks quirk;
  quirk.q8_scale_as_bf16 = true;
  std::vector<float> y(static_cast<std::size_t>(rows));
  EXPECT_FALSE(matmul_q8_decode(MatmulQ8Args{Encoded{q8.data(), GgmlType::Q8_0, quirk}, cols, rows, cols, xq.rows(), 1, y.data(), rows}));
}

TEST(Q8, BatchesAreThePortableRowsForAnyBytes) {
  // A batch reads the bytes its own way (the tiles: fp16 scales of four rows widened at once,
  // 6-bit scales and mins, Q6_K's signed scales, Q5 fifth bits), and still gives the body's
  // floats for any bytes: every integer and scale a block can hold, subnormal, huge, NaN and
  // infinite d and dmin. 10 weight rows, 6 activation rows.
  auto ex = make_host_executor();
  const std::int64_t rows = 10, n = 6;
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const bool k_quant = q8k_multipliable(Encoded{nullptr, type, {}});
    const std::int64_t cols = k_quant ? 768 : 320;
    const int block = k_quant ? kQ8KBlock : kQ8Block;
    const RowBody portable_row = k_quant ? matmul_q8k_row<KDotLoop> : matmul_q8_row<IntDotLoop>;
    Quantized xq = quantize_rows(*ex, test_values(std::size_t(n * cols), 101, 2.0f), n, cols, block);
    for (const bool finite : {true, false}) {
      const std::vector<std::uint8_t> bytes = arbitrary_bytes(ggml_type_traits(type), rows * cols, finite);
      std::vector<float> host(std::size_t(n * rows)), portable(std::size_t(n * rows));
      const MatmulQ8Args a{Encoded{bytes.data(), type, {}}, cols, rows, cols, xq.rows(), n, host.data(), rows};
      ex->matmul_q8(a);
      MatmulQ8Args loop = a;
      loop.y = portable.data();
      for (std::int64_t r = 0; r < rows; ++r) portable_row(loop, r, 0, n);
      EXPECT_TRUE(same_floats(host, portable)) << ggml_type_traits(type).name << (finite ? ", finite" : ", any bytes");
    }
  }
}

TEST(Q8, BatchesTakeTheTilesWhereTheCpuHasVnni) {
  // Where the CPU lacks AVX-512 VNNI, nothing takes the tiles (batches take matmul_q8_row).
  const bool vnni = q8_tiles_supported();
  auto ex = make_host_executor();
  const std::int64_t rows = 8, cols = 512;
  for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    for (const int block : {kQ8Block, kQ8KBlock}) {
      if (block == kQ8KBlock && !q8k_multipliable(Encoded{nullptr, type, {}})) continue;
      const std::vector<std::uint8_t> bytes = quantize(type, test_values(std::size_t(rows * cols), 93, 0.3f));
      for (const std::int64_t n : {std::int64_t{1}, std::int64_t{3}}) {
        Quantized xq = quantize_rows(*ex, test_values(std::size_t(n * cols), 94), n, cols, block);
        std::vector<float> y(std::size_t(n * rows));
        const bool tiled =
            matmul_q8_tiles(MatmulQ8Args{Encoded{bytes.data(), type, {}}, cols, rows, cols, xq.rows(), n, y.data(), rows});
        // Q6_K in blocks of 32 has a multiplier per 16 the tiles' block lanes do not take.
        EXPECT_EQ(tiled, vnni && n > 1 && !(type == GgmlType::Q6_K && block == kQ8Block))
            << ggml_type_traits(type).name << ", blocks of " << block << ", " << n << " rows";
      }
    }
}

TEST(Q8, BlocksOf256AreRefusedWhereTheyDoNotApply) {
  auto ex = make_host_executor();
  const std::int64_t rows = 4, cols = 512;
  const std::vector<float> x = test_values(std::size_t(cols), 85);
  Quantized xq = quantize_rows(*ex, x, 1, cols, kQ8KBlock);
  std::vector<float> y(static_cast<std::size_t>(rows));
  const std::vector<std::uint8_t> q8_0 = quantize(GgmlType::Q8_0, test_values(std::size_t(rows * cols), 86, 0.3f));
  EXPECT_THROW(ex->matmul_q8(MatmulQ8Args{Encoded{q8_0.data(), GgmlType::Q8_0, {}}, cols, rows, cols, xq.rows(), 1,
                                          y.data(), rows}),
               std::invalid_argument);
  const std::vector<std::uint8_t> q4_k = quantize(GgmlType::Q4_K, test_values(std::size_t(rows * cols), 87, 0.3f));
  EXPECT_THROW(ex->matmul_q8(MatmulQ8Args{Encoded{q4_k.data(), GgmlType::Q4_K, {}}, cols, rows, 288, xq.rows(), 1,
                                          y.data(), rows}),
               std::invalid_argument);  // 288 columns: not whole blocks of 256
  EXPECT_THROW(ex->quantize_q8(QuantizeQ8Args{x.data(), 288, 1, 288, xq.rows()}), std::invalid_argument);
}

TEST(Q8, NonFiniteActivationsGiveNonFiniteProducts) {
  auto ex = make_host_executor();
  const std::int64_t rows = 4, cols = 256;
  for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const std::vector<std::uint8_t> bytes = quantize(type, test_values(std::size_t(rows * cols), 91, 0.3f));
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = test_values(std::size_t(cols), 92);
      x[37] = bad;
      Quantized xq = quantize_rows(*ex, x, 1, cols, q8_activation_block(Encoded{nullptr, type, {}}, cols));
      std::vector<float> y(static_cast<std::size_t>(rows));
      ex->matmul_q8(MatmulQ8Args{Encoded{bytes.data(), type, {}}, cols, rows, cols, xq.rows(), 1, y.data(), rows});
      for (float v : y) EXPECT_FALSE(std::isfinite(v)) << ggml_type_traits(type).name << ", " << bad;
    }
  }
}

TEST(Q8, ScaleQuirkDecodesAsDequantizeDoes) {
  // dequant-q8-scale in q8 precision: the products of what dequantize decodes under the quirk.
  auto ex = make_host_executor();
  const std::int64_t rows = 4, cols = 64;
  const std::vector<std::uint8_t> bytes = quantize(GgmlType::Q8_0, test_values(std::size_t(rows * cols), 51, 0.5f));
  Quantized xq = quantize_rows(*ex, test_values(std::size_t(cols), 52), 1, cols);
  DequantQuirks quirks;
  quirks.q8_scale_as_bf16 = true;
  std::vector<float> w(std::size_t(rows * cols)), y(static_cast<std::size_t>(rows));
  DequantArgs decode{bytes.data(), GgmlType::Q8_0, w.data(), rows * cols};
  decode.quirks = quirks;
  ex->dequantize(decode);
  ex->matmul_q8(MatmulQ8Args{Encoded{bytes.data(), GgmlType::Q8_0, quirks}, cols, rows, cols, xq.rows(), 1, y.data(), rows});
  std::vector<double> want(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      want[std::size_t(r)] += double(w[std::size_t(r * cols + c)]) * xq.d[std::size_t(c / kQ8Block)] * xq.q[std::size_t(c)];
  EXPECT_TRUE(all_close(y, want, 1e-6, 1e-5));
  const auto correct = oracle(GgmlType::Q8_0, bytes, rows, cols, cols, xq, 1);
  EXPECT_GT(std::abs(correct[0] - double(y[0])), 1e-3);
  // Quants read as unsigned do not fit 8 bits: the kernel refuses them (forward.cpp decodes).
  quirks.q8_quant_unsigned = true;
  EXPECT_THROW(ex->matmul_q8(MatmulQ8Args{Encoded{bytes.data(), GgmlType::Q8_0, quirks}, cols, rows, cols, xq.rows(), 1,
                                          y.data(), rows}),
               std::invalid_argument);
}

}  // namespace
}  // namespace tapdiff::engine
