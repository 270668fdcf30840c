// Weights first: the weight taps (tapdiff/weight_taps.hpp) as the reference and the engine
// record them, and diff's weight comparison. Every engine fault that acts on weights is found
// in the right tensor at the right row, with its class and the replayed decode that explains
// it, with full tensors and with per-row statistics; clean runs (f32 and f16) show no
// difference; the statistics encoding and the row sample are exact and deterministic.
#include <cmath>
#include <filesystem>
#include <gtest/gtest.h>
#include <unistd.h>

#include "app/harness.hpp"
#include "diff/compare.hpp"
#include "fixtures/tiny_model.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {
namespace {

const std::vector<int> kPrompt = {1, 17, 42, 99, 7};

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "tapdiff_weights_" + std::to_string(getpid()) + "_" + name;
}

FixtureSpec llama_q8_0() {
  FixtureSpec s;
  s.weight_type = GgmlType::Q8_0;  // every matrix, token_embd included (320 x 64)
  return s;
}

FixtureSpec qwen2_f32() {
  FixtureSpec s;
  s.arch = Arch::qwen2;  // q/k/v biases
  return s;
}

// A model file, the reference's trace and an engine trace of it, removed at the end.
class WeightRun {
public:
  WeightRun(const std::string& tag, const FixtureSpec& spec)
      : model_(temp_file(tag + ".gguf")), reference_(temp_file(tag + "_ref.h5")),
        engine_(temp_file(tag + "_eng.h5")) {
    write_fixture(spec, model_);
  }
  ~WeightRun() {
    for (const auto* p : {&model_, &reference_, &engine_}) std::filesystem::remove(*p);
  }
  WeightRun(const WeightRun&) = delete;
  WeightRun& operator=(const WeightRun&) = delete;

  // mode: the --weights value on both runs ("" records none on that side).
  DiffResult run(const std::string& fault, const std::string& mode, const std::string& precision = "f32",
                 const std::string& engine_mode = "use mode") {
    RunSpec ref;
    ref.model = model_;
    ref.prompt = kPrompt;
    ref.n_predict = 3;
    ref.trace = reference_;
    ref.weights = mode;
    ref.progress = false;
    run_model(ref);
    RunSpec eng = ref;
    eng.backend = "host";
    eng.fault = fault;
    eng.precision = precision;
    eng.trace = engine_;
    eng.weights = engine_mode == "use mode" ? mode : engine_mode;
    run_model(eng);
    return diff_traces(reference_, engine_);
  }
  const std::string& engine_trace() const { return engine_; }

private:
  std::string model_, reference_, engine_;
};

const WeightComparison* comparison(const DiffResult& r, const std::string& tensor) {
  for (const auto& w : r.weights)
    if (w.tensor == tensor) return &w;
  return nullptr;
}

struct WeightFaultCase {
  const char* fault;
  FixtureSpec spec;
  const char* tensor;     // the first tensor that differs
  std::int64_t row;       // its first differing row
  const char* bug_class;
  const char* variant;    // a phrase of the replayed variant
  const char* summary;    // a phrase of the row summary
};

std::vector<WeightFaultCase> weight_fault_cases() {
  return {
      // Q8_0 token_embd (320 x 64, 34-byte blocks): 10240 of 21760 bytes read = 301 whole
      // blocks, so block 301 (the second half of row 150) is cut and rows 151.. are zero.
      {"tensor-bytes-truncated", llama_q8_0(), "token_embd.weight", 150, "weight-loading",
       "short byte size: 10240 of its 21760 bytes", "rows 0..149 match, rows 151.. are zero (row 150 partly)"},
      {"dequant-missing", llama_q8_0(), "token_embd.weight", 0, "dequantization",
       "raw Q8_0 bytes read as f16 values: no dequantization", "differ"},
      {"dequant-q8-scale", llama_q8_0(), "token_embd.weight", 0, "dequantization",
       "fp16 scale read as bf16", "differ"},
      {"weight-not-wired", llama_q8_0(), "blk.0.attn_v.weight", 0, "weight-loading",
       "all zero: the buffer was allocated but never filled", "rows are zero"},
      {"weight-not-wired", qwen2_f32(), "blk.0.attn_v.weight", 0, "weight-loading",
       "all zero: the buffer was allocated but never filled", "rows are zero"},
      {"bias-misread", qwen2_f32(), "blk.0.attn_q.bias", 0, "bias",
       "bias staged as bf16 and decoded as f16", "differ"},
  };
}

class WeightFault : public ::testing::TestWithParam<std::tuple<WeightFaultCase, const char*>> {};

