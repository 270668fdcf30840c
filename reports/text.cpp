// Terminal report: verdict first, then the evidence in the order a developer acts on it.
#include <fmt/format.h>

#include <algorithm>

#include "reports/escape.hpp"
#include "reports/numbers.hpp"
#include "reports/renderers.hpp"
#include "reports/summary.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff::reports {
namespace {

constexpr std::size_t kLabel = 13;  // label column of the key/value sections
constexpr std::size_t kWidth = 100;

class Style {
 public:
  explicit Style(bool on) : on_(on) {}
  std::string bold(std::string_view s) const { return wrap(s, "1"); }
  std::string dim(std::string_view s) const { return wrap(s, "2"); }
  std::string red(std::string_view s) const { return wrap(s, "1;31"); }
  std::string green(std::string_view s) const { return wrap(s, "1;32"); }
  std::string yellow(std::string_view s) const { return wrap(s, "1;33"); }
  std::string cyan(std::string_view s) const { return wrap(s, "36"); }
  std::string verdict(diff::Verdict v) const {
    const std::string text = diff::verdict_text(v);
    if (v == diff::Verdict::pass) return green(text);
    return v == diff::Verdict::diverged ? red(text) : yellow(text);
  }

 private:
  std::string wrap(std::string_view s, std::string_view code) const {
    if (!on_) return std::string(s);
    return fmt::format("\x1b[{}m{}\x1b[0m", code, s);
  }
  bool on_;
};

// Greedy word wrap; continuation lines are indented by `indent` columns.
std::string wrap_words(std::string_view text, std::size_t indent) {
  std::string out, line;
  std::size_t start = 0;
  const std::size_t width = kWidth - indent;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    if (!line.empty() && display_width(line) + 1 + display_width(word) > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    if (!word.empty()) line += (line.empty() ? "" : " ") + std::string(word);
    start = end + 1;
  }
  return out + line;
}

struct Writer {
  const Style& style;
  std::string out;

