// Self-contained HTML report: one file, inline CSS and SVG, no scripts and no network (a
// Content-Security-Policy forbids loading anything), readable offline and as a CI artifact.
#include <fmt/format.h>

#include "reports/html_parts.hpp"
#include "reports/renderers.hpp"
#include "reports/summary.hpp"

namespace tapdiff::reports {

std::string render_html(const diff::DiffResult& r, const RenderOptions& options) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>tapdiff {} \u2014 {}</title>\n", diff::verdict_text(r.verdict),
                     h(headline(r)));
  out += "<style>";
  out += kHtmlStyle;
  out += "</style>\n</head>\n<body>\n<main>\n";
  out +=
      "<header class=\"top\"><span class=\"brand\">tapdiff</span><span class=\"what\">"
      "divergence report \u00b7 expected vs actual</span></header>\n";
  out += html_banner(r);
  out += html_roots(r);
  if (r.first || r.diagnosis)
    out += "<div class=\"pair\">\n" + html_first_divergence(r) + html_diagnosis(r) + "</div>\n";
  out += html_findings(r);
  out += html_heatmaps(r);
  out += html_taps(r, options);
  out += html_logits(r, options);
  out += html_metadata(r);
  out +=
      "<footer>tapdiff report \u00b7 a = expected, b = actual \u00b7 NMSE = \u03a3(b\u2212a)\u00b2 "
      "/ "
      "\u03a3a\u00b2 per tap and position \u00b7 hover a heatmap cell for its numbers</footer>\n";
  out += "</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace tapdiff::reports
