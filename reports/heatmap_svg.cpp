// Inline SVG for the heatmaps: sized from the grid, labelled axes, tooltips as <title>.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "reports/escape.hpp"
#include "reports/heatmap.hpp"
#include "reports/numbers.hpp"

namespace tapdiff::reports {
namespace {

struct Rgb {
  double r, g, b;
};

// viridis at nine evenly spaced points: perceptually uniform, readable without colour vision.
constexpr std::array<Rgb, 9> kViridis{{{68, 1, 84},
                                       {71, 44, 122},
                                       {59, 81, 139},
                                       {44, 113, 142},
                                       {33, 144, 141},
                                       {39, 173, 129},
                                       {92, 200, 99},
                                       {170, 220, 50},
                                       {253, 231, 37}}};

std::string colour_at(double t) {
  t = std::clamp(t, 0.0, 1.0) * (kViridis.size() - 1);
  const auto i = std::min(static_cast<std::size_t>(t), kViridis.size() - 2);
  const double f = t - static_cast<double>(i);
  const auto mix = [&](double a, double b) {
    return static_cast<int>(std::lround(a + (b - a) * f));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(kViridis[i].r, kViridis[i + 1].r),
                     mix(kViridis[i].g, kViridis[i + 1].g), mix(kViridis[i].b, kViridis[i + 1].b));
}

constexpr double kCharWidth = 6.4;  // px per character of an 11px label, a safe overestimate
constexpr int kMaxGridWidth = 1100;

struct Geometry {
  double cell_w, cell_h, left, top, width, height;
};

Geometry layout(const HeatGrid& g) {
  const auto n_cols = static_cast<double>(std::max<std::size_t>(g.columns.size(), 1));
  const auto n_rows = static_cast<double>(std::max<std::size_t>(g.rows.size(), 1));
  Geometry geo{};
  geo.cell_w = std::clamp(std::floor(kMaxGridWidth / n_cols), 4.0, 22.0);
  geo.cell_h = n_rows <= 40 ? 18.0 : std::max(6.0, std::floor(720 / n_rows));
  std::size_t row_chars = 0, col_chars = 0;
  for (const auto& r : g.rows) row_chars = std::max(row_chars, display_width(r));
  for (const auto& c : g.columns) col_chars = std::max(col_chars, display_width(c));
  geo.left = 34 + kCharWidth * static_cast<double>(row_chars);
  // Slanted labels (45°) need their length times sin 45° above the grid.
  geo.top = g.rotate_columns ? 16 + 0.72 * kCharWidth * static_cast<double>(col_chars) : 22;
  const double bottom = g.rotate_columns ? 30 : 40;
  geo.width = geo.left + geo.cell_w * n_cols + (g.rotate_columns ? 60 : 16);
  geo.height = geo.top + geo.cell_h * n_rows + bottom;
  return geo;
}

// Every k-th position label so that labels never overlap: k in 1, 2, 5, 10, 20, 50, ...
std::size_t label_step(double cell_w, std::size_t widest) {
  const double need = kCharWidth * static_cast<double>(widest) + 6;
  for (std::size_t k = 1;; k *= 10)
    for (std::size_t m : {1, 2, 5})
      if (cell_w * static_cast<double>(k * m) >= need) return k * m;
}

std::string defs(const std::string& id) {
  return fmt::format(
      "<defs><pattern id=\"{0}-nonfinite\" width=\"6\" height=\"6\" "
      "patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#1f1f1f\"/>"
      "<rect width=\"3\" height=\"6\" fill=\"#ff4f8b\"/></pattern></defs>",
      id);
}

}  // namespace

std::string heat_colour(double nmse) {
  if (!(nmse > 0)) return colour_at(0);
  return colour_at((std::log10(nmse) - kScaleMin) / (kScaleMax - kScaleMin));
}

namespace {

std::string axes(const HeatGrid& g, const Geometry& geo) {
  const double grid_w = geo.cell_w * static_cast<double>(g.columns.size());
  const double grid_h = geo.cell_h * static_cast<double>(g.rows.size());
  std::string s = fmt::format(
      "<rect class=\"grid-bg\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>",
      geo.left, geo.top, grid_w, grid_h);
  for (std::size_t r = 0; r < g.rows.size(); ++r)
    s += fmt::format(
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" "
        "dominant-baseline=\"central\">{}</text>",
        geo.left - 6, geo.top + geo.cell_h * (static_cast<double>(r) + 0.5), xml_escape(g.rows[r]));
  s += fmt::format(
      "<text class=\"axis\" transform=\"translate(12 {:.1f}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>",
      geo.top + grid_h / 2, xml_escape(g.y_label));
  // Column labels: slanted above the grid, or every k-th below it.
  std::size_t widest = 0;
  for (const auto& c : g.columns) widest = std::max(widest, display_width(c));
  const std::size_t step = g.rotate_columns ? 1 : label_step(geo.cell_w, widest);
  for (std::size_t c = 0; c < g.columns.size(); c += step) {
    const double x = geo.left + geo.cell_w * (static_cast<double>(c) + 0.5);
    if (g.rotate_columns)
      s += fmt::format(
          "<text class=\"tick\" transform=\"translate({:.1f} {:.1f}) rotate(-45)\">{}</text>",
          x + 3, geo.top - 5, xml_escape(g.columns[c]));
    else
      s += fmt::format(
          "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", x,
          geo.top + grid_h + 14, xml_escape(g.columns[c]));
  }
  const double axis_y = geo.top + grid_h + (g.rotate_columns ? 20 : 32);
  s +=
      fmt::format("<text class=\"axis\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>",
                  geo.left + grid_w / 2, axis_y, xml_escape(g.x_label));
  return s;
}

// Cells, then the markers on top so that an outline is never covered by a neighbour.
std::string cells(const HeatGrid& g, const Geometry& geo) {
  std::string s, markers;
  const double radius = std::min(geo.cell_w, geo.cell_h) * 0.15;
  for (std::size_t r = 0; r < g.rows.size(); ++r) {
    for (std::size_t c = 0; c < g.columns.size(); ++c) {
      const HeatCell& cell = g.cells[r][c];
      if (!cell.present) continue;
      const double x = geo.left + geo.cell_w * static_cast<double>(c);
      const double y = geo.top + geo.cell_h * static_cast<double>(r);
      const std::string fill =
          cell.nonfinite ? fmt::format("url(#{}-nonfinite)", g.id) : heat_colour(cell.nmse);
      s += fmt::format(
          "<rect class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{}</title></rect>",
          x + 0.5, y + 0.5, geo.cell_w - 1, geo.cell_h - 1, fill, xml_escape(cell.tooltip));
      if (cell.diverged && !cell.nonfinite && radius >= 1.5)
        markers +=
            fmt::format("<circle class=\"diverged\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\"/>",
                        x + geo.cell_w / 2, y + geo.cell_h / 2, radius);
      if (cell.first)
        markers += fmt::format(
            "<rect class=\"first\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
            "height=\"{:.1f}\"><title>first divergence</title></rect>",
            x - 1, y - 1, geo.cell_w + 2, geo.cell_h + 2);
    }
  }
  return s + markers;
}

// A dashed line between the prompt and the generated positions.
std::string boundary(const HeatGrid& g, const Geometry& geo) {
  if (!g.boundary) return "";
  const double x = geo.left + geo.cell_w * static_cast<double>(*g.boundary);
  const double bottom = geo.top + geo.cell_h * static_cast<double>(g.rows.size()) + 2;
  return fmt::format(
      "<line class=\"boundary\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\"/>"
      "<text class=\"note\" x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">prompt</text>"
      "<text class=\"note\" x=\"{5:.1f}\" y=\"{4:.1f}\">generated</text>",
      x, geo.top - 4, bottom, x - 4, geo.top - 8, x + 4);
}

}  // namespace

std::string heatmap_svg(const HeatGrid& g) {
  const Geometry geo = layout(g);
  return fmt::format(
             "<svg class=\"heatmap\" id=\"{0}\" role=\"img\" aria-label=\"{1}\" "
             "width=\"{2:.0f}\" height=\"{3:.0f}\" viewBox=\"0 0 {2:.0f} {3:.0f}\">{4}",
             xml_attr(g.id), xml_attr(g.title), geo.width, geo.height, defs(g.id)) +
         axes(g, geo) + cells(g, geo) + boundary(g, geo) + "</svg>";
}

std::string heatmap_legend_svg() {
  constexpr double bar_x = 8, bar_w = 240, bar_y = 6, bar_h = 12;
  std::string s =
      "<svg class=\"legend\" role=\"img\" aria-label=\"colour scale: log10 NMSE\" "
      "width=\"660\" height=\"42\" viewBox=\"0 0 660 42\">";
  s += "<defs><linearGradient id=\"legend-scale\">";
  for (int i = 0; i <= 8; ++i)
    s += fmt::format("<stop offset=\"{:.3f}\" stop-color=\"{}\"/>", i / 8.0, colour_at(i / 8.0));
  s += "</linearGradient></defs>" + defs("legend");
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#legend-scale)\"/>", bar_x,
      bar_y, bar_w, bar_h);
  for (int e = static_cast<int>(kScaleMin); e <= static_cast<int>(kScaleMax); e += 3) {
    const double x = bar_x + bar_w * (e - kScaleMin) / (kScaleMax - kScaleMin);
    std::string label = power_of_ten(e);
    if (e == kScaleMin) label = "\u2264" + label;
    if (e == kScaleMax) label = "\u2265" + label;
    s += fmt::format(
        "<line class=\"tickmark\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>"
        "<text class=\"tick\" x=\"{0:.1f}\" y=\"36\" text-anchor=\"middle\">{3}</text>",
        x, bar_y + bar_h, bar_y + bar_h + 4, label);
  }
  double x = bar_x + bar_w + 28;
  const auto swatch = [&](const std::string& shape, std::string_view label) {
    s += shape +
         fmt::format(
             "<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" dominant-baseline=\"central\">{}</text>",
             x + 20, bar_y + bar_h / 2, label);
    x += 28 + kCharWidth * static_cast<double>(display_width(label));
  };
  swatch(fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"14\" height=\"{}\" "
                     "fill=\"url(#legend-nonfinite)\"/>",
                     x, bar_y, bar_h),
         "non-finite");
  swatch(fmt::format("<rect class=\"grid-bg\" x=\"{:.1f}\" y=\"{}\" width=\"14\" height=\"{}\"/>",
                     x, bar_y, bar_h),
         "not compared");
  swatch(fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"14\" height=\"{}\" fill=\"{}\"/>"
                     "<circle class=\"diverged\" cx=\"{:.1f}\" cy=\"{}\" r=\"3\"/>",
                     x, bar_y, bar_h, colour_at(0.9), x + 7, bar_y + bar_h / 2),
         "diverged");
  swatch(fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"14\" height=\"{}\" fill=\"{}\"/>"
                     "<rect class=\"first\" x=\"{:.1f}\" y=\"{}\" width=\"16\" height=\"{}\"/>",
                     x, bar_y, bar_h, colour_at(0.9), x - 1, bar_y - 1, bar_h + 2),
         "first divergence");
  return s + "</svg>";
}

}  // namespace tapdiff::reports
