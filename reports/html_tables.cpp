// The HTML report's heatmaps and per-tap table.
#include <fmt/format.h>

#include "reports/heatmap.hpp"
#include "reports/html_parts.hpp"
#include "reports/numbers.hpp"
#include "reports/summary.hpp"

namespace tapdiff::reports {
namespace {

std::string figure(const HeatGrid& grid, std::string_view caption) {
  return fmt::format(
      "<figure class=\"map\">\n<figcaption><b>{}</b> {}</figcaption>\n"
      "<div class=\"scroll\">{}</div>\n</figure>\n",
      h(grid.title), caption, heatmap_svg(grid));
}

std::string tap_row(const diff::DiffResult& r, const diff::TapComparison& t) {
  const TapStats s = tap_stats(t);
  const bool first = r.first && r.first->tap == t.full_name;
  const bool nonfinite = s.worst && row_nonfinite(*s.worst);
  std::string cls = s.first_diverged ? "diverged" : "";
  if (first) cls += " first";
  std::string status = s.first_diverged   ? "<span class=\"status bad\">diverged</span>"
                       : s.nonfinite_rows ? "<span class=\"status nonfinite\">NaN/Inf</span>"
                       : s.inherited      ? "<span class=\"status inherited\">inherited</span>"
                                          : "<span class=\"status ok\">ok</span>";
  if (first) status += " <span class=\"status first\">first</span>";
  return fmt::format(
      "<tr class=\"{}\"><td><code>{}</code></td><td class=\"r\">{}</td><td>{}</td><td>{}</td>"
      "<td class=\"num r\">{}</td><td class=\"num r\">{}</td><td class=\"num r\">{}{}</td>"
      "<td class=\"num r\">{}</td><td class=\"num r\">{}</td><td class=\"num r\">{}</td>"
      "<td class=\"num r\">{}</td><td class=\"num r\">{}</td><td class=\"num r\">{}</td></tr>\n",
      cls, h(t.full_name), t.layer >= 0 ? std::to_string(t.layer) : "\u2014", h(t.tap_class),
      status, s.first_diverged ? std::to_string(s.first_diverged->position) : "",
      s.diverged_rows > 0 ? fmt::format("{}/{}", s.diverged_rows, t.rows.size())
                          : fmt::format("0/{}", t.rows.size()),
      s.worst ? html_swatch(s.worst->nmse, nonfinite) : "", s.worst ? sci(s.worst->nmse) : "",
      s.worst ? std::to_string(s.worst->position) : "", sci(t.threshold_nmse),
      sci(t.min_passing_nmse), sci(s.max_abs), fixed(s.min_cosine, 6),
      s.nonfinite > 0 ? fmt::format("<span class=\"bad\">{}</span>", s.nonfinite) : "0");
}

constexpr std::string_view kTapHeader =
    "<table class=\"taps\"><thead><tr><th>tap</th><th class=\"r\">layer</th><th>class</th>"
    "<th>status</th><th class=\"r\">first</th><th class=\"r\">diverged</th>"
    "<th class=\"r\">worst NMSE</th><th class=\"r\">at</th><th class=\"r\">threshold</th>"
    "<th class=\"r\">min passing</th><th class=\"r\">max abs</th><th class=\"r\">min cosine</th>"
    "<th class=\"r\">non-finite</th></tr></thead><tbody>\n";

}  // namespace

std::string html_swatch(double nmse, bool nonfinite) {
  if (nonfinite) return "<span class=\"swatch nonfinite\"></span>";
  return fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>", heat_colour(nmse));
}

std::string html_heatmaps(const diff::DiffResult& r) {
  if (r.taps.empty()) return "";
  std::string out = "<section class=\"card\" id=\"heatmaps\">\n<h2>Where the error is</h2>\n";
  out += "<div class=\"legend-row\">" + heatmap_legend_svg() + "</div>\n";
  out += "<div class=\"maps\">\n";
  out += figure(layer_tap_grid(r),
                "Read like the forward pass: left to right, top to bottom. "
                "Each cell is one tap at its worst position.");
  out += figure(position_layer_grid(r),
                "Each cell is the worst tap of a layer at one position; "
                "a bug that starts at a position lights up a column.");
  return out + "</div>\n</section>\n";
}

std::string html_taps(const diff::DiffResult& r, const RenderOptions& o) {
  if (r.taps.empty()) return "";
  const TapCounts counts = count_taps(r);
  const TapSelection sel = select_taps(r, o.worst_passing_taps, o.max_table_rows);
  std::string out = fmt::format(
      "<section class=\"card\" id=\"taps\">\n<h2>Taps <span class=\"count\">"
      "{} of {} diverged</span></h2>\n",
      counts.diverged, counts.taps);
  out +=
      "<p class=\"quiet\">Diverged taps, then the passing taps closest to their threshold. "
      "<i>min passing</i> is the smallest NMSE threshold under which the tap would have "
      "passed.</p>\n<div class=\"scroll\">";
  out += kTapHeader;
  for (const auto* t : sel.taps) out += tap_row(r, *t);
  out += "</tbody></table></div>\n";
  if (sel.omitted_diverged > 0)
    out += fmt::format("<p class=\"quiet\">{} more diverged taps are in the full table.</p>\n",
                       sel.omitted_diverged);
  out += fmt::format(
      "<details><summary>All {} taps in execution order</summary>\n<div class=\"scroll\">",
      r.taps.size());
  out += kTapHeader;
  for (const auto& t : r.taps) out += tap_row(r, t);
  return out + "</tbody></table></div>\n</details>\n</section>\n";
}

}  // namespace tapdiff::reports
