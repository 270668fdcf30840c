// Row metrics, KL, top-k and the logits summary on hand-computed cases.
#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <vector>

#include "diff/metrics.hpp"
#include "diff/tap_graph.hpp"

namespace tapdiff::diff {
namespace {

TEST(DiffMetrics, HandComputedRow) {
  // a = [3, 4], b = [3, 5]: err² = 1, |a|² = 25 → nmse 0.04; cosine = (9+20)/(5·√34)
  const float a[] = {3, 4}, b[] = {3, 5};
  const RowMetrics m = row_metrics(a, b, 2);
  EXPECT_DOUBLE_EQ(m.nmse, 0.04);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(m.max_rel, 0.25);
  EXPECT_NEAR(m.cosine, 29.0 / (5.0 * std::sqrt(34.0)), 1e-15);
  EXPECT_EQ(m.worst_index, 1);
  EXPECT_EQ(m.worst_expected, 4.0f);
  EXPECT_EQ(m.worst_actual, 5.0f);
  EXPECT_EQ(m.nonfinite, 0);
}

TEST(DiffMetrics, IdenticalRowsAreZero) {
  const float a[] = {1, -2, 0.5f};
  const RowMetrics m = row_metrics(a, a, 3);
  EXPECT_EQ(m.nmse, 0);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_DOUBLE_EQ(m.cosine, 1.0);
}

TEST(DiffMetrics, NonFiniteActualIsInfiniteError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float a[] = {1, 2, 3}, b[] = {1, nan, 3};
  const RowMetrics m = row_metrics(a, b, 3);
  EXPECT_EQ(m.nonfinite, 1);
  EXPECT_TRUE(std::isinf(m.nmse));
  EXPECT_EQ(m.worst_index, 1);
}

// The vectorized finite path against the definitions summed in long double, on a row long enough
// to use every vector lane and the scalar tail, with its worst element repeated (the first counts).
TEST(DiffMetrics, LongFiniteRowsAgreeWithTheDefinitions) {
  std::vector<float> a(1003), b(1003);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = std::sin(0.37f * float(i)) * (i % 7 == 0 ? 1e-7f : 2.0f);
    b[i] = a[i] + 1e-3f * std::cos(1.3f * float(i));
  }
  b[500] = a[500] + 0.25f;
  b[900] = a[900] + 0.25f;
  long double err2 = 0, ref2 = 0, dot = 0, act2 = 0, max_rel = 0, max_a = 0;
  for (float x : a) max_a = std::max(max_a, std::fabs((long double)x));
  for (std::size_t i = 0; i < a.size(); ++i) {
    const long double x = a[i], y = b[i], d = std::fabs(y - x);
    err2 += d * d;
    ref2 += x * x;
    dot += x * y;
    act2 += y * y;
    max_rel = std::max(max_rel, d / std::max(std::fabs(x), std::max(1e-6L * max_a, 1e-30L)));
  }
  const RowMetrics m = row_metrics(a.data(), b.data(), std::int64_t(a.size()));
  EXPECT_NEAR(m.nmse, double(err2 / ref2), 1e-12 * double(err2 / ref2));
  EXPECT_NEAR(m.cosine, double(dot / std::sqrt(ref2 * act2)), 1e-12);
  EXPECT_NEAR(m.max_rel, double(max_rel), 1e-9 * double(max_rel));
  EXPECT_EQ(m.max_abs, std::fabs(double(b[500]) - double(a[500])));
  EXPECT_EQ(m.worst_index, 500);
  EXPECT_EQ(m.worst_actual, b[500]);
  // One infinity anywhere leaves the vectorized path: the same row with b[3] = inf.
  b[3] = std::numeric_limits<float>::infinity();
  const RowMetrics inf = row_metrics(a.data(), b.data(), std::int64_t(a.size()));
  EXPECT_EQ(inf.nonfinite, 1);
  EXPECT_EQ(inf.worst_index, 3);
  EXPECT_TRUE(std::isinf(inf.nmse));
}

TEST(DiffMetrics, KlAndTopK) {
  // Equal logits: KL 0. [0, ln 3] vs [ln 3, 0]: p = (1/4, 3/4), q = (3/4, 1/4)
  // KL = 1/4 ln(1/3) + 3/4 ln 3 = 1/2 ln 3
  const float a[] = {0, std::log(3.0f)}, b[] = {std::log(3.0f), 0};
  EXPECT_NEAR(kl_divergence(a, a, 2), 0, 1e-12);
  EXPECT_NEAR(kl_divergence(a, b, 2), 0.5 * std::log(3.0), 1e-6);
  const float logits[] = {0.1f, 3, -1, 3, 2};
  const auto top = top_k(logits, 5, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);  // ties by lower index
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 4);
}

TEST(DiffMetrics, LogitsSummaryPercentilesAndFirstDifference) {
  LogitsSummary s;
  for (int p = 0; p < 5; ++p) {
    LogitsSummary::Position pos;
    pos.position = 10 + p;
    pos.kl = p;  // 0, 1, 2, 3, 4
    pos.same_top1 = p != 3;
    pos.top5_overlap = p == 3 ? 4 : 5;
    s.positions.push_back(pos);
  }
  summarize_logits(s);
  EXPECT_EQ(s.n_positions, 5);
  EXPECT_DOUBLE_EQ(s.kl_mean, 2.0);
  EXPECT_NEAR(s.kl_stderr, std::sqrt(2.0 / 4.0), 1e-12);  // population var 2, n-1 = 4
  EXPECT_DOUBLE_EQ(s.kl_max, 4.0);
  EXPECT_DOUBLE_EQ(s.same_top1_rate, 0.8);
  EXPECT_DOUBLE_EQ(s.mean_top5_overlap, 4.8);
  ASSERT_TRUE(s.first_greedy_difference.has_value());
  EXPECT_EQ(*s.first_greedy_difference, 13);
  ASSERT_EQ(s.kl_percentiles.size(), 7u);
  EXPECT_DOUBLE_EQ(s.kl_percentiles[4].second, 2.0);  // median
  EXPECT_DOUBLE_EQ(s.kl_percentiles[0].second, 3.996);  // 99.9%: rank 3.996
}

TEST(DiffTapGraph, InputsFollowTheForwardPass) {
  const auto q = tap_inputs("attn_q", 2, 4);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].name, "attn_norm");
  EXPECT_EQ(q[0].layer, 2);
  const auto norm0 = tap_inputs("attn_norm", 0, 4);
  EXPECT_EQ(norm0[0].name, "token_embd");
  EXPECT_EQ(norm0[0].layer, -1);
  const auto norm3 = tap_inputs("attn_norm", 3, 4);
  EXPECT_EQ(norm3[0].name, "resid.ffn");
  EXPECT_EQ(norm3[0].layer, 2);
  const auto probs = tap_inputs("attn.probs", 1, 4);
  ASSERT_EQ(probs.size(), 2u);
  EXPECT_TRUE(probs[1].all_earlier_positions);
  const auto head = tap_inputs("output_norm", -1, 4);
  EXPECT_EQ(head[0].layer, 3);
  EXPECT_EQ(tap_class("attn_k.rope"), "rope");
  EXPECT_EQ(tap_class("not-a-tap"), "");
}

}  // namespace
}  // namespace tapdiff::diff
