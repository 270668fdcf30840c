// Per-op tests of the host executor against direct formulas (double precision), one small
// table of shapes per op; dequantization bit for bit against model/'s decoder (the test's
// oracle; the engine itself never uses model/'s).
#include <cmath>
#include <cstddef>
#include <cstring>
#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/executor.hpp"
#include "engine/kernels/dequant_avx512.hpp"
#include "engine/kernels/element.hpp"
#include "engine/kernels/matvec_avx512.hpp"
#include "kernel_test_util.hpp"
#include "model/dequantize.hpp"
#include "model/half.hpp"
#include "model/quant_blocks.hpp"
#include "model/quantize.hpp"

namespace tapdiff::engine {
namespace {

using test::all_close;
using test::arbitrary_bytes;
using test::same_floats;
using test::test_values;

class HostOps : public ::testing::Test {
protected:
  std::unique_ptr<Executor> ex = make_host_executor();
};

// ---- dequantization --------------------------------------------------------------------

TEST_F(HostOps, DequantizeEveryTypeBitForBitWithModel) {
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const std::int64_t n = 2 * 256;
    const std::vector<float> values = test_values(std::size_t(n), 11, 0.05f);
    const std::vector<std::uint8_t> bytes = quantize(t.type, values);
    std::vector<float> expected(static_cast<std::size_t>(n)),
        actual(static_cast<std::size_t>(n), -1.0f);
    dequantize_row(t.type, bytes.data(), expected.data(), n);
    ex->dequantize(DequantArgs{bytes.data(), t.type, actual.data(), n});
    EXPECT_EQ(0, std::memcmp(actual.data(), expected.data(), expected.size() * sizeof(float)))
        << t.name;
  }
}

// The CUDA executor's matvec decodes a sub-block of 32 per lane: the same values decode_run
// gives for them, every type, every sub-block of a superblock, the fault's quirks included.
TEST_F(HostOps, SubBlocksDecodeAsRunsDo) {
  const std::int64_t n = 2 * 256;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const std::vector<std::uint8_t> bytes = quantize(t.type, test_values(std::size_t(n), 13, 0.7f));
    for (const bool quirk : {false, true}) {
      if (quirk && t.type != GgmlType::Q8_0) continue;
      DequantQuirks quirks;
      quirks.q8_scale_as_bf16 = quirk;
      const Encoded w{bytes.data(), t.type, quirks};
      std::vector<float> runs(static_cast<std::size_t>(n)), subs(static_cast<std::size_t>(n));
      for (std::int64_t first = 0; first < n; first += kDecodeRun) decode_run(w, first, kDecodeRun, runs.data() + first);
      for (std::int64_t first = 0; first < n; first += kSubBlock) decode_sub_block(w, first, subs.data() + first);
      EXPECT_EQ(0, std::memcmp(runs.data(), subs.data(), runs.size() * sizeof(float)))
          << t.name << (quirk ? " with the bf16 scale quirk" : "");
    }
  }
}

// The host's AVX-512 dequantizer: dequant_body's values (a NaN's bits aside) on every encoding,
// at every precision (values rounded to f16 or bf16), on quantized and arbitrary bytes, from an
// offset into the tensor, over ranges the launcher's tasks do not split at, and through the
// executor.
TEST_F(HostOps, DequantAvx512IsTheKernelBodyBitForBit) {
  const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
  EXPECT_EQ(cpu, dequant_avx512_applies(DequantArgs{}));
  DequantArgs rounded, stored16, quirky;
  rounded.round = ElemType::bf16;
  stored16.dst_type = ElemType::f16;
  quirky.quirks.q8_scale_as_bf16 = true;
  EXPECT_EQ(cpu, dequant_avx512_applies(rounded));
  EXPECT_FALSE(dequant_avx512_applies(stored16));
  EXPECT_FALSE(dequant_avx512_applies(quirky));
  if (!cpu) GTEST_SKIP() << "no AVX-512 F here: dequantization runs the kernel body's loops";
  const std::int64_t total = 24 * 256;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const std::vector<std::uint8_t> sets[3] = {quantize(t.type, test_values(std::size_t(total), 63, 0.1f)),
                                               arbitrary_bytes(t, total, false), arbitrary_bytes(t, total, true)};
    const char* names[3] = {"quantized", "arbitrary bytes", "arbitrary finite bytes"};
    // A plain type's n need not be a multiple of 32; a block type's is whole blocks.
    const std::int64_t first = 2 * 256, n = t.block_elems == 1 ? total - first - 7 : total - first - 256;
    for (int set = 0; set < 3; ++set) {
      for (const ElemType round : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
        const std::string what = std::string(t.name) + ", " + names[set] + ", " + std::string(elem_type_name(round));
        DequantArgs a{sets[set].data(), t.type, nullptr, n};
        a.first = first;
        a.round = round;
        ASSERT_TRUE(dequant_avx512_applies(a));
        std::vector<float> want(std::size_t(n), -7.0f), got(want.size(), -7.0f), split(want.size(), -7.0f),
            launched(want.size(), -7.0f);
        a.dst = want.data();
        for (std::int64_t u = 0; u < decode_runs(n); ++u) dequant_body(a, u);
        a.dst = got.data();
        dequant_avx512_range(a, 0, n);
        const std::int64_t cut = t.block_elems == 256 ? 768 : 96;
        a.dst = split.data();
        dequant_avx512_range(a, 0, cut);
        dequant_avx512_range(a, cut, 2 * cut);
        dequant_avx512_range(a, 2 * cut, n);
        a.dst = launched.data();
        ex->dequantize(a);
        EXPECT_TRUE(same_floats(got, want)) << what;
        EXPECT_TRUE(same_floats(split, want)) << what << ", split";
        EXPECT_TRUE(same_floats(launched, want)) << what << ", launched";
      }
    }
  }
}

