// The top of the HTML report: verdict banner, first divergence, diagnosis, structural findings.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "reports/html_parts.hpp"
#include "reports/numbers.hpp"
#include "reports/summary.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff::reports {
namespace {

std::string verdict_class(diff::Verdict v) {
  switch (v) {
    case diff::Verdict::pass: return "pass";
    case diff::Verdict::diverged: return "diverged";
    case diff::Verdict::incompatible: return "incompatible";
  }
  return "";
}

std::string fact(std::string_view label, std::string_view value_html) {
  return fmt::format("<span class=\"fact\"><span class=\"k\">{}</span> {}</span>", label,
                     value_html);
}

std::string item(std::string_view label, std::string_view value_html) {
  return fmt::format("<dt>{}</dt><dd>{}</dd>\n", label, value_html);
}

// Residual bar on a log scale from 1e-16 (a reproduction to float64 round-off) to 1e+1.
std::string residual_bar(double residual, std::string_view kind) {
  double fraction = 1;
  if (std::isfinite(residual))
    fraction = residual > 0 ? std::clamp((std::log10(residual) + 16) / 17, 0.02, 1.0) : 0.02;
  return fmt::format("<span class=\"bar {}\"><span style=\"width:{:.1f}%\"></span></span>", kind,
                     100 * fraction);
}

}  // namespace

std::string html_banner(const diff::DiffResult& r) {
  const TapCounts counts = count_taps(r);
  std::string out =
      fmt::format("<section class=\"banner {}\" id=\"verdict\">\n", verdict_class(r.verdict));
  out += fmt::format("<div class=\"verdict\">{}</div>\n<div class=\"headline\">{}</div>\n",
                     diff::verdict_text(r.verdict), h(headline(r)));
  if (r.diagnosis) {
    std::string line = "<b>" + h(class_with_evidence(*r.diagnosis)) + "</b>";
    if (!r.diagnosis->variant.empty()) line += " \u2014 " + h(r.diagnosis->variant);
    out += "<div class=\"because\">" + line + "</div>\n";
  }
  out += "<div class=\"facts\">";
  out += fact("expected", h(side_summary(r.expected)));
  out += fact("actual", h(side_summary(r.actual)));
  out += fact("profile", h(r.profile.empty() ? "default" : r.profile));
  out += fact("positions", std::to_string(counts.positions));
  out += fact("taps", fmt::format("{} compared, {} diverged", counts.taps, counts.diverged));
  if (r.logits && r.logits->first_greedy_difference)
    out +=
        fact("greedy", fmt::format("differs from position {}", *r.logits->first_greedy_difference));
  out += "</div>\n</section>\n";
  return out;
}

std::string html_first_divergence(const diff::DiffResult& r) {
  std::string out = "<section class=\"card\" id=\"first-divergence\">\n<h2>First divergence</h2>\n";
  if (!r.first) {
    out += r.verdict == diff::Verdict::pass
               ? "<p class=\"quiet\">Every compared tap stayed within its tolerance.</p>\n"
               : "<p class=\"quiet\">No numeric divergence: see the structural findings.</p>\n";
    return out + "</section>\n";
  }
  const auto& f = *r.first;
  const auto& m = f.metrics;
  const diff::TapComparison* tap = find_tap(r, f.tap);
  if (f.shape) {
    out += fmt::format("<p class=\"where\"><code class=\"tap\">{}</code>: row shape <b>{}</b> expected, <b>{}</b> "
                       "actual</p>\n",
                       h(f.tap), h(shape_string(f.expected_shape)), h(shape_string(f.actual_shape)));
    return out + "</section>\n";
  }
  out += fmt::format("<p class=\"where\"><code class=\"tap\">{}</code> at position <b>{}</b></p>\n",
                     h(f.tap), f.position);
  out += "<dl class=\"kv\">\n";
  std::string where = f.layer >= 0 ? fmt::format("layer {}", f.layer) : "global tap";
  if (tap && !tap->tap_class.empty()) where += ", class " + h(tap->tap_class);
  out += item("tap", where);
  std::string positions = h(diff::position_pattern_text(f.pattern, f.position));
  positions += " <span class=\"quiet\">(" + h(diverged_count(r, f)) + ")</span>";
  out += item("positions", positions);
  std::string nmse =
      html_swatch(m.nmse, row_nonfinite(m)) + "<span class=\"num\">" + sci(m.nmse) + "</span>";
  if (tap) nmse += " <span class=\"quiet\">threshold " + sci(tap->threshold_nmse) + "</span>";
  out += item("NMSE", nmse);
  std::string inputs = "<span class=\"num\">" + sci(m.input_nmse) + "</span>";
  if (tap && !tap->inputs_recorded)
    inputs = "<span class=\"quiet\">not recorded</span>";
  else if (const std::string jump = jump_text(m.nmse, m.input_nmse); !jump.empty())
    inputs += " <span class=\"quiet\">error grew " + jump + " here</span>";
  out += item("inputs' NMSE", inputs);
  out += item("max abs / rel",
              "<span class=\"num\">" + sci(m.max_abs) + " / " + sci(m.max_rel) + "</span>");
  out += item("cosine", "<span class=\"num\">" + cosine_text(m.cosine) + "</span>");
  if (m.worst_index >= 0)
    out +=
        item("worst element",
             fmt::format("{} <span class=\"quiet\">expected</span> <span class=\"num\">{}</span> "
                         "<span class=\"quiet\">actual</span> <span class=\"num bad\">{}</span>",
                         h(element_location(tap, m.worst_index, model_dims(r))),
                         sci(m.worst_expected, 4), sci(m.worst_actual, 4)));
  if (m.nonfinite > 0 || m.nonfinite_expected > 0)
    out += item("non-finite", fmt::format("<span class=\"bad\">{} in actual</span>, {} in expected",
                                          m.nonfinite, m.nonfinite_expected));
  return out + "</dl>\n</section>\n";
}

