// The CUDA executor against the host executor. These tests run only where a CUDA device
// exists; elsewhere they skip with the reason (and never pretend to have run). Without a
// device, asking for the CUDA backend must be a NoDeviceError that says why.
#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <gtest/gtest.h>

#include "engine/executor.hpp"
#include "engine_test_util.hpp"
#include "fault_cases.hpp"
#include "kernel_test_util.hpp"
#include "model/quantize.hpp"
#include "tapdiff/tap_catalogue.hpp"

namespace tapdiff::engine {
namespace {

using namespace test;

class Cuda : public ::testing::Test {
protected:
  void SetUp() override {
    std::string reason;
    if (!cuda_device_available(&reason)) GTEST_SKIP() << "no CUDA device: " << reason;
  }
};

TEST(CudaAvailability, NoDeviceIsAClearError) {
  std::string reason;
  if (cuda_device_available(&reason)) GTEST_SKIP() << "a CUDA device exists here";
  EXPECT_FALSE(reason.empty());
  EngineOptions o;
  o.backend = Backend::cuda;
  o.n_predict = 2;
  try {
    generate(fixture_file(llama_spec()), {1, 2}, o, nullptr);
    ADD_FAILURE() << "the CUDA backend ran without a device";
  } catch (const NoDeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

// f32: the same 32 greedy tokens as the host executor, llama, qwen2 with YaRN, phi3 with LongRoPE and a
// mixture of experts.
TEST_F(Cuda, TokensEqualHost) {
  for (const FixtureSpec& spec : {llama_spec(GgmlType::Q8_0),
                                  wide(rope_scaled(qwen2_spec(GgmlType::Q4_K), RopeScalingType::yarn)),
                                  rope_scaled(phi3_spec(GgmlType::Q8_0), RopeScalingType::longrope),
                                  qwen3moe_spec(GgmlType::Q8_0)}) {
    const GgufFile model = fixture_file(spec);
    EngineOptions o;
    o.n_predict = 32;
    const auto host = generate(model, {1, 17, 42, 99, 7}, o, nullptr);
    o.backend = Backend::cuda;
    EXPECT_EQ(generate(model, {1, 17, 42, 99, 7}, o, nullptr), host) << arch_name(spec.arch);
  }
}

// f16/bf16: cuBLAS and OpenBLAS sum in different orders, and a sum that lands on the other
// side of a 16-bit rounding boundary moves by one 16-bit ulp, so over many tokens a near-tie
// may legitimately flip. Compared on a prefill (every position on the same inputs): the same
// next token, and every tap within the tolerance the reference comparison uses.
TEST_F(Cuda, ReducedPrecisionCloseToHost) {
  struct Mode {
    Precision precision;
    double tolerance;
  };
  for (const Mode m : {Mode{Precision::f16, 3e-3}, Mode{Precision::bf16, 2.5e-2}, Mode{Precision::q8, 3e-3}})
    for (const FixtureSpec& spec : {llama_spec(GgmlType::Q8_0), qwen2_spec(GgmlType::F16)}) {
      const GgufFile model = fixture_file(spec);
      const std::vector<int> prompt = {1, 17, 42, 99, 7, 250, 3, 64, 128, 5, 77, 300};
      EngineOptions o;
      o.n_predict = 1;
      o.precision = m.precision;
      const TempTrace h("cuda_prec_h"), d("cuda_prec_d");
      const auto host = run_engine(model, prompt, o, h.path);
      o.backend = Backend::cuda;
      EXPECT_EQ(run_engine(model, prompt, o, d.path), host);
      for (const TapError& err : compare_traces(d.path, h.path))
        EXPECT_LE(err.ratio(), m.tolerance)
            << arch_name(spec.arch) << " " << precision_name(m.precision) << " " << err.tap;
    }
}

// The catalogue, and every tap close to the host executor's (summation order differs in
// cuBLAS, and expf/sin/cos differ by an ulp or so); a mixture of experts' routing, grouping and
// weighted sum too.
TEST_F(Cuda, TapsCloseToHost) {
  for (const FixtureSpec& spec : {qwen2_spec(GgmlType::Q8_0), qwen3moe_spec(GgmlType::Q8_0)}) {
    const GgufFile model = fixture_file(spec);
    EngineOptions o;
    o.n_predict = 8;
    const TempTrace h("cuda_h"), d("cuda_d");
    run_engine(model, {1, 17, 42, 99, 7}, o, h.path);
    o.backend = Backend::cuda;
    run_engine(model, {1, 17, 42, 99, 7}, o, d.path);
    const TraceReader reader(d.path);
    EXPECT_EQ(producer_name(reader.metadata().producer), "engine-cuda");
    const CatalogueReport report = check_catalogue(reader.emitted_taps(), *reader.metadata().dims);
    EXPECT_TRUE(report.ok()) << report.describe();
    for (const TapError& err : compare_traces(d.path, h.path))
      EXPECT_LE(err.ratio(), 1e-4) << arch_name(spec.arch) << " " << err.tap;
  }
}

TEST_F(Cuda, DequantizeBitForBitWithHost) {
  auto host = make_host_executor();
  auto cuda = make_executor(Backend::cuda);
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const std::int64_t n = 4 * 256;
    const std::vector<std::uint8_t> bytes = quantize(t.type, test_values(std::size_t(n), 5, 0.1f));
    std::vector<float> want(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
    host->dequantize(DequantArgs{bytes.data(), t.type, want.data(), n});
    Buffer src = cuda->allocate(bytes.size()), dst = cuda->allocate(std::size_t(n) * sizeof(float));
    cuda->upload(src.data(), bytes.data(), bytes.size());
    cuda->dequantize(DequantArgs{src.as<std::uint8_t>(), t.type, dst.as<float>(), n});
    cuda->download(got.data(), dst.data(), dst.bytes());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), dst.bytes())) << t.name;
  }
}

template <typename T>
Buffer on_device(Executor& ex, const std::vector<T>& v) {
  Buffer b = ex.allocate(v.size() * sizeof(T));
  ex.upload(b.data(), v.data(), b.bytes());
  return b;
}
template <typename T>
std::vector<T> from_device(Executor& ex, const Buffer& b) {
  std::vector<T> v(b.bytes() / sizeof(T));
  ex.download(v.data(), b.data(), b.bytes());
  return v;
}

// A warp a row on the device, four accumulators of eight lanes on the host: the same 32
// partial sums in the same order (sum_slots), so the same floats. Rows not a multiple of
// the warps in a block, k below cols, and for the plain floats columns past the last 32.
TEST_F(Cuda, MatvecBitForBitWithHost) {
  auto host = make_host_executor();
  auto cuda = make_executor(Backend::cuda);
  const std::int64_t rows = 67;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const bool plain = t.block_elems == 1;
    for (const auto& [cols, k] : {std::pair<std::int64_t, std::int64_t>{768, 768}, {2048, 1280}, {777, 745}}) {
      if (!plain && cols % 256 != 0) continue;
      const std::vector<std::uint8_t> bytes = quantize(t.type, test_values(std::size_t(rows * cols), 7, 0.1f));
      const std::vector<float> x = test_values(std::size_t(k), 6);
      for (const ElemType round : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
        std::vector<float> want(static_cast<std::size_t>(rows));
        host->matvec(MatvecArgs{Encoded{bytes.data(), t.type, {}}, cols, rows, k, x.data(), want.data(), round});
        Buffer w = on_device(*cuda, bytes), xd = on_device(*cuda, x), y = on_device(*cuda, want);
        cuda->matvec(MatvecArgs{Encoded{w.as<std::uint8_t>(), t.type, {}}, cols, rows, k, xd.as<float>(),
                                y.as<float>(), round});
        const std::vector<float> got = from_device<float>(*cuda, y);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << t.name << " cols " << cols << " k " << k << " rounded to " << elem_type_name(round);
      }
    }
  }
}