TEST_F(HostOps, DequantizeHandBuiltBlocks) {
  // Q4_0: d = 2 (f16 0x4000); qs[j] = j | (15 - j) << 4 -> element j: 2 (j - 8), 16 + j: 2 (7 - j).
  std::uint8_t q4[18] = {0x00, 0x40};
  for (int j = 0; j < 16; ++j) q4[2 + j] = std::uint8_t(j | ((15 - j) << 4));
  std::vector<float> out(32);
  ex->dequantize(DequantArgs{q4, GgmlType::Q4_0, out.data(), 32});
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[std::size_t(j)], 2.0f * float(j - 8)) << j;
    EXPECT_EQ(out[std::size_t(16 + j)], 2.0f * float(7 - j)) << j;
  }
  // Q8_0: d = 0.5 (f16 0x3800), q = j - 16.
  std::uint8_t q8[34] = {0x00, 0x38};
  for (int j = 0; j < 32; ++j) q8[2 + j] = std::uint8_t(std::int8_t(j - 16));
  ex->dequantize(DequantArgs{q8, GgmlType::Q8_0, out.data(), 32});
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[std::size_t(j)], 0.5f * float(j - 16)) << j;
  // Fault dequant-q8-scale: the same scale bits read as bf16: 0x3800 -> 2^-15.
  DequantArgs faulty{q8, GgmlType::Q8_0, out.data(), 32};
  faulty.quirks.q8_scale_as_bf16 = true;
  ex->dequantize(faulty);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(out[std::size_t(j)], std::ldexp(1.0f, -15) * float(j - 16)) << j;
}

TEST_F(HostOps, DequantizeRejectsPartialBlocks) {
  std::vector<std::uint8_t> bytes(34);
  std::vector<float> out(16);
  EXPECT_THROW(ex->dequantize(DequantArgs{bytes.data(), GgmlType::Q8_0, out.data(), 16}),
               std::invalid_argument);
}

// ---- elementwise ops ---------------------------------------------------------------------

TEST_F(HostOps, ConvertAndRoundToEveryType) {
  const std::vector<float> x = test_values(257, 3, 70000.0f);
  for (ElemType t : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
    std::vector<std::uint8_t> packed(x.size() * elem_size(t));
    std::vector<float> back(x.size()), rounded = x;
    ex->convert(ConvertArgs{x.data(), ElemType::f32, packed.data(), t, std::int64_t(x.size())});
    ex->convert(ConvertArgs{packed.data(), t, back.data(), ElemType::f32, std::int64_t(x.size())});
    ex->round(RoundArgs{rounded.data(), std::int64_t(x.size()), t});
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = t == ElemType::f16    ? fp16_to_fp32(fp32_to_fp16(x[i]))
                         : t == ElemType::bf16 ? bf16_to_fp32(fp32_to_bf16(x[i]))
                                               : x[i];
      ASSERT_EQ(f32_bits(back[i]), f32_bits(want)) << elem_type_name(t) << " [" << i << "]";
      ASSERT_EQ(f32_bits(rounded[i]), f32_bits(want)) << elem_type_name(t) << " [" << i << "]";
    }
  }
}

TEST_F(HostOps, DequantizeIntoRoundedSixteenBitSlices) {
  // Rows 1..2 of a 4-row Q4_K matrix, rounded to f16 and stored as f16 (a scratch slice of the
  // CUDA executor's batched GEMM): model/'s values of those rows, rounded.
  const std::int64_t cols = 256;
  const std::vector<float> values = test_values(std::size_t(4 * cols), 21, 0.3f);
  const std::vector<std::uint8_t> bytes = quantize(GgmlType::Q4_K, values);
  std::vector<float> decoded(values.size());
  dequantize_row(GgmlType::Q4_K, bytes.data(), decoded.data(), std::int64_t(values.size()));
  std::vector<std::uint16_t> out(std::size_t(2 * cols));
  DequantArgs a{bytes.data(), GgmlType::Q4_K, out.data(), 2 * cols};
  a.dst_type = ElemType::f16;
  a.round = ElemType::f16;
  a.first = cols;
  ex->dequantize(a);
  for (std::int64_t i = 0; i < 2 * cols; ++i)
    ASSERT_EQ(out[std::size_t(i)], fp32_to_fp16(decoded[std::size_t(cols + i)])) << i;
  a.first = 100;  // not a block boundary
  EXPECT_THROW(ex->dequantize(a), std::invalid_argument);
}

TEST_F(HostOps, EmbedGathersRowsFromEncodedTables) {
  struct Case {
    GgmlType type;
    ElemType round;
    std::int64_t vocab, embd;
    std::vector<std::int32_t> tokens;
  };
  const Case cases[] = {{GgmlType::F32, ElemType::f32, 7, 5, {3, 0, 6, 3}},
                        {GgmlType::F32, ElemType::bf16, 7, 5, {1}},
                        {GgmlType::F16, ElemType::f32, 9, 8, {8, 1}},
                        {GgmlType::BF16, ElemType::f32, 4, 3, {2}},
                        {GgmlType::Q8_0, ElemType::f32, 5, 320, {4, 0, 4}},
                        {GgmlType::Q4_K, ElemType::f16, 3, 512, {2, 1}}};
  for (const Case& c : cases) {
    const std::vector<float> table = test_values(std::size_t(c.vocab * c.embd), 5);
    const std::vector<std::uint8_t> bytes = quantize(c.type, table);
    std::vector<float> decoded(table.size());
    dequantize_row(c.type, bytes.data(), decoded.data(), std::int64_t(table.size()));
    std::vector<float> out(c.tokens.size() * std::size_t(c.embd));
    ex->embed(EmbedArgs{Encoded{bytes.data(), c.type, {}}, c.tokens.data(), out.data(),
                        std::int64_t(c.tokens.size()), c.embd, c.vocab, c.round});
    std::vector<double> want;
    for (std::int32_t t : c.tokens)
      for (std::int64_t i = 0; i < c.embd; ++i)
        want.push_back(round_to(c.round, decoded[std::size_t(t * c.embd + i)]));
    EXPECT_TRUE(all_close(out, want, 0, 0)) << ggml_type_traits(c.type).name;
  }
}