std::string html_diagnosis(const diff::DiffResult& r) {
  std::string out = "<section class=\"card\" id=\"diagnosis\">\n";
  if (!r.diagnosis) {
    out += "<h2>Diagnosis</h2>\n<p class=\"quiet\">No diagnosis: nothing diverged.</p>\n";
    return out + "</section>\n";
  }
  const auto& d = *r.diagnosis;
  out += fmt::format("<h2>Diagnosis <span class=\"badge\">{}</span> <span class=\"quiet\">{}</span></h2>\n",
                     h(d.bug_class), h(diff::evidence_text(d.evidence)));
  if (!d.explanation.empty()) out += "<p class=\"explanation\">" + h(d.explanation) + "</p>\n";
  out +=
      "<table class=\"hypotheses\"><thead><tr><th>hypothesis replayed on the actual trace's "
      "inputs</th><th class=\"r\">residual NMSE vs actual</th><th></th></tr></thead><tbody>\n";
  const auto row = [&](std::string_view cls, const std::string& label, double residual) {
    out += fmt::format("<tr class=\"{}\"><td>{}</td><td class=\"num r\">{}</td><td>{}</td></tr>\n",
                       cls, label, sci(residual), residual_bar(residual, cls));
  };
  if (!d.variant.empty())
    row("best", "\u2713 " + h(d.variant), d.residual);
  else
    out +=
        "<tr><td colspan=\"3\" class=\"quiet\">no replayed hypothesis reproduces the actual "
        "values</td></tr>\n";
  for (std::size_t i = 1; i < d.ties.size(); ++i)
    row("best", "= " + h(d.ties[i].variant) + " (" + h(d.ties[i].bug_class) + ")", d.ties[i].residual);
  for (const auto& hyp : d.runners_up) row("runner", h(hyp.variant), hyp.residual);
  if (d.baseline_residual)
    row("baseline", "the correct computation", *d.baseline_residual);
  else
    out += "<tr><td colspan=\"3\" class=\"quiet\">this tap has no replay</td></tr>\n";
  out += "</tbody></table>\n";
  if (!d.separating_experiment.empty())
    out += "<p class=\"quiet\">To separate the tied hypotheses: " + h(d.separating_experiment) + ".</p>\n";
  if (!d.signatures.empty()) {
    out += "<div class=\"chips\"><span class=\"k\">signatures</span>";
    for (const auto& s : d.signatures) out += "<span class=\"chip\">" + h(s) + "</span>";
    out += "</div>\n";
  }
  return out + "</section>\n";
}

std::string html_roots(const diff::DiffResult& r) {
  if (!show_roots(r)) return "";
  std::string out = fmt::format(
      "<section class=\"card\" id=\"roots\">\n<h2>Findings <span class=\"count\">{}</span></h2>\n"
      "<p class=\"quiet\">{}</p>\n",
      r.roots.size(), h(mode_summary(r)));
  if (r.roots.empty()) return out + "</section>\n";
  out +=
      "<table><thead><tr><th>#</th><th>tap</th><th>layer</th><th>class</th><th>positions</th>"
      "<th>NMSE</th><th>variant</th><th>also</th></tr></thead><tbody>\n";
  for (std::size_t i = 0; i < r.roots.size(); ++i) {
    const auto& root = r.roots[i];
    out += fmt::format(
        "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td><span class=\"kind\">{}</span></td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        i + 1, h(root.at.tap), root.at.layer >= 0 ? std::to_string(root.at.layer) : "\u2014",
        h(root_class_with_evidence(root)), h(root_positions(root)), root_measured(root) ? sci(root.at.metrics.nmse) : "\u2014",
        root.diagnosis ? h(root.diagnosis->variant) : "", h(root_explained(root)));
  }
  return out + "</tbody></table>\n</section>\n";
}

std::string html_findings(const diff::DiffResult& r) {
  if (r.findings.empty()) return "";
  const std::vector<diff::StructuralFinding> findings = findings_to_read(r);
  std::string out = fmt::format(
      "<section class=\"card\" id=\"findings\">\n<h2>Structural findings "
      "<span class=\"count\">{}</span></h2>\n",
      findings.size());
  out += "<table><thead><tr><th>kind</th><th>tap</th><th>detail</th></tr></thead><tbody>\n";
  for (const auto& f : findings)
    out += fmt::format(
        "<tr><td><span class=\"kind\">{}</span></td><td><code>{}</code></td>"
        "<td>{}</td></tr>\n",
        h(f.kind), f.tap.empty() ? "\u2014" : h(f.tap), h(f.detail));
  return out + "</tbody></table>\n</section>\n";
}

}  // namespace tapdiff::reports