// A warp per (row, head) on the device: the same sums in the same order, but the device's expf
// and tanhf are not glibc's, so the probabilities agree to a few units in the last place. The
// masked slots are exactly 0 on both.
TEST_F(Cuda, AttentionMatchesHost) {
  auto host = make_host_executor();
  auto cuda = make_executor(Backend::cuda);
  const int n_head = 4, n_head_kv = 2, head_dim = 48;
  const std::int64_t n_rows = 5, n_keys = 70, stride = 80;
  const std::vector<float> q = test_values(std::size_t(n_rows * n_head * head_dim), 21);
  const std::vector<float> kv = test_values(std::size_t(stride * n_head_kv * head_dim), 22);
  const std::vector<std::int32_t> positions = {3, 40, 66, 68, 69};
  struct Variant {
    const char* name;
    void (*apply)(AttentionArgs&);
  };
  const Variant variants[] = {
      {"causal", [](AttentionArgs&) {}},
      {"window 20", [](AttentionArgs& a) { a.window = 20; }},
      {"softcap 5", [](AttentionArgs& a) { a.softcap = 5.0f; }},
      {"not causal", [](AttentionArgs& a) { a.causal = false; }},
      {"softmax over all keys", [](AttentionArgs& a) { a.softmax_over_all_keys = true; }},
      {"modulo heads, reversed out", [](AttentionArgs& a) {
         a.kv_head_map = KvHeadMap::modulo;
         a.out_heads_reversed = true;
       }},
  };
  for (const Variant& v : variants) {
    const auto run = [&](Executor& ex) {
      Buffer qd = on_device(ex, q), kd = on_device(ex, kv), pos = on_device(ex, positions),
             probs = ex.allocate(std::size_t(n_rows * n_head * stride) * sizeof(float)),
             out = ex.allocate(std::size_t(n_rows * n_head * head_dim) * sizeof(float));
      AttentionArgs a;
      a.q = qd.as<float>();
      a.k_cache = kd.data();
      a.v_cache = kd.data();
      a.positions = pos.as<std::int32_t>();
      a.probs = probs.as<float>();
      a.out = out.as<float>();
      a.n_rows = n_rows;
      a.n_head = n_head;
      a.n_head_kv = n_head_kv;
      a.head_dim = head_dim;
      a.n_keys = n_keys;
      a.probs_stride = stride;
      a.scale = 0.25f;
      v.apply(a);
      ex.attention(a);
      return std::pair{from_device<float>(ex, probs), from_device<float>(ex, out)};
    };
    const auto [want_p, want_out] = run(*host);
    const auto [got_p, got_out] = run(*cuda);
    const std::vector<double> want_pd(want_p.begin(), want_p.end()), want_od(want_out.begin(), want_out.end());
    EXPECT_TRUE(all_close(got_p, want_pd, 1e-6, 1e-5)) << v.name;
    EXPECT_TRUE(all_close(got_out, want_od, 1e-6, 1e-5)) << v.name;
    for (std::size_t i = 0; i < want_p.size(); ++i)
      ASSERT_EQ(want_p[i] == 0.0f, got_p[i] == 0.0f) << v.name << " probs[" << i << "]";
  }
}