  void heading(std::string_view title) { out += "\n" + style.bold(title) + "\n"; }
  void field(std::string_view label, std::string_view value) {
    out += "  " + style.dim(pad(label, kLabel)) + std::string(value) + "\n";
  }
};

void write_header(Writer& w, const diff::DiffResult& r) {
  const Style& s = w.style;
  w.out += s.verdict(r.verdict) + "  " + s.bold(terminal_safe(headline(r))) + "\n";
  if (r.diagnosis) {
    std::string line = terminal_safe(class_with_evidence(*r.diagnosis));
    if (!r.diagnosis->variant.empty()) line += ": " + terminal_safe(r.diagnosis->variant);
    w.out += std::string(display_width(diff::verdict_text(r.verdict)) + 2, ' ') + line + "\n";
  }
  w.out += "\n";
  const std::size_t width = std::max(display_width(terminal_safe(side_summary(r.expected))),
                                     display_width(terminal_safe(side_summary(r.actual))));
  const auto side = [&](std::string_view label, const diff::TraceSide& t) {
    w.field(label, pad(terminal_safe(side_summary(t)), width) + "  " + terminal_safe(t.path));
  };
  side("expected", r.expected);
  side("actual", r.actual);
  const TapCounts counts = count_taps(r);
  w.field("compared", fmt::format("{} positions, {} taps, {} diverged · profile {}",
                                  counts.positions, counts.taps, counts.diverged,
                                  r.profile.empty() ? "default" : terminal_safe(r.profile)));
}

void write_findings(Writer& w, const diff::DiffResult& r) {
  if (r.findings.empty()) return;
  const std::vector<diff::StructuralFinding> findings = findings_to_read(r);
  w.heading(fmt::format("structural findings ({})", findings.size()));
  std::size_t kind_width = 0, tap_width = 1;
  for (const auto& f : findings) {
    kind_width = std::max(kind_width, display_width(terminal_safe(f.kind)));
    tap_width = std::max(tap_width, display_width(terminal_safe(f.tap)));
  }
  for (const auto& f : findings) {
    const std::string tap = f.tap.empty() ? "-" : terminal_safe(f.tap);
    w.out += "  " + w.style.yellow(pad(terminal_safe(f.kind), kind_width)) + "  " +
             pad(tap, tap_width) + "  " +
             wrap_words(terminal_safe(f.detail), kind_width + tap_width + 6) + "\n";
  }
}

// The lockstep table: one line per independent root, the taps it explains under it.
void write_roots(Writer& w, const diff::DiffResult& r) {
  if (!show_roots(r)) return;
  w.heading(fmt::format("findings: {} independent root{} · {}", r.roots.size(),
                        r.roots.size() == 1 ? "" : "s", mode_summary(r)));
  if (r.roots.empty()) return;
  std::size_t tap_width = 3, class_width = 5, pos_width = 9;
  for (const auto& root : r.roots) {
    tap_width = std::max(tap_width, display_width(terminal_safe(root.at.tap)));
    class_width = std::max(class_width, display_width(terminal_safe(root_class_with_evidence(root))));
    pos_width = std::max(pos_width, display_width(root_positions(root)));
  }
  w.out += "  " + w.style.dim(fmt::format("{:>2}  {}  {:>5}  {}  {}  {:>9}  {}", "#", pad("tap", tap_width),
                                          "layer", pad("class", class_width), pad("positions", pos_width),
                                          "nmse", "variant")) +
           "\n";
  const std::string indent(2 + 2 + 2, ' ');
  for (std::size_t i = 0; i < r.roots.size(); ++i) {
    const auto& root = r.roots[i];
    const bool shape = root.kind == "shape", measured = root_measured(root);
    const std::string variant = root.diagnosis && !root.diagnosis->variant.empty() && !shape
                                    ? terminal_safe(root.diagnosis->variant)
                                    : (measured ? "no replayed hypothesis reproduces it" : "");
    w.out += fmt::format("  {:>2}  {}  {:>5}  {}  {}  {:>9}  {}\n", i + 1,
                         w.style.red(pad(terminal_safe(root.at.tap), tap_width)),
                         root.at.layer >= 0 ? std::to_string(root.at.layer) : "-",
                         w.style.cyan(pad(terminal_safe(root_class_with_evidence(root)), class_width)),
                         pad(root_positions(root), pos_width), measured ? sci(root.at.metrics.nmse) : "-",
                         variant);
    if (shape && root.diagnosis)
      w.out += indent + wrap_words(terminal_safe(root.diagnosis->variant), indent.size()) + "\n";
    if (!root.explained.empty())
      w.out += indent + w.style.dim(wrap_words("also " + terminal_safe(root_explained(root)), indent.size())) +
               "\n";
  }
}

void write_first(Writer& w, const diff::DiffResult& r) {
  if (!r.first) return;
  const auto& f = *r.first;
  const auto& m = f.metrics;
  const diff::TapComparison* tap = find_tap(r, f.tap);
  w.heading("first divergence");
  std::string where = f.layer >= 0 ? fmt::format("layer {}", f.layer) : "global";
  if (tap && !tap->tap_class.empty()) where += ", class " + terminal_safe(tap->tap_class);
  w.field("tap", w.style.red(terminal_safe(f.tap)) + "  (" + where + ")");
  if (f.shape) {
    w.field("row shape", fmt::format("{} in the expected trace, {} in the actual trace", shape_string(f.expected_shape),
                                     shape_string(f.actual_shape)));
    return;
  }
  w.field("position", fmt::format("{} · {} · {} diverged", f.position,
                                  diff::position_pattern_text(f.pattern, f.position), diverged_count(r, f)));
  std::string nmse = sci(m.nmse);
  if (tap) nmse += "  threshold " + sci(tap->threshold_nmse);
  if (tap && !tap->inputs_recorded) {
    nmse += "  inputs not recorded";
  } else {
    nmse += "  inputs " + sci(m.input_nmse);
    if (const std::string jump = jump_text(m.nmse, m.input_nmse); !jump.empty()) nmse += " (" + jump + ")";
  }
  w.field("nmse", nmse);
  w.field("max abs", fmt::format("{}  max rel {}  cosine {}", sci(m.max_abs), sci(m.max_rel),
                                 cosine_text(m.cosine)));
  if (m.worst_index >= 0)
    w.field("worst", fmt::format("{}: expected {}, actual {}",
                                 element_location(tap, m.worst_index, model_dims(r)),
                                 sci(m.worst_expected, 4), sci(m.worst_actual, 4)));
  if (m.nonfinite > 0 || m.nonfinite_expected > 0)
    w.field("non-finite", w.style.red(fmt::format("{} in actual, {} in expected", m.nonfinite,
                                                  m.nonfinite_expected)));
}

void write_diagnosis(Writer& w, const diff::DiffResult& r) {
  if (!r.diagnosis) return;
  const auto& d = *r.diagnosis;
  w.heading("diagnosis  " + w.style.cyan(terminal_safe(d.bug_class)));
  w.field("evidence", diff::evidence_text(d.evidence));
  const std::string indent(kLabel + 2, ' ');
  w.field("variant", d.variant.empty() ? "no replayed hypothesis reproduces the actual values" : terminal_safe(d.variant));
  w.field("residual", d.replayed() ? fmt::format("{}  (the correct computation: {})", sci(d.residual), baseline_text(d))
                                   : fmt::format("the correct computation: {}", baseline_text(d)));
  for (std::size_t i = 0; i < d.ties.size(); ++i) {
    const std::string line = fmt::format("{}  {} ({})", sci(d.ties[i].residual), terminal_safe(d.ties[i].variant),
                                         terminal_safe(d.ties[i].bug_class));
    if (i == 0)
      w.field("tied", line);
    else
      w.out += indent + line + "\n";
  }
  if (!d.separating_experiment.empty()) w.field("to separate", wrap_words(terminal_safe(d.separating_experiment), kLabel + 2));
  for (std::size_t i = 0; i < d.runners_up.size(); ++i) {
    const auto& h = d.runners_up[i];
    const std::string line = sci(h.residual) + "  " + terminal_safe(h.variant);
    if (i == 0)
      w.field("runners-up", line);
    else
      w.out += indent + line + "\n";
  }
  for (std::size_t i = 0; i < d.signatures.size(); ++i) {
    if (i == 0)
      w.field("signatures", terminal_safe(d.signatures[i]));
    else
      w.out += indent + terminal_safe(d.signatures[i]) + "\n";
  }
  if (!d.explanation.empty())
    w.field("explanation", wrap_words(terminal_safe(d.explanation), kLabel + 2));
}

void write_taps(Writer& w, const diff::DiffResult& r, const RenderOptions& o) {
  if (r.taps.empty()) return;
  const TapCounts counts = count_taps(r);
  const TapSelection sel = select_taps(r, o.worst_passing_taps, o.max_table_rows);
  w.heading(fmt::format("taps: {} of {} diverged", counts.diverged, counts.taps));
  std::size_t name_width = 3, class_width = 5;
  for (const auto* t : sel.taps) {
    name_width = std::max(name_width, display_width(terminal_safe(t->full_name)));
    class_width = std::max(class_width, display_width(terminal_safe(t->tap_class)));
  }
  w.out += "  " +
           w.style.dim(fmt::format("{}  {}  {:<9}  {:>5}  {:>9}  {:>5}  {:>9}  {:>8}  {:>9}",
                                   pad("tap", name_width), pad("class", class_width), "status",
                                   "first", "worst", "at", "max abs", "cosine", "threshold")) +
           "\n";
  for (const auto* t : sel.taps) {
    const TapStats s = tap_stats(*t);
    const std::string status =
        pad(s.first_diverged ? "DIVERGED" : s.nonfinite_rows ? "NaN/Inf" : s.inherited ? "inherited" : "ok", 9);
    w.out += fmt::format(
        "  {}  {}  {}  {:>5}  {:>9}  {:>5}  {:>9}  {:>8}  {:>9}\n",
        pad(terminal_safe(t->full_name), name_width), pad(terminal_safe(t->tap_class), class_width),
        s.first_diverged ? w.style.red(status) : s.nonfinite_rows ? w.style.yellow(status) : w.style.green(status),
        s.first_diverged ? std::to_string(s.first_diverged->position) : "-",
        s.worst ? sci(s.worst->nmse) : "-", s.worst ? std::to_string(s.worst->position) : "-",
        sci(s.max_abs), fixed(s.min_cosine, 4), sci(t->threshold_nmse));
  }
  if (sel.omitted_diverged > 0)
    w.out += w.style.dim(fmt::format("  … {} more diverged taps (JSON and HTML list every tap)",
                                     sel.omitted_diverged)) +
             "\n";
}

void write_logits(Writer& w, const diff::DiffResult& r) {
  if (!r.logits) return;
  const auto& l = *r.logits;
  w.heading(fmt::format("logits  KL(expected || actual) over {} positions", l.n_positions));
  w.field("KL", fmt::format("mean {} ± {}  max {}", sci(l.kl_mean, 3), sci(l.kl_stderr, 3),
                            sci(l.kl_max, 3)));
  std::string pct;
  for (const auto& [p, v] : l.kl_percentiles)
    pct += fmt::format("{}{:g}% {}", pct.empty() ? "" : "  ", p, sci(v, 2));
  if (!pct.empty()) w.field("percentiles", pct);
  const std::string same = fmt::format("{}  mean top-5 overlap {}", percent(l.same_top1_rate),
                                       fixed(l.mean_top5_overlap, 2));
  w.field("same top-1", l.same_top1_rate < 1 ? w.style.yellow(same) : same);
  w.field("greedy",
          l.first_greedy_difference
              ? w.style.red(fmt::format("first differs at position {}", *l.first_greedy_difference))
              : std::string("same choice at every position"));
}

}  // namespace

std::string render_text(const diff::DiffResult& result, const RenderOptions& options) {
  const Style style(options.color);
  Writer w{style, {}};
  write_header(w, result);
  write_findings(w, result);
  write_roots(w, result);
  write_first(w, result);
  write_diagnosis(w, result);
  write_taps(w, result, options);
  write_logits(w, result);
  return w.out;
}

}  // namespace tapdiff::reports