// ---- decode GEMV on encoded weights --------------------------------------------------------

// y = W x in double over model/'s decoding of W (rows x cols), the first k columns, each weight
// rounded to `round`.
std::vector<double> matvec_oracle(GgmlType type, const std::vector<std::uint8_t>& bytes, std::int64_t rows,
                                  std::int64_t cols, std::int64_t k, const std::vector<float>& x,
                                  ElemType round) {
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  dequantize_row(type, bytes.data(), w.data(), rows * cols);
  std::vector<double> y(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < k; ++c)
      y[std::size_t(r)] += double(round_to(round, w[std::size_t(r * cols + c)])) * x[std::size_t(c)];
  return y;
}

TEST_F(HostOps, MatvecOnEveryEncodingMatchesItsDecodedWeights) {
  const std::int64_t rows = 37;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    // A row of whole 256-runs plus a partial run (legacy types), or of 3 k-blocks.
    const std::int64_t cols = t.block_elems == 256 ? 768 : 608;
    const std::vector<float> values = test_values(std::size_t(rows * cols), 31, 0.1f);
    const std::vector<float> x = test_values(std::size_t(cols), 32, 2.0f);
    const std::vector<std::uint8_t> bytes = quantize(t.type, values);
    for (ElemType round : {ElemType::f32, ElemType::bf16}) {
      std::vector<float> y(static_cast<std::size_t>(rows), -7.0f);
      ex->matvec(MatvecArgs{Encoded{bytes.data(), t.type, {}}, cols, rows, cols, x.data(), y.data(), round});
      EXPECT_TRUE(all_close(y, matvec_oracle(t.type, bytes, rows, cols, cols, x, round), 1e-5, 1e-5))
          << t.name << " rounded to " << elem_type_name(round);
    }
  }
}

// Where the CPU has AVX-512 a decode step's products decode into registers
// (kernels/matvec_avx512_host.cpp): the kernel body's results bit for bit, for quantized
// weights and for arbitrary bytes (subnormal, NaN and infinite values and scales), every
// encoding, every precision (weights rounded to f16 or bf16 first), with k ending inside a
// sub-block (the tail), rows that leave a short last task and row ranges off the kernel's
// groups of four.
TEST_F(HostOps, MatvecAvx512IsTheKernelBodyBitForBit) {
  // Taken exactly where the CPU supports it, at every precision; never for a decoder quirk,
  // which keeps the kernel body's decoders.
  const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
  EXPECT_EQ(cpu, matvec_avx512_applies(MatvecArgs{}));
  MatvecArgs rounded;
  rounded.round = ElemType::bf16;
  EXPECT_EQ(cpu, matvec_avx512_applies(rounded));
  MatvecArgs quirky;
  quirky.w.quirks.q8_quant_unsigned = true;
  EXPECT_FALSE(matvec_avx512_applies(quirky));
  if (!cpu) GTEST_SKIP() << "no AVX-512 F here: matvec runs the kernel body's loops";
  const std::int64_t rows = 37;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const std::int64_t cols = t.block_elems == 256 ? 768 : 608;
    const std::vector<float> x = test_values(std::size_t(cols), 62, 2.0f);
    const std::vector<std::uint8_t> sets[3] = {quantize(t.type, test_values(std::size_t(rows * cols), 61, 0.1f)),
                                               arbitrary_bytes(t, rows * cols, false), arbitrary_bytes(t, rows * cols, true)};
    const char* names[3] = {"quantized", "arbitrary bytes", "arbitrary finite bytes"};
    for (int set = 0; set < 3; ++set) {
      for (const std::int64_t k : {cols, std::int64_t(300), std::int64_t(37), std::int64_t(0)}) {
        for (const ElemType round : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
          const std::string what = std::string(t.name) + ", k " + std::to_string(k) + ", " + names[set] + ", " +
                                   std::string(elem_type_name(round));
          MatvecArgs a{Encoded{sets[set].data(), t.type, {}}, cols, rows, k, x.data(), nullptr, round};
          ASSERT_TRUE(matvec_avx512_applies(a));
          std::vector<float> want(static_cast<std::size_t>(rows)), got(want.size(), -7.0f), launched(want.size(), -7.0f);
          a.y = want.data();
          for (std::int64_t r = 0; r < rows; ++r) matvec_row(a, r);
          a.y = got.data();
          matvec_avx512_rows(a, 0, rows);
          // Rows go four at a time: ranges that start and end off that grid give the same rows.
          std::vector<float> split(want.size(), -7.0f);
          a.y = split.data();
          matvec_avx512_rows(a, 0, 5);
          matvec_avx512_rows(a, 5, 7);
          matvec_avx512_rows(a, 7, rows);
          EXPECT_TRUE(same_floats(split, want)) << what << ", split rows";
          a.y = launched.data();
          ex->matvec(a);
          EXPECT_TRUE(same_floats(got, want)) << what;
          EXPECT_TRUE(same_floats(launched, want)) << what;
          if (set == 2) {
            EXPECT_FALSE(std::isnan(want[0])) << what << ": a finite row";
          }
        }
      }
    }
  }
}

