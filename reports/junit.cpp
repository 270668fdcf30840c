// JUnit XML for CI systems: one testcase per tap class that was compared, failing when any of
// its taps diverged, one failing testcase per independent root (all and lockstep modes, or a
// shape root), plus one testcase for the overall verdict.
#include <fmt/format.h>

#include "reports/escape.hpp"
#include "reports/numbers.hpp"
#include "reports/renderers.hpp"
#include "reports/summary.hpp"

namespace tapdiff::reports {
namespace {

struct Case {
  std::string classname, name, failure_type, message, body;
};

std::string divergence_message(const diff::DiffResult& r, const diff::TapComparison& tap) {
  const TapStats s = tap_stats(tap);
  const diff::RowMetrics& m = *s.first_diverged;
  std::string text = fmt::format(
      "{} diverged at position {}: nmse {} (threshold {}), max abs {}, "
      "cosine {}",
      tap.full_name, m.position, sci(m.nmse), sci(tap.threshold_nmse), sci(m.max_abs),
      cosine_text(m.cosine));
  if (m.nonfinite > 0) text += fmt::format(", {} non-finite values", m.nonfinite);
  if (r.first && r.first->tap == tap.full_name)
    text += fmt::format(" ({}; first divergence of the run)",
                        diff::position_pattern_text(r.first->pattern, r.first->position));
  else if (r.first)
    text += fmt::format(" (downstream of the first divergence, {} at position {})", r.first->tap,
                        r.first->position);
  return text;
}

Case class_case(const diff::DiffResult& r, const ClassSummary& c) {
  Case tc{"tapdiff.taps", c.tap_class, "", "", ""};
  if (!c.first_diverged) return tc;
  tc.failure_type = "divergence";
  tc.message = divergence_message(r, *c.first_diverged) +
               fmt::format("; {} of {} {} taps diverged", c.diverged, c.taps, c.tap_class);
  for (const auto& tap : r.taps) {
    if ((tap.tap_class.empty() ? "unclassified" : tap.tap_class) != c.tap_class) continue;
    const TapStats s = tap_stats(tap);
    if (!s.first_diverged) continue;
    tc.body += fmt::format(
        "{}: first diverged position {}, {} of {} positions, worst nmse {} at "
        "position {}\n",
        tap.full_name, s.first_diverged->position, s.diverged_rows, tap.rows.size(),
        sci(s.worst->nmse), s.worst->position);
  }
  return tc;
}

// One testcase per independent root, failing with its class (all and lockstep modes).
Case root_case(const diff::RootFinding& root, std::size_t index) {
  Case tc{"tapdiff.findings", fmt::format("{} {}", index + 1, root.at.tap), root_class(root), "", ""};
  tc.message = fmt::format("{} ({}): {}", root.at.tap, root_positions(root), root_class(root));
  if (root.diagnosis && !root.diagnosis->variant.empty()) tc.message += " \u2014 " + root.diagnosis->variant;
  if (root_measured(root))
    tc.message += fmt::format("; nmse {} at position {}", sci(root.at.metrics.nmse), root.at.position);
  if (root.diagnosis) tc.body = root.diagnosis->explanation + "\n";
  if (!root.explained.empty()) tc.body += "also: " + root_explained(root) + "\n";
  return tc;
}

Case verdict_case(const diff::DiffResult& r) {
  Case tc{"tapdiff", "verdict", "", "", ""};
  if (r.verdict == diff::Verdict::pass) return tc;
  tc.failure_type = r.verdict == diff::Verdict::diverged ? "diverged" : "incompatible";
  tc.message = diff::verdict_text(r.verdict) + ": " + headline(r);
  if (r.diagnosis) {
    tc.message += "; diagnosis " + class_with_evidence(*r.diagnosis);
    if (!r.diagnosis->variant.empty()) tc.message += " (" + r.diagnosis->variant + ")";
  }
  tc.body = render_text(r, RenderOptions{});
  return tc;
}

std::string property(std::string_view name, std::string_view value) {
  return fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", xml_attr(name),
                     xml_attr(value));
}

}  // namespace

std::string render_junit(const diff::DiffResult& r, const RenderOptions&) {
  std::vector<Case> cases;
  for (const auto& c : class_summaries(r)) cases.push_back(class_case(r, c));
  if (show_roots(r))
    for (std::size_t i = 0; i < r.roots.size(); ++i) cases.push_back(root_case(r.roots[i], i));
  cases.push_back(verdict_case(r));
  std::size_t failures = 0;
  for (const auto& tc : cases)
    if (!tc.failure_type.empty()) ++failures;

  const std::string counts = fmt::format(
      "tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"0\"", cases.size(), failures);
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites name=\"tapdiff\" " + counts + ">\n";
  out += "  <testsuite name=\"tapdiff\" " + counts + ">\n    <properties>\n";
  out += property("verdict", diff::verdict_text(r.verdict));
  out += property("profile", r.profile);
  out += property("expected", r.expected.path);
  out += property("expected.summary", side_summary(r.expected));
  out += property("actual", r.actual.path);
  out += property("actual.summary", side_summary(r.actual));
  out += property("compared_positions", std::to_string(r.compared_positions));
  out += property("positions_with_a_row_compared", std::to_string(count_taps(r).positions));
  out += "    </properties>\n";
  for (const auto& tc : cases) {
    out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\"",
                       xml_attr(tc.classname), xml_attr(tc.name));
    if (tc.failure_type.empty()) {
      out += "/>\n";
      continue;
    }
    out +=
        fmt::format(">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>\n",
                    xml_attr(tc.failure_type), xml_attr(tc.message), xml_escape(tc.body));
  }
  if (!r.findings.empty()) {
    std::string findings;
    for (const auto& f : r.findings)
      findings += f.kind + (f.tap.empty() ? "" : " " + f.tap) + ": " + f.detail + "\n";
    out += "    <system-out>" + xml_escape(findings) + "</system-out>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace tapdiff::reports
