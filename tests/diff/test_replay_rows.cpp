// RowSource (diff/replay_rows.hpp): rows a replay reads, from the trace or computed for taps it
// does not record; a computed row is computed once while kept, and a copy computing one tap anew
// still shares the rows of the others.
#include <gtest/gtest.h>

#include "diff/replay_rows.hpp"
#include "support/temp_dir.hpp"
#include "tapdiff/trace_writer.hpp"
#include "trace_test_util.hpp"

namespace tapdiff::diff {
namespace {

constexpr std::int64_t kSteps = 4, kWidth = 3;

TapInfo unrecorded(const char* name, int layer) {
  TapInfo t;
  t.name = name;
  t.layer = layer;
  t.full_name = std::string("blk.") + std::to_string(layer) + "." + name;
  t.row_shape = {kWidth};
  t.row_size = kWidth;
  return t;
}

class RowSourceTest : public ::testing::Test {
protected:
  void SetUp() override {
    TraceWriter w(dir_.file("t.h5"), test::sample_metadata());
    for (std::int64_t p = 0; p < kSteps; ++p) {
      const std::vector<float> row(kWidth, float(p));
      w.record("attn_norm", 0, p, 1, {kWidth}, row.data());
      w.end_step();
    }
    w.close();
    trace_ = std::make_unique<TraceReader>(dir_.file("t.h5"));
  }
  test::TempDir dir_;
  std::unique_ptr<TraceReader> trace_;
};

TEST_F(RowSourceTest, ReadsTheTraceAndComputesWhatItLacks) {
  RowSource s(*trace_);
  EXPECT_EQ(trace_row(s, "attn_norm", 0, 2), Row(kWidth, 2.0f));
  EXPECT_EQ(s.find("attn_q", 0), nullptr);
  EXPECT_TRUE(trace_row(s, "attn_q", 0, 2).empty());
  s.compute(unrecorded("attn_q", 0), [&s](std::int64_t p) {
    Row r = trace_row(s, "attn_norm", 0, p);
    for (float& v : r) v *= 10;
    return r;
  });
  ASSERT_NE(s.find("attn_q", 0), nullptr);
  EXPECT_TRUE(s.computes("attn_q", 0));
  EXPECT_FALSE(s.computes("attn_norm", 0));
  EXPECT_EQ(trace_row(s, "attn_q", 0, 3), Row(kWidth, 30.0f));
  const Rows upto = trace_rows_upto(s, "attn_q", 0, 2);
  ASSERT_EQ(upto.size(), 3u);
  EXPECT_EQ(upto[1], Row(kWidth, 10.0f));
}

TEST_F(RowSourceTest, ACopyComputingATapAnewSharesTheOthersRows) {
  RowSource base(*trace_);
  int k_runs = 0;
  base.compute(unrecorded("attn_k", 0), [&k_runs](std::int64_t p) {
    ++k_runs;
    return Row(kWidth, float(p));
  });
  base.compute(unrecorded("attn_v", 0), [](std::int64_t) { return Row(kWidth, 1.0f); });
  EXPECT_EQ(trace_row(base, "attn_k", 0, 1), Row(kWidth, 1.0f));
  RowSource variant = base;
  variant.compute(unrecorded("attn_v", 0), [](std::int64_t) { return Row(kWidth, -1.0f); });
  EXPECT_EQ(trace_row(variant, "attn_k", 0, 1), Row(kWidth, 1.0f));
  EXPECT_EQ(k_runs, 1);  // computed once, by the source it was copied from
  EXPECT_EQ(trace_row(variant, "attn_v", 0, 0), Row(kWidth, -1.0f));
  EXPECT_EQ(trace_row(base, "attn_v", 0, 0), Row(kWidth, 1.0f));
}

TEST_F(RowSourceTest, AVariantForgetsItsOwnRowsNotTheSharedOnes) {
  RowSource base(*trace_);
  int k_runs = 0, v_runs = 0;
  base.compute(unrecorded("attn_k", 0), [&k_runs](std::int64_t p) {
    ++k_runs;
    return Row(kWidth, float(p));
  });
  RowSource variant = base;
  variant.compute(unrecorded("attn_v", 0), [&v_runs](std::int64_t p) {
    ++v_runs;
    return Row(kWidth, float(-p));
  });
  trace_rows_upto(variant, "attn_k", 0, 3);
  trace_rows_upto(variant, "attn_v", 0, 3);
  trace_rows_upto(variant, "attn_v", 0, 3);
  EXPECT_EQ(v_runs, 4);  // each row computed once while kept
  variant.forget_rows_not_in(base);
  EXPECT_EQ(trace_row(variant, "attn_v", 0, 2), Row(kWidth, -2.0f));
  EXPECT_EQ(v_runs, 5);  // its own rows dropped
  trace_rows_upto(variant, "attn_k", 0, 3);
  EXPECT_EQ(k_runs, 4);  // the shared ones kept
}

}  // namespace
}  // namespace tapdiff::diff