// A warp per row on the device, one scan on the host: the same index, ties and NaNs included.
TEST_F(Cuda, ArgmaxEqualsHost) {
  auto host = make_host_executor();
  auto cuda = make_executor(Backend::cuda);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::int64_t n = 1000;
  std::vector<std::vector<float>> rows;
  rows.push_back(test_values(std::size_t(n), 31));
  std::vector<float> ties(std::size_t(n), 1.0f);
  ties[700] = ties[45] = ties[333] = 2.0f;  // the first of three maxima: 45
  rows.push_back(ties);
  std::vector<float> nan_first = test_values(std::size_t(n), 32);
  nan_first[0] = nan;  // the scan never leaves index 0
  rows.push_back(nan_first);
  std::vector<float> nans = test_values(std::size_t(n), 33);
  for (std::size_t i = 1; i < nans.size(); i += 3) nans[i] = nan;
  nans[33] = 5.0f;  // the maximum, in the columns of lane 1, whose first column (1) is a NaN
  rows.push_back(nans);
  rows.push_back(std::vector<float>(std::size_t(n), -inf));
  std::vector<float> all_nan(std::size_t(n), nan);
  rows.push_back(all_nan);
  std::vector<float> zeros(std::size_t(n), 0.0f);
  zeros[500] = -0.0f;
  zeros[0] = -0.0f;
  rows.push_back(zeros);
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const auto n_rows = std::int64_t(rows.size());
  const auto run = [&](Executor& ex) {
    Buffer x = on_device(ex, flat), out = ex.allocate(std::size_t(n_rows) * sizeof(std::int32_t));
    ex.argmax(ArgmaxArgs{x.as<float>(), out.as<std::int32_t>(), n_rows, n});
    return from_device<std::int32_t>(ex, out);
  };
  const std::vector<std::int32_t> want = run(*host);
  EXPECT_EQ(want[1], 45);
  EXPECT_EQ(want[2], 0);
  EXPECT_EQ(want[3], 33);
  EXPECT_EQ(run(*cuda), want);
  const auto short_run = [&](Executor& ex) {  // fewer columns than a warp has lanes
    Buffer x = on_device(ex, std::vector<float>{0.5f, nan, 3.0f, 3.0f, -1.0f}), out = ex.allocate(sizeof(std::int32_t));
    ex.argmax(ArgmaxArgs{x.as<float>(), out.as<std::int32_t>(), 1, 5});
    return from_device<std::int32_t>(ex, out);
  };
  EXPECT_EQ(short_run(*host), std::vector<std::int32_t>{2});
  EXPECT_EQ(short_run(*cuda), std::vector<std::int32_t>{2});
}