TEST_F(HostOps, MatvecSumsTheFirstKColumnsOfFewerRows) {
  // The raced split-K and the narrowed FFN of the fault catalogue: k inside a block, rows < W's.
  const std::int64_t rows = 8, cols = 512, k = 300;
  const std::vector<float> values = test_values(std::size_t(rows * cols), 41, 0.1f);
  const std::vector<float> x = test_values(std::size_t(cols), 42);
  const std::vector<std::uint8_t> bytes = quantize(GgmlType::Q5_K, values);
  std::vector<float> y(5);
  ex->matvec(MatvecArgs{Encoded{bytes.data(), GgmlType::Q5_K, {}}, cols, 5, k, x.data(), y.data()});
  std::vector<double> want = matvec_oracle(GgmlType::Q5_K, bytes, rows, cols, k, x, ElemType::f32);
  want.resize(5);
  EXPECT_TRUE(all_close(y, want, 1e-5, 1e-5));
  EXPECT_THROW(ex->matvec(MatvecArgs{Encoded{bytes.data(), GgmlType::Q5_K, {}}, 100, 5, 100, x.data(), y.data()}),
               std::invalid_argument);
  EXPECT_THROW(ex->matvec(MatvecArgs{Encoded{bytes.data(), GgmlType::Q5_K, {}}, cols, 5, cols + 1, x.data(), y.data()}),
               std::invalid_argument);
}

TEST_F(HostOps, MatvecDecodesWithTheFaultsQuirks) {
  // A Q8_0 matrix read with the dequant-q8-scale quirk: the matvec of what dequantize decodes
  // under the same quirk, not of the correct values.
  const std::int64_t rows = 4, cols = 64;
  const std::vector<float> values = test_values(std::size_t(rows * cols), 51, 0.5f);
  const std::vector<float> x = test_values(std::size_t(cols), 52);
  const std::vector<std::uint8_t> bytes = quantize(GgmlType::Q8_0, values);
  DequantQuirks quirks;
  quirks.q8_scale_as_bf16 = true;
  std::vector<float> w(static_cast<std::size_t>(rows * cols)), y(static_cast<std::size_t>(rows));
  DequantArgs decode{bytes.data(), GgmlType::Q8_0, w.data(), rows * cols};
  decode.quirks = quirks;
  ex->dequantize(decode);
  ex->matvec(MatvecArgs{Encoded{bytes.data(), GgmlType::Q8_0, quirks}, cols, rows, cols, x.data(), y.data()});
  std::vector<double> want(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) want[std::size_t(r)] += double(w[std::size_t(r * cols + c)]) * x[std::size_t(c)];
  EXPECT_TRUE(all_close(y, want, 1e-6, 1e-5));
  const auto correct = matvec_oracle(GgmlType::Q8_0, bytes, rows, cols, cols, x, ElemType::f32);
  EXPECT_GT(std::abs(correct[0] - double(y[0])), 1e-3);
}

