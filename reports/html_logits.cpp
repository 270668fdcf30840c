// The HTML report's logits section: llama.cpp-style KL summary, KL per position, and the top
// tokens of both traces side by side.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "reports/html_parts.hpp"
#include "reports/numbers.hpp"

namespace tapdiff::reports {
namespace {

using Top = std::vector<std::pair<int, float>>;

std::string tile(std::string_view label, const std::string& value, std::string_view cls = "") {
  return fmt::format(
      "<div class=\"tile {}\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>", cls, value,
      label);
}

bool holds(const Top& list, int token) {
  return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == token; });
}

std::string chips(const Top& list, const Top& other) {
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::string cls = "tok";
    if (i == 0) cls += " top1";
    if (!holds(other, list[i].first)) cls += " only";
    out += fmt::format("<span class=\"{}\">{}<small>{}</small></span>", cls, list[i].first,
                       fixed(list[i].second, 2));
  }
  return out;
}

// KL per position on a log scale; bars where the top token differs are red.
std::string kl_chart(const diff::LogitsSummary& l) {
  constexpr double w = 720, plot_h = 120, left = 44, top = 8, bottom = 30;
  const auto n = static_cast<double>(l.positions.size());
  double hi = 0;
  for (const auto& p : l.positions)
    if (std::isfinite(p.kl) && p.kl > 0) hi = std::max(hi, std::ceil(std::log10(p.kl)));
  const double lo = std::min(-8.0, hi - 8);
  const double bar_w = std::min(24.0, (w - left - 8) / n);
  const auto y_of = [&](double e) { return top + plot_h * (hi - e) / (hi - lo); };
  std::string s = fmt::format(
      "<svg class=\"klchart\" role=\"img\" aria-label=\"KL divergence per "
      "position\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} "
      "{1:.0f}\">",
      left + bar_w * n + 8, top + plot_h + bottom);
  for (double e = hi; e >= lo; e -= 2)
    s += fmt::format(
        "<line class=\"gridline\" x1=\"{0}\" x2=\"{1:.1f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\"/>"
        "<text class=\"tick\" x=\"{3}\" y=\"{2:.1f}\" text-anchor=\"end\" "
        "dominant-baseline=\"central\">{4}</text>",
        left, left + bar_w * n, y_of(e), left - 4, power_of_ten(static_cast<int>(e)));
  const std::size_t step =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(28 / bar_w)));
  for (std::size_t i = 0; i < l.positions.size(); ++i) {
    const auto& p = l.positions[i];
    const double x = left + bar_w * static_cast<double>(i);
    const double e =
        std::isfinite(p.kl) ? (p.kl > 0 ? std::clamp(std::log10(p.kl), lo, hi) : lo) : hi;
    s += fmt::format(
        "<rect class=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\">"
        "<title>position {}: KL {}{}</title></rect>",
        p.same_top1 ? "klbar" : "klbar differs", x + 1, y_of(e), std::max(bar_w - 2, 1.0),
        top + plot_h - y_of(e), p.position, sci(p.kl, 3), p.same_top1 ? "" : ", top token differs");
    if (i % step == 0)
      s += fmt::format(
          "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>",
          x + bar_w / 2, top + plot_h + 14, p.position);
  }
  s += fmt::format(
      "<text class=\"axis\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">position</text>",
      left + bar_w * n / 2, top + plot_h + 27);
  return s + "</svg>";
}

}  // namespace

std::string html_logits(const diff::DiffResult& r, const RenderOptions& o) {
  if (!r.logits) return "";
  const auto& l = *r.logits;
  std::string out =
      "<section class=\"card\" id=\"logits\">\n<h2>Logits <span class=\"count\">KL(expected "
      "\u2016 actual) over " +
      std::to_string(l.n_positions) + " positions</span></h2>\n";
  out += "<div class=\"tiles\">";
  out += tile("KL mean \u00b1 stderr",
              sci(l.kl_mean, 3) + " <small>\u00b1 " + sci(l.kl_stderr, 2) + "</small>");
  out += tile("KL max", sci(l.kl_max, 3));
  out += tile("same top token", percent(l.same_top1_rate), l.same_top1_rate < 1 ? "warn" : "");
  out += tile("mean top-5 overlap", fixed(l.mean_top5_overlap, 2));
  out += tile("first greedy difference",
              l.first_greedy_difference ? "position " + std::to_string(*l.first_greedy_difference)
                                        : std::string("none"),
              l.first_greedy_difference ? "bad" : "");
  out += "</div>\n";
  out += "<div class=\"kl-row\">";
  if (l.positions.size() >= 2)
    out += "<figure>" + kl_chart(l) +
           "<figcaption>KL per position (log scale); red where the top token differs</figcaption>"
           "</figure>";
  if (!l.kl_percentiles.empty()) {
    out +=
        "<table class=\"percentiles\"><thead><tr><th>percentile</th><th class=\"r\">KL</th>"
        "</tr></thead><tbody>";
    for (const auto& [p, v] : l.kl_percentiles)
      out += fmt::format("<tr><th scope=\"row\">{:g}%</th><td class=\"num r\">{}</td></tr>", p,
                         sci(v));
    out += "</tbody></table>";
  }
  out += "</div>\n";
  if (l.positions.empty()) return out + "</section>\n";

  const auto& tokens = r.expected.metadata.tokens;
  out +=
      "<div class=\"scroll\"><table class=\"logits\"><thead><tr><th class=\"r\">position</th>"
      "<th class=\"r\">next token</th><th class=\"r\">KL</th><th>top-1</th>"
      "<th class=\"r\">top-5 overlap</th><th>expected: top tokens (logit)</th>"
      "<th>actual: top tokens (logit)</th></tr></thead><tbody>\n";
  int shown = 0;
  for (const auto& p : l.positions) {
    if (shown++ >= o.max_logit_positions) break;
    const auto next = static_cast<std::size_t>(p.position + 1);
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"num r\">{}</td><td class=\"num r\">{}</td>"
        "<td class=\"num r\">{}</td><td>{}</td><td class=\"num r\">{}</td><td "
        "class=\"toks\">{}</td>"
        "<td class=\"toks\">{}</td></tr>\n",
        p.same_top1 ? "" : "differs", p.position,
        p.position >= 0 && next < tokens.size() ? std::to_string(tokens[next]) : "", sci(p.kl, 2),
        p.same_top1 ? "<span class=\"status ok\">same</span>"
                    : "<span class=\"status bad\">differs</span>",
        p.top5_overlap, chips(p.top_expected, p.top_actual), chips(p.top_actual, p.top_expected));
  }
  out +=
      "</tbody></table></div>\n<p class=\"key\">Tokens by id with their logit; bold: the top "
      "token; dashed: missing from the other trace's list. <i>next token</i> is the token the "
      "expected trace holds at the following position.</p>\n";
  if (static_cast<int>(l.positions.size()) > o.max_logit_positions)
    out += fmt::format("<p class=\"quiet\">{} more positions are in the JSON report.</p>\n",
                       l.positions.size() - static_cast<std::size_t>(o.max_logit_positions));
  return out + "</section>\n";
}

}  // namespace tapdiff::reports
