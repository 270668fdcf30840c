// Markdown for a PR comment or a CI job summary (GitHub-flavoured): the verdict and the first
// divergence stay visible, the per-tap table folds into <details>.
#include <fmt/format.h>

#include "reports/escape.hpp"
#include "reports/numbers.hpp"
#include "reports/renderers.hpp"
#include "reports/summary.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff::reports {
namespace {

std::string verdict_mark(diff::Verdict v) {
  switch (v) {
    case diff::Verdict::pass: return "\u2705";
    case diff::Verdict::diverged: return "\u274c";
    case diff::Verdict::incompatible: return "\u26a0\ufe0f";
  }
  return "";
}

std::string side_line(std::string_view label, const diff::TraceSide& side) {
  std::string line = fmt::format("**{}** {}", label, md_escape(side_summary(side)));
  if (!side.path.empty()) line += " (" + md_code(side.path) + ")";
  return line;
}

void write_header(std::string& out, const diff::DiffResult& r) {
  out += fmt::format("## {} tapdiff: {} \u2014 {}\n\n", verdict_mark(r.verdict),
                     diff::verdict_text(r.verdict), md_escape(headline(r)));
  const TapCounts counts = count_taps(r);
  out += side_line("expected", r.expected) + " \u00b7 " + side_line("actual", r.actual) + "  \n";
  out += fmt::format("profile {} \u00b7 {} positions compared \u00b7 {} taps, {} diverged\n\n",
                     md_code(r.profile.empty() ? "default" : r.profile), counts.positions,
                     counts.taps, counts.diverged);
}

void write_first(std::string& out, const diff::DiffResult& r) {
  if (!r.first && !r.diagnosis) return;
  out += "| | |\n|---|---|\n";
  const auto row = [&](std::string_view k, const std::string& v) {
    out += fmt::format("| {} | {} |\n", k, v);
  };
  if (r.first) {
    const auto& f = *r.first;
    const diff::TapComparison* tap = find_tap(r, f.tap);
    std::string where = f.layer >= 0 ? fmt::format("layer {}", f.layer) : "global";
    if (tap && !tap->tap_class.empty()) where += ", class " + md_escape(tap->tap_class);
    row("**first divergence**", md_code(f.tap) + " (" + where + ")");
  }
  if (r.first && r.first->shape) {
    row("row shape", shape_string(r.first->expected_shape) + " expected, " + shape_string(r.first->actual_shape) +
                         " actual");
  } else if (r.first) {
    const auto& f = *r.first;
    const auto& m = f.metrics;
    const diff::TapComparison* tap = find_tap(r, f.tap);
    row("position", fmt::format("{} \u2014 {} ({} diverged)", f.position,
                                diff::position_pattern_text(f.pattern, f.position), diverged_count(r, f)));
    std::string nmse = sci(m.nmse);
    if (tap) nmse += " (threshold " + sci(tap->threshold_nmse) + ")";
    if (tap && !tap->inputs_recorded) {
      nmse += ", inputs not recorded";
    } else {
      nmse += ", inputs " + sci(m.input_nmse);
      if (const std::string jump = jump_text(m.nmse, m.input_nmse); !jump.empty()) nmse += " " + jump;
    }
    row("NMSE", nmse);
    row("max abs / rel", sci(m.max_abs) + " / " + sci(m.max_rel));
    row("cosine", cosine_text(m.cosine));
    if (m.worst_index >= 0)
      row("worst element",
          fmt::format("{}: expected {}, actual {}",
                      md_escape(element_location(tap, m.worst_index, model_dims(r))),
                      sci(m.worst_expected, 4), sci(m.worst_actual, 4)));
    if (m.nonfinite > 0 || m.nonfinite_expected > 0)
      row("non-finite",
          fmt::format("**{}** in actual, {} in expected", m.nonfinite, m.nonfinite_expected));
  }
  if (r.diagnosis) {
    const auto& d = *r.diagnosis;
    row("**diagnosis**", "**" + md_escape(d.bug_class) + "**" +
                             (d.variant.empty() ? "" : " \u2014 " + md_escape(d.variant)));
    row("evidence", diff::evidence_text(d.evidence));
    row("residual", d.variant.empty() ? "no replayed hypothesis reproduces the actual values (correct computation: " +
                                            baseline_text(d) + ")"
                    : d.replayed() ? sci(d.residual) + " (correct computation: " + baseline_text(d) + ")"
                                   : "not replayed (correct computation: " + baseline_text(d) + ")");
    if (!d.ties.empty()) {
      std::string list;
      for (const auto& t : d.ties)
        list += (list.empty() ? "" : "; ") + md_escape(t.variant) + " (" + md_escape(t.bug_class) + ") " + sci(t.residual);
      row("tied", list);
      row("to separate", md_escape(d.separating_experiment));
    }
    if (!d.runners_up.empty()) {
      std::string list;
      for (const auto& h : d.runners_up)
        list += (list.empty() ? "" : "; ") + md_escape(h.variant) + " " + sci(h.residual);
      row("runners-up", list);
    }
    if (!d.signatures.empty()) {
      std::string list;
      for (const auto& s : d.signatures) list += (list.empty() ? "" : " \u00b7 ") + md_escape(s);
      row("signatures", list);
    }
  }
  out += "\n";
  if (r.diagnosis && !r.diagnosis->explanation.empty())
    out += "> " + md_escape(r.diagnosis->explanation) + "\n\n";
}

// Every independent root, one table row each (the lockstep table).
void write_roots(std::string& out, const diff::DiffResult& r) {
  if (!show_roots(r)) return;
  out += fmt::format("**Findings: {} independent root{}** ({})\n\n", r.roots.size(),
                     r.roots.size() == 1 ? "" : "s", md_escape(mode_summary(r)));
  if (r.roots.empty()) return;
  out += "| # | tap | layer | class | positions | NMSE | variant | also |\n"
         "|---:|---|---:|---|---|---:|---|---|\n";
  for (std::size_t i = 0; i < r.roots.size(); ++i) {
    const auto& root = r.roots[i];
    const std::string variant = root.diagnosis ? root.diagnosis->variant : "";
    out += fmt::format("| {} | {} | {} | **{}** | {} | {} | {} | {} |\n", i + 1, md_code(root.at.tap),
                       root.at.layer >= 0 ? std::to_string(root.at.layer) : "\u2014",
                       md_escape(root_class_with_evidence(root)), md_escape(root_positions(root)),
                       root_measured(root) ? sci(root.at.metrics.nmse) : "\u2014", md_escape(variant),
                       md_escape(root_explained(root)));
  }
  out += "\n";
}

void write_findings(std::string& out, const diff::DiffResult& r) {
  if (r.findings.empty()) return;
  const std::vector<diff::StructuralFinding> findings = findings_to_read(r);
  out += fmt::format("**Structural findings ({})**\n\n", findings.size());
  for (const auto& f : findings)
    out += fmt::format("- {}{}: {}\n", md_code(f.kind), f.tap.empty() ? "" : " " + md_code(f.tap),
                       md_escape(f.detail));
  out += "\n";
}

void write_taps(std::string& out, const diff::DiffResult& r, const RenderOptions& o) {
  if (r.taps.empty()) return;
  const TapCounts counts = count_taps(r);
  const TapSelection sel = select_taps(r, o.worst_passing_taps, o.max_table_rows);
  out += fmt::format("<details><summary>Per-tap comparison: {} of {} taps diverged</summary>\n\n",
                     counts.diverged, counts.taps);
  out +=
      "| tap | class | status | first diverged | worst NMSE | at | max abs | min cosine | "
      "threshold | min passing |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto* t : sel.taps) {
    const TapStats s = tap_stats(*t);
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_code(t->full_name),
        md_escape(t->tap_class), s.first_diverged   ? "\u274c diverged"
        : s.nonfinite_rows ? "\u26a0\ufe0f NaN/Inf"
        : s.inherited      ? "inherited"
                           : "ok",
        s.first_diverged ? std::to_string(s.first_diverged->position) : "",
        s.worst ? sci(s.worst->nmse) : "", s.worst ? std::to_string(s.worst->position) : "",
        sci(s.max_abs), fixed(s.min_cosine, 4), sci(t->threshold_nmse), sci(t->min_passing_nmse));
  }
  const std::size_t hidden = r.taps.size() - sel.taps.size();
  if (hidden > 0)
    out += fmt::format("\n{} more taps ({} diverged) are listed in the JSON and HTML reports.\n",
                       hidden, sel.omitted_diverged);
  out += "\n</details>\n\n";
}