TEST_F(HostOps, BiasAddSiluMul) {
  for (std::int64_t n : {1, 7, 64}) {
    const std::int64_t rows = 3;
    const std::vector<float> x0 = test_values(std::size_t(rows * n), 1, 4.0f),
                             b = test_values(std::size_t(n), 2);
    std::vector<float> x = x0;
    ex->add_bias(BiasArgs{x.data(), b.data(), rows, n});
    std::vector<double> want(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = double(x0[i] + b[i % std::size_t(n)]);
    EXPECT_TRUE(all_close(x, want, 0, 0)) << "bias n " << n;

    const std::vector<float> y = test_values(x.size(), 3);
    std::vector<float> sum = x0;
    ex->add(AddArgs{sum.data(), y.data(), std::int64_t(sum.size())});
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = double(x0[i] + y[i]);
    EXPECT_TRUE(all_close(sum, want, 0, 0)) << "add n " << n;

    std::vector<float> act(x.size());
    ex->silu_mul(SiluMulArgs{x0.data(), y.data(), act.data(), std::int64_t(act.size())});
    for (std::size_t i = 0; i < x.size(); ++i)
      want[i] = x0[i] / (1.0 + std::exp(-double(x0[i]))) * y[i];
    EXPECT_TRUE(all_close(act, want, 1e-7, 1e-6)) << "silu_mul n " << n;
  }
}

// ---- row ops -----------------------------------------------------------------------------

TEST_F(HostOps, RmsNorm) {
  struct Case {
    std::int64_t rows, n;
    bool weighted;
    float eps;
  };
  const Case cases[] = {{1, 64, true, 1e-5f}, {5, 576, true, 1e-6f}, {2, 3, false, 1e-5f}};
  for (const Case& c : cases) {
    const std::vector<float> x = test_values(std::size_t(c.rows * c.n), 7, 3.0f);
    const std::vector<float> w = test_values(std::size_t(c.n), 8);
    std::vector<float> out(x.size());
    ex->rmsnorm(
        RmsNormArgs{x.data(), c.weighted ? w.data() : nullptr, out.data(), c.rows, c.n, c.eps});
    std::vector<double> want(x.size());
    for (std::int64_t r = 0; r < c.rows; ++r) {
      double ss = 0;
      for (std::int64_t i = 0; i < c.n; ++i)
        ss += double(x[std::size_t(r * c.n + i)]) * x[std::size_t(r * c.n + i)];
      const double inv = 1.0 / std::sqrt(ss / double(c.n) + double(c.eps));
      for (std::int64_t i = 0; i < c.n; ++i)
        want[std::size_t(r * c.n + i)] =
            x[std::size_t(r * c.n + i)] * inv * (c.weighted ? w[std::size_t(i)] : 1.0);
    }
    EXPECT_TRUE(all_close(out, want, 1e-6, 1e-5)) << "rows " << c.rows << " n " << c.n;
  }
}

TEST_F(HostOps, RopeBothPairingsPerRowPositions) {
  struct Case {
    RopePairing pairing;
    int heads, head_dim, n_rot;
    float base;
    std::vector<std::int32_t> positions;
  };
  const Case cases[] = {{RopePairing::norm, 2, 8, 8, 10000.0f, {0, 1, 7}},
                        {RopePairing::neox, 3, 8, 8, 1e6f, {5, 100}},
                        {RopePairing::neox, 1, 16, 8, 10000.0f, {3}},  // partial rotation
                        {RopePairing::norm, 2, 6, 4, 500000.0f, {2, 2, 9}}};
  for (const Case& c : cases) {
    const auto rows = std::int64_t(c.positions.size());
    const std::vector<float> x0 = test_values(std::size_t(rows * c.heads * c.head_dim), 9);
    std::vector<float> x = x0;
    ex->rope(RopeArgs{x.data(), c.positions.data(), rows, c.heads, c.head_dim, c.n_rot, c.base,
                      c.pairing});
    std::vector<double> want(x0.begin(), x0.end());
    for (std::int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < c.heads; ++h)
        for (int i = 0; i < c.n_rot / 2; ++i) {
          const double theta =
              c.positions[std::size_t(r)] * std::pow(double(c.base), -2.0 * i / c.n_rot);
          const std::size_t base = std::size_t((r * c.heads + h) * c.head_dim);
          const std::size_t a = base + std::size_t(c.pairing == RopePairing::norm ? 2 * i : i);
          const std::size_t b =
              base + std::size_t(c.pairing == RopePairing::norm ? 2 * i + 1 : i + c.n_rot / 2);
          want[a] = x0[a] * std::cos(theta) - x0[b] * std::sin(theta);
          want[b] = x0[a] * std::sin(theta) + x0[b] * std::cos(theta);
        }
    EXPECT_TRUE(all_close(x, want, 1e-6, 1e-6))
        << rope_pairing_name(c.pairing) << " heads " << c.heads;
  }
  std::vector<float> x(8);
  const std::int32_t p = 0;
  EXPECT_THROW(ex->rope(RopeArgs{x.data(), &p, 1, 1, 8, 3, 1e4f, RopePairing::norm}),
               std::invalid_argument);
}

// Scaled RoPE at position 1, head_dim = n_rot = 8, base 10000 (θ_i = 1, 0.1, 0.01, 0.001), x = (1, 0) in
// every adjacent pair, so each pair becomes m (cos θ'_i, sin θ'_i). Linear by 4: θ'_i = θ_i / 4, m = 1.
// YaRN by 4 over an original context of 64: pair i turns n_ctx_orig / (2π base^(2i/8)) times in it;
// the correction dims are floor(-0.50) -> 0 (beta_fast 32) and ceil(1.01) = 2 (beta_slow 1), so the
// pairs keep 1, 1/2, 0, 0 of the unscaled angle: θ' = 1, 0.0625, 0.0025, 0.00025, and
// m = 1 + 0.1 ln 4.
TEST_F(HostOps, RopeLinearAndYarnScaling) {
  struct Case {
    RopeScaling scaling;
    std::vector<double> theta;
    double m;
  };
  RopeScaling linear, yarn;
  linear.type = RopeScalingType::linear;
  linear.factor = 4.0f;
  yarn.type = RopeScalingType::yarn;
  yarn.factor = 4.0f;
  yarn.n_ctx_orig = 64;
  const Case cases[] = {{linear, {0.25, 0.025, 0.0025, 0.00025}, 1.0},
                        {yarn, {1.0, 0.0625, 0.0025, 0.00025}, 1.0 + 0.1 * std::log(4.0)}};
  for (const Case& c : cases) {
    std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0};
    const std::int32_t p = 1;
    RopeArgs args{x.data(), &p, 1, 1, 8, 8, 10000.0f, RopePairing::norm};
    rope_scale(args, c.scaling);
    ex->rope(args);
    std::vector<double> want;
    for (double t : c.theta) {
      want.push_back(c.m * std::cos(t));
      want.push_back(c.m * std::sin(t));
    }
    EXPECT_TRUE(all_close(x, want, 1e-6, 1e-6)) << rope_scaling_name(c.scaling.type);
  }
}

TEST_F(HostOps, KvAppendWritesTypedRowsAtTheOffset) {
  for (ElemType t : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
    const std::int64_t capacity = 6, row = 4;
    std::vector<std::uint8_t> cache(std::size_t(capacity * row) * elem_size(t));
    const std::vector<float> src = test_values(std::size_t(2 * row), 4);
    ex->kv_append(KvAppendArgs{src.data(), cache.data(), t, 3 * row, 2, row, capacity});
    for (std::int64_t i = 0; i < capacity * row; ++i) {
      const bool written = i >= 3 * row && i < 5 * row;
      const float want = written ? round_to(t, src[std::size_t(i - 3 * row)]) : 0.0f;
      ASSERT_EQ(load_element(cache.data(), t, i), want) << elem_type_name(t) << " [" << i << "]";
    }
    EXPECT_THROW(
        ex->kv_append(KvAppendArgs{src.data(), cache.data(), t, 5 * row, 2, row, capacity}),
        std::invalid_argument);
  }
}