TEST_P(WeightFault, FirstFindingIsTheTensorWithItsRowsAndReplayedDecode) {
  const auto& [fc, mode] = GetParam();
  WeightRun run(std::string(fc.fault) + "_" + mode, fc.spec);
  const DiffResult r = run.run(fc.fault, mode);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.verdict, Verdict::diverged);
  EXPECT_EQ(r.first->tap, std::string("weight.") + fc.tensor);
  EXPECT_EQ(r.first->position, fc.row);
  ASSERT_TRUE(r.diagnosis.has_value());
  EXPECT_EQ(r.diagnosis->bug_class, fc.bug_class) << r.diagnosis->explanation;
  EXPECT_NE(r.diagnosis->variant.find(fc.variant), std::string::npos) << r.diagnosis->variant;
  EXPECT_NE(r.diagnosis->explanation.find(fc.tensor), std::string::npos);
  ASSERT_FALSE(r.roots.empty());
  EXPECT_EQ(r.roots.front().kind, "weights");
  // The activations computed from the bad weight are its effect, not independent roots.
  EXPECT_EQ(r.roots.size(), 1u) << r.roots.back().at.tap;
  EXPECT_FALSE(r.roots.front().explained.empty());
  const WeightComparison* c = comparison(r, fc.tensor);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->mode, std::string(mode));
  EXPECT_EQ(c->first_differing_row, fc.row);
  EXPECT_NE(c->summary.find(fc.summary), std::string::npos) << c->summary;
  // Every tensor loaded before the faulty one matches.
  for (const auto& w : r.weights) {
    if (w.tensor == fc.tensor) break;
    EXPECT_FALSE(w.differs()) << w.tensor << ": " << w.summary;
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<WeightFaultCase, const char*>>& param) {
  const WeightFaultCase& fc = std::get<0>(param.param);
  std::string name = std::string(fc.fault) + "_" + arch_name(fc.spec.arch) + "_" + std::get<1>(param.param);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(LoaderAndDequantFaults, WeightFault,
                         ::testing::Combine(::testing::ValuesIn(weight_fault_cases()),
                                            ::testing::Values("full", "stats")),
                         case_name);

// f16 rounding of the engine's weights is no difference; f32 weights agree bit for bit.
TEST(WeightTaps, CleanRunsMatchInF32AndF16FullAndStats) {
  for (const char* precision : {"f32", "f16", "bf16"})
    for (const char* mode : {"full", "stats"}) {
      WeightRun run(std::string("clean_") + precision + mode, llama_q8_0());
      const DiffResult r = run.run("", mode, precision);
      EXPECT_EQ(r.verdict, Verdict::pass) << precision << " " << mode;
      EXPECT_FALSE(r.first.has_value());
      // token_embd, 2 layers x 9 tensors, output_norm, output.
      EXPECT_EQ(r.weights.size(), 21u) << precision << " " << mode;
      for (const auto& w : r.weights) {
        EXPECT_FALSE(w.differs()) << precision << " " << mode << " " << w.tensor << ": " << w.summary;
        EXPECT_EQ(w.compared_rows, w.rows) << w.tensor;
        if (std::string(precision) == "f32" && std::string(mode) == "full") {
          EXPECT_EQ(w.max_abs, 0.0) << w.tensor;
        }
      }
    }
}

// In f16 a Q8_0 scale read as bf16 (about 2^-119 x q) flushes to zero, like a buffer never
// filled: the other Q8_0 tensors decode right under weight-not-wired, so the loader is named;
// under dequant-q8-scale none does, so the decoder is.
TEST(WeightTaps, F16FlushToZeroStillSeparatesLoaderFromDecoder) {
  for (const auto& [fault, tensor, bug_class] :
       {std::tuple{"weight-not-wired", "blk.0.attn_v.weight", "weight-loading"},
        std::tuple{"dequant-q8-scale", "token_embd.weight", "dequantization"}}) {
    WeightRun run(std::string("f16_") + fault, llama_q8_0());
    const DiffResult r = run.run(fault, "full", "f16");
    ASSERT_TRUE(r.first.has_value()) << fault;
    EXPECT_EQ(r.first->tap, std::string("weight.") + tensor);
    ASSERT_TRUE(r.diagnosis.has_value());
    EXPECT_EQ(r.diagnosis->bug_class, bug_class) << fault << ": " << r.diagnosis->variant;
    const WeightComparison* c = comparison(r, tensor);
    ASSERT_NE(c, nullptr);
    EXPECT_NE(c->summary.find("rows are zero"), std::string::npos) << c->summary;
  }
}

// Weight faults that act on activations only leave every weight equal.
TEST(WeightTaps, ActivationFaultsLeaveWeightsEqual) {
  WeightRun run("rope", llama_q8_0());
  const DiffResult r = run.run("rope-position-ignored", "full");
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "blk.0.attn_q.rope");
  for (const auto& w : r.weights) EXPECT_FALSE(w.differs()) << w.tensor;
}