// The row reductions a decode step runs besides its products, a warp a row (or block) on the
// device and a thread a row on the host, which add in the same order: RMSNorm in every variant
// the faults use, in place too, on rows not a multiple of 32 long; q8 quantization in blocks of
// 32 and 256 with a zero block, a NaN and an infinity.
TEST_F(Cuda, RowReductionsBitForBitWithHost) {
  auto host = make_host_executor();
  auto cuda = make_executor(Backend::cuda);
  for (const std::int64_t n : {std::int64_t{576}, std::int64_t{77}}) {
    const std::int64_t rows = 6;
    const std::vector<float> x = test_values(std::size_t(rows * n), 21, 3.0f);
    const std::vector<float> w = test_values(std::size_t(n), 22, 1.0f);
    for (int variant = 0; variant < 5; ++variant) {
      const auto run = [&](Executor& ex) {
        Buffer xb = on_device(ex, x), wb = on_device(ex, w), out = ex.allocate(xb.bytes());
        RmsNormArgs a{xb.as<float>(), variant == 1 ? nullptr : wb.as<float>(), out.as<float>(), rows, n, 1e-5f};
        a.weight_plus_one = variant == 2;
        a.subtract_mean = variant == 3;
        if (variant == 4) a.out = xb.as<float>();
        ex.rmsnorm(a);
        return from_device<float>(ex, variant == 4 ? xb : out);
      };
      const std::vector<float> want = run(*host), got = run(*cuda);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << "rmsnorm n " << n << ", variant " << variant;
    }
  }
  const std::int64_t rows = 3, cols = 1024;
  std::vector<float> x = test_values(std::size_t(rows * cols), 23, 5.0f);
  std::fill_n(x.begin() + 256, 256, 0.0f);
  x[600] = std::numeric_limits<float>::quiet_NaN();
  x[1500] = std::numeric_limits<float>::infinity();
  for (const int block : {kQ8Block, kQ8KBlock}) {
    const auto run = [&](Executor& ex) {
      const std::size_t values = x.size(), blocks = values / kQ8Block;
      Buffer xb = on_device(ex, x), q = ex.allocate(values), d = ex.allocate(values / block * sizeof(float)),
             ds = ex.allocate(blocks * sizeof(float)), sums = ex.allocate(blocks * sizeof(std::int16_t));
      ex.quantize_q8(QuantizeQ8Args{xb.as<float>(), cols, rows, cols,
                                    Q8Rows{q.as<std::int8_t>(), d.as<float>(), ds.as<float>(), sums.as<std::int16_t>(), block}});
      return std::tuple{from_device<std::int8_t>(ex, q), from_device<float>(ex, d),
                        block == kQ8Block ? from_device<float>(ex, ds) : std::vector<float>{},
                        block == kQ8Block ? std::vector<std::int16_t>{} : from_device<std::int16_t>(ex, sums)};
    };
    const auto want = run(*host), got = run(*cuda);
    EXPECT_EQ(std::get<0>(got), std::get<0>(want)) << "quantized values, blocks of " << block;
    // The NaN blocks' scales are NaNs of opposite signs: x86 makes 0 × ∞ a negative NaN,
    // CUDA a positive one. same_floats counts any NaN as any other.
    EXPECT_TRUE(same_floats(std::get<1>(got), std::get<1>(want))) << "scales, blocks of " << block;
    EXPECT_TRUE(same_floats(std::get<2>(got), std::get<2>(want))) << "scaled sums, blocks of " << block;
    EXPECT_EQ(std::get<3>(got), std::get<3>(want)) << "sums, blocks of " << block;
  }
}