// Attention against the definition, in double: GQA both mappings, causal and not, a key limit
// below the capacity, a 16-bit cache.
TEST_F(HostOps, Attention) {
  struct Case {
    const char* what;
    int heads, kv_heads, dim;
    std::vector<std::int32_t> positions;
    std::int64_t n_keys, capacity;
    bool causal;
    KvHeadMap map;
    ElemType cache;
  };
  const Case cases[] = {
      {"prefill, grouped GQA",
       4,
       2,
       8,
       {0, 1, 2, 3},
       4,
       6,
       true,
       KvHeadMap::grouped,
       ElemType::f32},
      {"decode, all keys", 4, 2, 8, {4}, 5, 6, false, KvHeadMap::grouped, ElemType::f32},
      {"no mask", 2, 1, 4, {0, 1, 2}, 3, 3, false, KvHeadMap::grouped, ElemType::f32},
      {"modulo mapping", 6, 3, 4, {0, 1}, 2, 4, true, KvHeadMap::modulo, ElemType::f32},
      {"f16 cache", 4, 4, 16, {0, 1, 2}, 3, 5, true, KvHeadMap::grouped, ElemType::f16},
      {"bf16 cache", 2, 2, 8, {0, 1}, 2, 2, true, KvHeadMap::grouped, ElemType::bf16},
  };
  for (const Case& c : cases) {
    const auto rows = std::int64_t(c.positions.size());
    const std::int64_t kv_row = std::int64_t(c.kv_heads) * c.dim;
    const std::vector<float> q = test_values(std::size_t(rows * c.heads * c.dim), 21);
    const std::vector<float> k = test_values(std::size_t(c.capacity * kv_row), 22, 2.0f);
    const std::vector<float> v = test_values(std::size_t(c.capacity * kv_row), 23);
    std::vector<std::uint8_t> kc(k.size() * elem_size(c.cache)), vc(v.size() * elem_size(c.cache));
    ex->convert(ConvertArgs{k.data(), ElemType::f32, kc.data(), c.cache, std::int64_t(k.size())});
    ex->convert(ConvertArgs{v.data(), ElemType::f32, vc.data(), c.cache, std::int64_t(v.size())});
    std::vector<float> probs(std::size_t(rows * c.heads * c.capacity), -1.0f), out(q.size());
    AttentionArgs a;
    a.q = q.data();
    a.k_cache = kc.data();
    a.v_cache = vc.data();
    a.cache_type = c.cache;
    a.positions = c.positions.data();
    a.probs = probs.data();
    a.out = out.data();
    a.n_rows = rows;
    a.n_head = c.heads;
    a.n_head_kv = c.kv_heads;
    a.head_dim = c.dim;
    a.n_keys = c.n_keys;
    a.probs_stride = c.capacity;
    a.scale = 1.0f / std::sqrt(float(c.dim));
    a.causal = c.causal;
    a.kv_head_map = c.map;
    ex->attention(a);

    std::vector<double> want_p(probs.size(), 0.0), want_o(out.size(), 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < c.heads; ++h) {
        const int g = c.map == KvHeadMap::modulo ? h % c.kv_heads : h / (c.heads / c.kv_heads);
        const std::int64_t visible =
            c.causal ? std::min<std::int64_t>(c.n_keys, c.positions[std::size_t(r)] + 1) : c.n_keys;
        const std::size_t qi = std::size_t((r * c.heads + h) * c.dim);
        std::vector<double> s(static_cast<std::size_t>(visible));
        double max = -INFINITY, sum = 0;
        for (std::int64_t t = 0; t < visible; ++t) {
          double dot = 0;
          for (int d = 0; d < c.dim; ++d)
            dot += double(q[qi + std::size_t(d)]) *
                   round_to(c.cache, k[std::size_t(t * kv_row + g * c.dim + d)]);
          s[std::size_t(t)] = dot / std::sqrt(double(c.dim));
          max = std::max(max, s[std::size_t(t)]);
        }
        for (double& e : s) sum += (e = std::exp(e - max));
        for (std::int64_t t = 0; t < visible; ++t) {
          const double p = s[std::size_t(t)] / sum;
          want_p[std::size_t((r * c.heads + h) * c.capacity + t)] = p;
          for (int d = 0; d < c.dim; ++d)
            want_o[qi + std::size_t(d)] +=
                p * round_to(c.cache, v[std::size_t(t * kv_row + g * c.dim + d)]);
        }
      }
    EXPECT_TRUE(all_close(probs, want_p, 1e-6, 1e-5)) << c.what << ": probs";
    EXPECT_TRUE(all_close(out, want_o, 1e-6, 1e-5)) << c.what << ": out";
  }
}