void write_logits(std::string& out, const diff::DiffResult& r, const RenderOptions& o) {
  if (!r.logits) return;
  const auto& l = *r.logits;
  out += fmt::format(
      "**Logits** over {} positions: KL mean {} \u00b1 {}, max {} \u00b7 same top "
      "token {} \u00b7 mean top-5 overlap {} \u00b7 ",
      l.n_positions, sci(l.kl_mean, 3), sci(l.kl_stderr, 3), sci(l.kl_max, 3),
      percent(l.same_top1_rate), fixed(l.mean_top5_overlap, 2));
  out += l.first_greedy_difference ? fmt::format("**first greedy difference at position {}**\n\n",
                                                 *l.first_greedy_difference)
                                   : std::string("greedy choices identical\n\n");
  if (!l.kl_percentiles.empty()) {
    std::string head = "|", rule = "|", values = "|";
    for (const auto& [p, v] : l.kl_percentiles) {
      head += fmt::format(" KL {:g}% |", p);
      rule += "---:|";
      values += " " + sci(v) + " |";
    }
    out += head + "\n" + rule + "\n" + values + "\n\n";
  }
  if (l.positions.empty()) return;
  out +=
      "<details><summary>Logits per position</summary>\n\n"
      "| position | KL | top-1 | top-5 overlap | expected top-1 | actual top-1 |\n"
      "|---:|---:|---|---:|---:|---:|\n";
  int shown = 0;
  for (const auto& p : l.positions) {
    if (shown++ >= o.max_logit_positions) break;
    const auto top = [](const auto& list) {
      return list.empty()
                 ? std::string("")
                 : fmt::format("{} ({})", list.front().first, fixed(list.front().second, 2));
    };
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", p.position, sci(p.kl),
                       p.same_top1 ? "same" : "\u274c differs", p.top5_overlap, top(p.top_expected),
                       top(p.top_actual));
  }
  out += "\n</details>\n\n";
}

}  // namespace

std::string render_markdown(const diff::DiffResult& result, const RenderOptions& options) {
  std::string out;
  write_header(out, result);
  write_roots(out, result);
  write_first(out, result);
  write_findings(out, result);
  write_taps(out, result, options);
  write_logits(out, result, options);
  return out;
}

}  // namespace tapdiff::reports