// Precision q8: activations quantized on each executor, then multiplied, in blocks of 32 and
// (K-quants) of 256. The integer sums are exact and the float lanes are added in one order
// on both (--fmad=false, -ffp-contract=off): the same floats.
TEST_F(Cuda, Q8ProductsBitForBitWithHost) {
  auto host = make_host_executor();
  auto cuda = make_executor(Backend::cuda);
  const std::int64_t rows = 37, cols = 768, n = 5;
  const std::vector<float> x = test_values(std::size_t(n * cols), 11, 2.0f);
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const Encoded probe{nullptr, t.type, {}};
    if (!q8_multipliable(probe)) continue;
    const std::vector<std::uint8_t> bytes = quantize(t.type, test_values(std::size_t(rows * cols), 12, 0.1f));
    for (const int block : {kQ8Block, kQ8KBlock}) {
      if (block == kQ8KBlock && !q8k_multipliable(probe)) continue;
      for (const std::int64_t rows_x : {std::int64_t{1}, n}) {
        const auto run = [&](Executor& ex) {
          const std::size_t values = std::size_t(rows_x * cols), blocks = values / kQ8Block;
          Buffer w = ex.allocate(bytes.size()), xb = ex.allocate(values * sizeof(float)), q = ex.allocate(values),
                 d = ex.allocate(blocks * sizeof(float)), ds = ex.allocate(blocks * sizeof(float)),
                 sums = ex.allocate(blocks * sizeof(std::int16_t)),
                 y = ex.allocate(std::size_t(rows * rows_x) * sizeof(float));
          ex.upload(w.data(), bytes.data(), bytes.size());
          ex.upload(xb.data(), x.data(), xb.bytes());
          const Q8Rows xq{q.as<std::int8_t>(), d.as<float>(), ds.as<float>(), sums.as<std::int16_t>(), block};
          ex.quantize_q8(QuantizeQ8Args{xb.as<float>(), cols, rows_x, cols, xq});
          ex.matmul_q8(MatmulQ8Args{Encoded{w.as<std::uint8_t>(), t.type, {}}, cols, rows, cols, xq, rows_x,
                                    y.as<float>(), rows});
          std::vector<float> out(std::size_t(rows * rows_x));
          ex.download(out.data(), y.data(), y.bytes());
          return out;
        };
        const std::vector<float> want = run(*host), got = run(*cuda);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << t.name << ", blocks of " << block << ", " << rows_x << " rows";
      }
    }
  }
}

TEST_F(Cuda, RoundingBitForBitWithHost) {
  auto cuda = make_executor(Backend::cuda);
  const std::vector<float> x = test_values(4099, 9, 70000.0f);
  for (ElemType t : {ElemType::f16, ElemType::bf16}) {
    Buffer buf = cuda->allocate(x.size() * sizeof(float));
    cuda->upload(buf.data(), x.data(), buf.bytes());
    cuda->round(RoundArgs{buf.as<float>(), std::int64_t(x.size()), t});
    std::vector<float> got(x.size());
    cuda->download(got.data(), buf.data(), buf.bytes());
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(f32_bits(got[i]), f32_bits(round_to(t, x[i])))
          << elem_type_name(t) << " [" << i << "]";
  }
}

TEST_F(Cuda, TapsDoNotChangeResultsAndRunsAreDeterministic) {
  const GgufFile model = fixture_file(llama_spec(GgmlType::F16));
  EngineOptions o;
  o.backend = Backend::cuda;
  o.n_predict = 6;
  std::vector<std::vector<float>> a, b, c;
  const auto tokens = generate(model, {3, 4, 5}, o, nullptr, &a);
  const TempTrace t("cuda_taps");
  EXPECT_EQ(run_engine(model, {3, 4, 5}, o, t.path, &b), tokens);
  EXPECT_EQ(generate(model, {3, 4, 5}, o, nullptr, &c), tokens);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
        << "step " << i;
    EXPECT_EQ(0, std::memcmp(a[i].data(), c[i].data(), a[i].size() * sizeof(float)))
        << "step " << i;
  }
}

// The host's fault table on the device: each fault first diverges where docs/faults.md says.
TEST_F(Cuda, FaultsDivergeFirstWhereDocumented) {
  for (const FaultCase& fc : fault_cases()) {
    const Divergence d = run_fault_case(fc, Backend::cuda);
    EXPECT_EQ(d.tap, fc.expected.tap) << fc.fault;
    EXPECT_EQ(d.position, fc.expected.position) << fc.fault;
  }
}

}  // namespace
}  // namespace tapdiff::engine
