// first_nonfinite_origin: the first tap (execution order) and position holding NaN/Inf in
// either trace, and which traces hold it.
#include <gtest/gtest.h>

#include "diff/nonfinite.hpp"

namespace tapdiff::diff {
namespace {

// A tap of rows of 8 elements at positions 0..3, non-finite counts per position given.
TapComparison tap(const std::string& full_name, std::vector<std::pair<int, int>> nonfinite) {
  TapComparison t;
  t.full_name = full_name;
  t.row_shape = {2, 4};
  for (int p = 0; p < 4; ++p) {
    RowMetrics m;
    m.position = p;
    m.nonfinite_expected = nonfinite[std::size_t(p)].first;
    m.nonfinite = nonfinite[std::size_t(p)].second;
    t.rows.push_back(m);
  }
  return t;
}

const std::vector<std::pair<int, int>> kFinite = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};

TEST(NonfiniteOrigin, NoneWhenEveryValueIsFinite) {
  EXPECT_FALSE(first_nonfinite_origin({tap("token_embd", kFinite), tap("blk.0.attn_q", kFinite)}));
  EXPECT_FALSE(first_nonfinite_origin({}));
}

TEST(NonfiniteOrigin, FirstTapInExecutionOrderThenEarliestPosition) {
  const auto f = first_nonfinite_origin({
      tap("token_embd", kFinite),
      tap("blk.0.attn_q", {{0, 0}, {0, 0}, {3, 3}, {8, 8}}),
      tap("blk.0.attn_k", {{8, 8}, {8, 8}, {8, 8}, {8, 8}}),
  });
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "non-finite");
  EXPECT_EQ(f->tap, "blk.0.attn_q");
  EXPECT_EQ(f->detail,
            "non-finite values in both traces from blk.0.attn_q, position 2: 3 of 8 elements in "
            "the expected trace, 3 in the actual");
}

TEST(NonfiniteOrigin, SaysWhichTraceHoldsThem) {
  const auto expected_only = first_nonfinite_origin({tap("output", {{0, 0}, {1, 0}, {0, 0}, {0, 0}})});
  ASSERT_TRUE(expected_only);
  EXPECT_NE(expected_only->detail.find("in the expected trace only from output, position 1"),
            std::string::npos)
      << expected_only->detail;
  const auto actual_only = first_nonfinite_origin({tap("output", {{0, 0}, {0, 0}, {0, 0}, {0, 2}})});
  ASSERT_TRUE(actual_only);
  EXPECT_NE(actual_only->detail.find("in the actual trace only from output, position 3"),
            std::string::npos)
      << actual_only->detail;
}

}  // namespace
}  // namespace tapdiff::diff