// The host takes the scores eight or sixteen keys at a time (AVX2, AVX-512), widening a 16-bit
// cache's elements as it loads them: attention_row_head's floats bit for bit, for every cache
// type, head sizes with and without a tail of fewer than eight dims, key counts that end inside
// a group of eight, windows that start inside one, and the soft-cap.
TEST_F(HostOps, AttentionIsTheKernelBodyBitForBit) {
  struct Case {
    const char* what;
    int dim;
    std::int64_t window;
    float softcap;
    bool all_keys;
  };
  const Case cases[] = {{"head_dim 64", 64, 0, 0.0f, false},   {"head_dim 128, window 13", 128, 13, 0.0f, false},
                        {"head_dim 76", 76, 0, 0.0f, false},   {"head_dim 4", 4, 0, 0.0f, false},
                        {"soft-cap 30", 64, 0, 30.0f, false},  {"softmax over all keys", 36, 0, 0.0f, true}};
  const int heads = 6, kv_heads = 2;
  const std::vector<std::int32_t> positions = {0, 5, 7, 8, 9, 16, 30, 44};
  const std::int64_t n_keys = 45, capacity = 48, rows = std::int64_t(positions.size());
  // The cache as store_element writes it: every 13th element small enough to be an f16
  // subnormal, every 29th -0.0.
  const auto cache = [&](ElemType type, std::uint64_t seed, float scale) {
    std::vector<float> values = test_values(std::size_t(capacity * kv_heads * 128), seed, scale);
    for (std::size_t i = 0; i < values.size(); i += 13) values[i] *= 1e-6f;
    for (std::size_t i = 0; i < values.size(); i += 29) values[i] = -0.0f;
    std::vector<std::uint32_t> bytes(values.size());  // room for float32
    for (std::size_t i = 0; i < values.size(); ++i) store_element(bytes.data(), type, std::int64_t(i), values[i]);
    return bytes;
  };
  for (const ElemType type : {ElemType::f32, ElemType::f16, ElemType::bf16})
  for (const Case& c : cases) {
    const std::string what = std::string(c.what) + ", " + std::string(elem_type_name(type)) + " cache";
    const std::vector<float> q = test_values(std::size_t(rows * heads * c.dim), 71, 3.0f);
    const std::vector<std::uint32_t> k = cache(type, 72, 2.0f), v = cache(type, 73, 1.0f);
    AttentionArgs a;
    a.q = q.data();
    a.k_cache = k.data();
    a.v_cache = v.data();
    a.cache_type = type;
    a.positions = positions.data();
    a.n_rows = rows;
    a.n_head = heads;
    a.n_head_kv = kv_heads;
    a.head_dim = c.dim;
    a.n_keys = n_keys;
    a.probs_stride = capacity;
    a.scale = 1.0f / std::sqrt(float(c.dim));
    a.window = c.window;
    a.softcap = c.softcap;
    a.softmax_over_all_keys = c.all_keys;
    EXPECT_EQ(attention_host_in_eights(a), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) << what;
    std::vector<float> want_p(std::size_t(rows * heads * capacity), -1.0f), got_p(want_p), want_o(q.size()), got_o(q.size());
    a.probs = want_p.data();
    a.out = want_o.data();
    for (std::int64_t i = 0; i < rows * heads; ++i) attention_row_head(a, i);
    a.probs = got_p.data();
    a.out = got_o.data();
    ex->attention(a);
    EXPECT_TRUE(same_floats(got_p, want_p)) << what << ": probs";
    EXPECT_TRUE(same_floats(got_o, want_o)) << what << ": out";
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) float f16c_widen(std::uint16_t h) { return _cvtsh_ss(h); }

// attention_host widens an f16 cache with F16C: f16_bits_to_f32's float for every 16-bit
// pattern store_element can write, which is every one but the signaling NaNs.
TEST(HalfCache, F16cWidensEveryStoredHalfAsTheBodyDoes) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C here: attention widens with the body's loads";
  int compared = 0;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    if (nan && !(h & 0x200u)) continue;  // signaling: never stored
    const float want = f16_bits_to_f32(std::uint16_t(h)), got = f16c_widen(std::uint16_t(h));
    ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0) << "f16 bits 0x" << std::hex << h;
    ++compared;
  }
  EXPECT_EQ(compared, 0x10000 - 2 * 0x1ff);
  std::uint16_t stored = 0;
  store_element(&stored, ElemType::f16, 0, bits_f32(0x7f800001u));  // a signaling float32 NaN
  EXPECT_TRUE(stored & 0x200u) << "store_element writes quiet NaNs";
}
#endif

TEST_F(HostOps, ArgmaxTakesTheFirstOfTies) {
  const std::vector<float> x = {1, 5, 5, -2, /* row 2 */ -1, -1, -3, -1, /* row 3 */ 0, 0, 0, 9};
  std::vector<std::int32_t> out(3, -1);
  ex->argmax(ArgmaxArgs{x.data(), out.data(), 3, 4});
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 0, 3}));
}

// ---- a mixture of experts ------------------------------------------------------------------

