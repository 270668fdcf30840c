// Heatmap grids: rows and columns follow execution order, cells summarise the right rows.
#include <gtest/gtest.h>

#include <algorithm>

#include "reports/heatmap.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

std::size_t index_of(const std::vector<std::string>& list, const std::string& item) {
  return static_cast<std::size_t>(std::find(list.begin(), list.end(), item) - list.begin());
}

TEST(ReportsHeatmap, LayerTapGridFollowsExecutionOrder) {
  const HeatGrid g = layer_tap_grid(testing::diverged_result());
  EXPECT_EQ(g.rows, (std::vector<std::string>{"embed", "0", "1", "2", "3", "head"}));
  ASSERT_EQ(g.columns.size(), 21u);
  EXPECT_EQ(g.columns.front(), "token_embd");
  EXPECT_EQ(g.columns[1], "attn_norm");
  EXPECT_EQ(g.columns[18], "resid.ffn");
  EXPECT_EQ(g.columns.back(), "output");
  const std::size_t probs = index_of(g.columns, "attn.probs");
  EXPECT_TRUE(g.cells[1][probs].first);
  EXPECT_TRUE(g.cells[1][probs].diverged);
  EXPECT_FALSE(g.cells[1][index_of(g.columns, "kv.k")].diverged);
  EXPECT_FALSE(g.cells[4][index_of(g.columns, "ffn.act")].present) << "missing in actual";
  EXPECT_FALSE(g.cells[0][index_of(g.columns, "attn_q")].present) << "no per-layer tap in embed";
  EXPECT_TRUE(g.cells[5][index_of(g.columns, "output")].present);
}

TEST(ReportsHeatmap, PositionLayerGridMarksPromptBoundaryAndFirstCell) {
  const HeatGrid g = position_layer_grid(testing::diverged_result());
  ASSERT_EQ(g.columns.size(), 16u);
  ASSERT_TRUE(g.boundary);
  EXPECT_EQ(*g.boundary, 8u);
  EXPECT_TRUE(g.cells[1][8].first);
  EXPECT_FALSE(g.cells[1][7].diverged);
  EXPECT_TRUE(g.cells[2][15].diverged);
  EXPECT_FALSE(g.cells[0][8].diverged) << "token_embd is upstream of the bug";
  int firsts = 0;
  for (const auto& row : g.cells)
    for (const auto& c : row) firsts += c.first ? 1 : 0;
  EXPECT_EQ(firsts, 1);
}

TEST(ReportsHeatmap, NonFiniteRowsMarkTheirCells) {
  const HeatGrid g = position_layer_grid(testing::hostile_result());
  EXPECT_FALSE(g.cells[2][2].nonfinite);
  EXPECT_TRUE(g.cells[2][3].nonfinite);
}

TEST(ReportsHeatmap, ColourScaleIsMonotoneAndClamped) {
  EXPECT_EQ(heat_colour(0), heat_colour(1e-30));
  EXPECT_EQ(heat_colour(1e-12), heat_colour(1e-13));
  EXPECT_EQ(heat_colour(1), heat_colour(1e3));
  EXPECT_NE(heat_colour(1e-6), heat_colour(1e-3));
  EXPECT_EQ(heat_colour(1).size(), 7u);
}

}  // namespace
}  // namespace tapdiff::reports
