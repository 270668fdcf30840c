// Heatmaps of log10 NMSE for the HTML report: the grids (what each cell summarises) and their
// inline SVG (no scripts: tooltips are SVG <title> elements).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff::reports {

struct HeatCell {
  bool present = false;    // some compared row falls in this cell
  double nmse = 0;         // the largest NMSE of those rows
  bool nonfinite = false;  // a row holds NaN/inf (or its NMSE is not finite)
  bool diverged = false;
  bool first = false;   // the run's first divergence
  std::string tooltip;  // plain text, several lines
};

struct HeatGrid {
  std::string id;  // prefix of the SVG's element ids, unique in the page
  std::string title;
  std::string x_label, y_label;
  bool rotate_columns = false;  // long column labels (tap names) are drawn slanted
  std::vector<std::string> columns, rows;
  std::vector<std::vector<HeatCell>> cells;  // [row][column]
  std::optional<std::size_t> boundary;       // first column of the generated positions
};

// Rows: "embed" (global taps before layer 0), layers, "head" (global taps after the layers).
// Columns: tap names in execution order. A cell is one tap; its value the worst position.
HeatGrid layer_tap_grid(const diff::DiffResult& result);
// Same rows; columns: positions. A cell is the worst tap of that row at that position.
HeatGrid position_layer_grid(const diff::DiffResult& result);

// The colour scale spans log10 NMSE from kScaleMin (and below) to kScaleMax (and above).
inline constexpr double kScaleMin = -12;
inline constexpr double kScaleMax = 0;
std::string heat_colour(double nmse);  // "#rrggbb"

std::string heatmap_svg(const HeatGrid& grid);
std::string heatmap_legend_svg();

}  // namespace tapdiff::reports