TEST(WeightTaps, StatsModeRecordsEveryRowsStatisticsAndASampleOfRows) {
  WeightRun run("layout", llama_q8_0());
  run.run("", "stats");
  const TraceReader t(run.engine_trace());
  const TapInfo& stats = t.tap("weight_stats.token_embd.weight", -1);
  EXPECT_EQ(stats.n_rows, 320);
  EXPECT_EQ(stats.row_shape, std::vector<std::int64_t>{kWeightStatsWidth});
  const TapInfo& rows = t.tap("weight.token_embd.weight", -1);
  EXPECT_EQ(rows.n_rows, 8);
  EXPECT_EQ(rows.positions(), sampled_weight_rows("token_embd.weight", 320, 8, 0));
  EXPECT_EQ(t.tap("weight.blk.0.attn_norm.weight", -1).n_rows, 1);  // 1-D: one row
  // Weight taps are outside the tap catalogue and do not count as extra taps.
  const CatalogueReport report = check_catalogue(t.emitted_taps(), *t.metadata().dims);
  EXPECT_TRUE(report.ok()) << report.describe();
}

TEST(WeightTaps, OnlyOneTraceWithWeightsIsListedNotCompared) {
  WeightRun run("one_side", llama_q8_0());
  const DiffResult r = run.run("", "full", "f32", "");
  EXPECT_EQ(r.verdict, Verdict::pass);
  EXPECT_TRUE(r.weights.empty());
  bool listed = false;
  for (const auto& f : r.findings) listed = listed || (f.kind == "missing-in-actual" && f.tap == "weight.*");
  EXPECT_TRUE(listed);
}

TEST(WeightRowStats, EncodingRoundTripsExactlyAndHashSeesOneBit) {
  // Sums that need more than float32's 24 bits: the (hi, lo) pair must keep them.
  std::vector<float> row = {0.25f, -1.5f, 3.0e-8f, 7.0f, NAN, 1e7f, -0.0f, INFINITY};
  const WeightRowStats s = weight_row_stats(row.data(), std::int64_t(row.size()));
  EXPECT_EQ(s.nonfinite, 2);
  EXPECT_EQ(s.min, -1.5f);
  EXPECT_EQ(s.max, 1e7f);
  EXPECT_EQ(s.sum, 0.25 - 1.5 + double(3.0e-8f) + 7.0 + 1e7);
  EXPECT_EQ(s.sum_squares, 0.0625 + 2.25 + double(3.0e-8f) * double(3.0e-8f) + 49.0 + 1e14);
  float encoded[kWeightStatsWidth];
  encode_weight_stats(s, encoded);
  const WeightRowStats d = decode_weight_stats(encoded);
  EXPECT_EQ(d.hash, s.hash);
  EXPECT_EQ(d.nonfinite, s.nonfinite);
  EXPECT_EQ(d.min, s.min);
  EXPECT_NEAR(d.sum, s.sum, 1e-13 * std::fabs(s.sum));
  EXPECT_NE(double(float(s.sum)), s.sum);  // float32 alone would lose it
  EXPECT_NEAR(d.sum_squares, s.sum_squares, 1e-13 * s.sum_squares);
  row[6] = 0.0f;  // -0 -> +0: equal values, other bits
  EXPECT_NE(weight_row_stats(row.data(), std::int64_t(row.size())).hash, s.hash);
}

TEST(WeightRowSample, DeterministicIncreasingDistinctAndPerTensor) {
  const auto a = sampled_weight_rows("blk.0.ffn_up.weight", 4864, 8, 7);
  EXPECT_EQ(a, sampled_weight_rows("blk.0.ffn_up.weight", 4864, 8, 7));
  ASSERT_EQ(a.size(), 8u);
  for (std::size_t i = 1; i < a.size(); ++i) EXPECT_LT(a[i - 1], a[i]);
  EXPECT_NE(a, sampled_weight_rows("blk.1.ffn_up.weight", 4864, 8, 7));
  EXPECT_NE(a, sampled_weight_rows("blk.0.ffn_up.weight", 4864, 8, 8));
  EXPECT_EQ(sampled_weight_rows("x", 3, 8, 0), (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(WeightTapMode, AutoSwitchesToStatsAboveTheThreshold) {
  EXPECT_EQ(resolve_weight_tap_mode("auto", 50'000'000), WeightTapMode::full);
  EXPECT_EQ(resolve_weight_tap_mode("auto", 50'000'001), WeightTapMode::stats);
  EXPECT_EQ(resolve_weight_tap_mode("auto", 1000, 999), WeightTapMode::stats);
  EXPECT_EQ(resolve_weight_tap_mode("full", 1u << 31), WeightTapMode::full);
  EXPECT_THROW(resolve_weight_tap_mode("some", 1), std::invalid_argument);
}

}  // namespace
}  // namespace tapdiff::diff