// The softmax over every expert, the n_used largest kept (of equal logits the lower index, as the
// reference keeps them) and renormalized; the kept experts read back ascending with their weights.
TEST_F(HostOps, MoeRoutingKeepsTheLargestAndTheLowerIndexOfTies) {
  const std::vector<float> logits = {0.5f, 2, -1, 2, /* row 1 */ 3, 0, 0, 1};
  std::vector<float> routing(8), weights(4);
  std::vector<std::int32_t> experts(4, -1);
  ex->moe_route(MoeRouteArgs{logits.data(), routing.data(), 2, 4, 2});
  const double e1 = std::exp(2.0), e0 = std::exp(0.5), r1_0 = std::exp(3.0), r1_3 = std::exp(1.0);
  const std::vector<double> want = {0, 0.5, 0, 0.5, r1_0 / (r1_0 + r1_3), 0, 0, r1_3 / (r1_0 + r1_3)};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(routing[i], want[i], 1e-6) << i;
  ex->moe_select(MoeSelectArgs{routing.data(), experts.data(), weights.data(), 2, 4, 2});
  EXPECT_EQ(experts, (std::vector<std::int32_t>{1, 3, 0, 3}));
  EXPECT_NEAR(weights[2], want[4], 1e-6);
  // Fault moe-weights-unnormalized: the kept softmax probabilities as they are.
  MoeRouteArgs raw{logits.data(), routing.data(), 1, 4, 2};
  raw.renormalize = false;
  ex->moe_route(raw);
  EXPECT_NEAR(routing[1], e1 / (e0 + 2 * e1 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(routing[0], 0.0f);
}

// Rows gathered and scattered by index lists, and each token's expert rows summed with its weights.
TEST_F(HostOps, CopyRowsAndMoeCombine) {
  const std::vector<float> src = {1, 2, 10, 20, 100, 200};
  const std::vector<std::int32_t> from = {2, 0}, to = {1, 0};
  std::vector<float> gathered(4), scattered(4);
  ex->copy_rows(CopyRowsArgs{src.data(), from.data(), gathered.data(), nullptr, 2, 2});
  EXPECT_EQ(gathered, (std::vector<float>{100, 200, 1, 2}));
  ex->copy_rows(CopyRowsArgs{gathered.data(), nullptr, scattered.data(), to.data(), 2, 2});
  EXPECT_EQ(scattered, (std::vector<float>{1, 2, 100, 200}));
  const std::vector<float> weights = {0.25f, 0.75f, 1, 0};
  std::vector<float> out(2);
  ex->moe_combine(MoeCombineArgs{src.data(), weights.data(), out.data(), 2, 2, 1});  // rows 1, 2 and 10, 20
  EXPECT_EQ(out, (std::vector<float>{0.25f * 1 + 0.75f * 2, 10}));
}

// ---- GEMM --------------------------------------------------------------------------------

// C = op(A) op(B), column-major with leading dimensions larger than the rows, for every op
// combination, single columns (the matrix-vector path) and sizes split across threads: the
// cuBLAS contract, checked against its definition.
TEST_F(HostOps, GemmHasCublasColumnMajorSemantics) {
  struct Case {
    GemmOp op_a, op_b;
    int m, n, k, pad;
  };
  const Case cases[] = {{GemmOp::N, GemmOp::N, 5, 3, 4, 2},
                        {GemmOp::T, GemmOp::N, 6, 2, 7, 1},
                        {GemmOp::N, GemmOp::T, 3, 4, 5, 3},
                        {GemmOp::T, GemmOp::T, 4, 4, 2, 0},
                        {GemmOp::T, GemmOp::N, 64, 1, 96, 0},
                        {GemmOp::N, GemmOp::N, 40, 1, 33, 2},
                        {GemmOp::N, GemmOp::T, 17, 1, 9, 3},
                        // Large enough to run as row slices on several threads.
                        {GemmOp::T, GemmOp::N, 600, 3, 1000, 0},
                        {GemmOp::N, GemmOp::N, 1100, 1, 512, 5},
                        {GemmOp::T, GemmOp::T, 700, 1, 800, 1}};
  for (const Case& c : cases) {
    const int a_rows = c.op_a == GemmOp::N ? c.m : c.k, a_cols = c.op_a == GemmOp::N ? c.k : c.m;
    const int b_rows = c.op_b == GemmOp::N ? c.k : c.n, b_cols = c.op_b == GemmOp::N ? c.n : c.k;
    const int lda = a_rows + c.pad, ldb = b_rows + c.pad, ldc = c.m + c.pad;
    const std::vector<float> A = test_values(std::size_t(lda * a_cols), 31),
                             B = test_values(std::size_t(ldb * b_cols), 32);
    std::vector<float> C(std::size_t(ldc * c.n), 7.0f);
    ex->gemm(GemmArgs{c.op_a, c.op_b, c.m, c.n, c.k, 1.0f, A.data(), ElemType::f32, lda, B.data(),
                      ElemType::f32, ldb, 0.0f, C.data(), ldc});
    // Float32 summation of k products is within k·2^-24·Σ|a·b| of the exact value (the
    // classic worst-case bound); columns past m keep C's old value exactly.
    std::size_t bad = 0;
    for (int j = 0; j < c.n; ++j)
      for (int i = 0; i < ldc; ++i) {
        const float got = C[std::size_t(i + j * ldc)];
        if (i >= c.m) {
          bad += got != 7.0f;
          continue;
        }
        double acc = 0, magnitude = 0;
        for (int p = 0; p < c.k; ++p) {
          const float a =
              c.op_a == GemmOp::N ? A[std::size_t(i + p * lda)] : A[std::size_t(p + i * lda)];
          const float b =
              c.op_b == GemmOp::N ? B[std::size_t(p + j * ldb)] : B[std::size_t(j + p * ldb)];
          acc += double(a) * b;
          magnitude += std::abs(double(a) * b);
        }
        const double bound = c.k * std::ldexp(1.0, -24) * magnitude + 1e-30;
        if (std::abs(got - acc) > bound && bad++ < 3)
          ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", expected " << acc << " ± "
                        << bound;
      }
    EXPECT_EQ(bad, 0u) << "m " << c.m << " n " << c.n << " k " << c.k;
  }
}

// C = alpha op(A) op(B) + beta C: the matrix-vector paths (dot per element under T, sgemv under
// N) and the sgemm path scale the product and the old C alike.
TEST_F(HostOps, GemmAppliesAlphaAndBeta) {
  const float alpha = 0.5f, beta = -2.0f;
  for (const GemmOp op_a : {GemmOp::T, GemmOp::N}) {
    for (const int n : {1, 3}) {
      const int m = 37, k = 29;
      const std::vector<float> A = test_values(std::size_t(m * k), 41),
                               B = test_values(std::size_t(k * n), 42);
      const std::vector<float> C0 = test_values(std::size_t(m * n), 43);
      std::vector<float> C = C0;
      const int lda = op_a == GemmOp::N ? m : k;
      ex->gemm(GemmArgs{op_a, GemmOp::N, m, n, k, alpha, A.data(), ElemType::f32, lda, B.data(),
                        ElemType::f32, k, beta, C.data(), m});
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          double acc = 0, magnitude = 0;
          for (int p = 0; p < k; ++p) {
            const float a =
                op_a == GemmOp::N ? A[std::size_t(i + p * m)] : A[std::size_t(p + i * k)];
            const double ab = double(a) * B[std::size_t(p + j * k)];
            acc += ab;
            magnitude += std::abs(ab);
          }
          const double old = C0[std::size_t(i + j * m)];
          const double want = alpha * acc + beta * old;
          const double bound = (k + 2) * std::ldexp(1.0, -24) *
                               (std::abs(alpha) * magnitude + std::abs(beta * old));
          ASSERT_NEAR(C[std::size_t(i + j * m)], want, bound + 1e-30)
              << "op_a " << (op_a == GemmOp::N ? "N" : "T") << " n " << n << " C[" << i << ", " << j
              << "]";
        }
    }
  }
}

TEST_F(HostOps, GemmRejectsShortLeadingDimensions) {
  std::vector<float> buf(64);
  EXPECT_THROW(ex->gemm(GemmArgs{GemmOp::N, GemmOp::N, 4, 2, 3, 1.0f, buf.data(), ElemType::f32, 3,
                                 buf.data(), ElemType::f32, 3, 0.0f, buf.data(), 4}),
               std::invalid_argument);
  EXPECT_THROW(ex->gemm(GemmArgs{GemmOp::T, GemmOp::N, 4, 2, 3, 1.0f, buf.data(), ElemType::f16, 3,
                                 buf.data(), ElemType::f32, 3, 0.0f, buf.data(), 4}),
               std::invalid_argument);
}

}  // namespace
}  // namespace tapdiff::engine
