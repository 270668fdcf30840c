#include "reports/summary.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>

#include "reports/numbers.hpp"
#include "tapdiff/attn_summary.hpp"
#include "tapdiff/row_shape.hpp"
#include "tapdiff/tap_filter.hpp"

namespace tapdiff::reports {
namespace {

// Rows of these taps are head-major [n_head(_kv) * head_dim] (docs/taps.md, "Row layouts").
bool head_major(std::string_view name) {
  for (std::string_view n :
       {"attn_q", "attn_k", "attn_v", "attn_q.rope", "attn_k.rope", "kv.k", "kv.v", "attn.out"})
    if (name == n) return true;
  return false;
}

// How far a tap got towards its threshold; non-finite rows count as infinitely far.
double threshold_ratio(const diff::TapComparison& tap) {
  const diff::RowMetrics* worst = tap.worst();
  if (!worst) return 0;
  if (row_nonfinite(*worst)) return std::numeric_limits<double>::infinity();
  return tap.threshold_nmse > 0 ? worst->nmse / tap.threshold_nmse : worst->nmse;
}

}  // namespace

bool row_nonfinite(const diff::RowMetrics& row) {
  return row.nonfinite > 0 || row.nonfinite_expected > 0 || !std::isfinite(row.nmse);
}

TapCounts count_taps(const diff::DiffResult& result) {
  TapCounts counts;
  std::set<std::int64_t> positions;
  for (const auto& tap : result.taps) {
    if (tap.rows.empty()) continue;
    ++counts.taps;
    for (const auto& row : tap.rows) positions.insert(row.position);
    if (tap.diverged()) ++counts.diverged;
    if (std::any_of(tap.rows.begin(), tap.rows.end(), row_nonfinite)) ++counts.nonfinite;
  }
  counts.positions = static_cast<std::int64_t>(positions.size());
  return counts;
}

TapStats tap_stats(const diff::TapComparison& tap) {
  TapStats stats;
  stats.worst = tap.worst();
  stats.first_diverged = tap.first_diverged();
  for (const auto& row : tap.rows) {
    if (!std::isnan(stats.max_abs) && !(row.max_abs <= stats.max_abs)) stats.max_abs = row.max_abs;
    if (!std::isnan(stats.min_cosine) && !(row.cosine >= stats.min_cosine))
      stats.min_cosine = row.cosine;
    stats.nonfinite += row.nonfinite;
    stats.nonfinite_rows = stats.nonfinite_rows || row_nonfinite(row);
    if (row.diverged) ++stats.diverged_rows;
  }
  stats.inherited = !stats.first_diverged && stats.worst && stats.worst->nmse > tap.threshold_nmse;
  return stats;
}

TapSelection select_taps(const diff::DiffResult& result, int worst_passing, int max_rows) {
  TapSelection selection;
  const auto limit = static_cast<std::size_t>(std::max(max_rows, 0));
  std::vector<const diff::TapComparison*> passing;
  for (const auto& tap : result.taps) {
    if (!tap.diverged()) {
      if (!tap.rows.empty()) passing.push_back(&tap);
    } else if (selection.taps.size() < limit) {
      selection.taps.push_back(&tap);
    } else {
      ++selection.omitted_diverged;
    }
  }
  std::stable_sort(passing.begin(), passing.end(), [](const auto* a, const auto* b) {
    return threshold_ratio(*a) > threshold_ratio(*b);
  });
  for (std::size_t i = 0;
       i < passing.size() && static_cast<int>(i) < worst_passing && selection.taps.size() < limit;
       ++i)
    selection.taps.push_back(passing[i]);
  return selection;
}

std::vector<ClassSummary> class_summaries(const diff::DiffResult& result) {
  std::vector<ClassSummary> classes;
  for (const auto& tap : result.taps) {
    const std::string name = tap.tap_class.empty() ? "unclassified" : tap.tap_class;
    auto it = std::find_if(classes.begin(), classes.end(),
                           [&](const ClassSummary& c) { return c.tap_class == name; });
    if (it == classes.end()) it = classes.insert(classes.end(), ClassSummary{name, 0, 0, nullptr});
    ++it->taps;
    if (tap.diverged()) {
      ++it->diverged;
      if (!it->first_diverged) it->first_diverged = &tap;
    }
  }
  return classes;
}

std::optional<TapDims> model_dims(const diff::DiffResult& result) {
  if (result.expected.metadata.dims) return result.expected.metadata.dims;
  return result.actual.metadata.dims;
}

std::string element_location(const diff::TapComparison* tap, std::int64_t index,
                             const std::optional<TapDims>& dims) {
  if (index < 0) return "";
  if (tap) {
    const auto& shape = tap->row_shape;
    if (tap->name == "attn.probs" && shape.size() == 2 && shape[1] > 0)
      return fmt::format("head {}, key position {}", index / shape[1], index % shape[1]);
    if (tap->name == "attn.probs.summary")
      return fmt::format("head {}, {}", index / kAttnSummaryFields, kAttnSummaryFieldNames[index % kAttnSummaryFields]);
    if (head_major(tap->name) && dims && dims->head_dim > 0)
      return fmt::format("head {}, dim {}", index / dims->head_dim, index % dims->head_dim);
    if (tap->name == "output") return fmt::format("token {}", index);
    if (shape.size() == 2 && shape[1] > 0)
      return fmt::format("[{}, {}]", index / shape[1], index % shape[1]);
  }
  return fmt::format("element {}", index);
}

std::string headline(const diff::DiffResult& result) {
  if (result.first && result.first->shape)
    return fmt::format("{}: row shape {} expected, {} actual", result.first->tap,
                       shape_string(result.first->expected_shape), shape_string(result.first->actual_shape));
  if (result.first)
    return fmt::format("{} at position {}", result.first->tap, result.first->position);
  if (result.verdict == diff::Verdict::incompatible) {
    if (!result.findings.empty()) return result.findings.front().detail;
    return "the traces cannot be compared";
  }
  const TapCounts counts = count_taps(result);
  if (result.verdict == diff::Verdict::diverged) {
    // No tap over tolerance: the verdict comes from a finding (a shape mismatch, NaN in both).
    for (const auto& f : result.findings)
      if (counts.diverged == 0 && (f.kind == "shape" || f.kind == "non-finite")) return f.detail;
    return fmt::format("{} taps diverged", counts.diverged);
  }
  if (counts.taps == 0 && result.weights.empty())  // traces of generated tokens alone (diff compares those)
    return fmt::format("the {} generated tokens agree; no tap compared",
                       result.compared_positions - result.expected.metadata.prompt_length);
  return fmt::format("all {} taps within the {} profile", counts.taps,
                     result.profile.empty() ? "default" : result.profile);
}

std::string side_summary(const diff::TraceSide& side) {
  const auto& m = side.metadata;
  std::string text = fmt::format("{} {}", producer_name(m.producer), m.precision);
  if (!m.fault.empty() && m.fault != "none") text += fmt::format(", fault {}", m.fault);
  if (!m.lockstep_source.empty()) text += ", lockstep";
  if (!side.complete) text += ", incomplete";
  return text;
}

bool show_roots(const diff::DiffResult& r) {
  if (r.mode != diff::DiffMode::first) return true;
  for (const auto& root : r.roots)
    if (root.kind != "divergence") return true;
  return r.roots.size() > 1;
}

std::string mode_summary(const diff::DiffResult& r) {
  switch (r.mode) {
    case diff::DiffMode::lockstep:
      return "lockstep: every tap over tolerance, grouped by op";
    case diff::DiffMode::all:
      return "all: every divergence, grouped by independent root";
    case diff::DiffMode::first:
      break;
  }
  return "first divergence";
}

bool root_measured(const diff::RootFinding& root) {
  return root.kind != "shape" && root.at.tap != "tokens";
}

std::string root_class(const diff::RootFinding& root) {
  return root.diagnosis && !root.diagnosis->bug_class.empty() ? root.diagnosis->bug_class : "-";
}

std::string root_class_with_evidence(const diff::RootFinding& root) {
  return root.diagnosis && !root.diagnosis->bug_class.empty() ? class_with_evidence(*root.diagnosis) : "-";
}

std::string diverged_count(const diff::DiffResult& r, const diff::FirstDivergence& f) {
  if (const diff::TapComparison* tap = find_tap(r, f.tap))
    return fmt::format("{} of {} positions", f.diverged_positions.size(), tap->rows.size());
  for (const auto& w : r.weights)
    if ("weight." + w.tensor == f.tap) return fmt::format("{} of {} rows", w.differing_rows, w.compared_rows);
  if (f.tap == "tokens") return fmt::format("the tokens from position {}", f.position);
  return fmt::format("{} positions", f.diverged_positions.size());
}

std::string class_with_evidence(const diff::Diagnosis& d) {
  const char* side = d.in_expected ? " in the expected trace" : "";
  // "unexplained" is a class and an evidence both: said once.
  if (d.evidence == diff::Evidence::unexplained && d.bug_class == diff::evidence_text(d.evidence))
    return d.bug_class + side;
  if (d.evidence != diff::Evidence::tied)
    return fmt::format("{} ({}){}", d.bug_class, diff::evidence_text(d.evidence), side);
  std::vector<std::string> classes;
  for (const auto& t : d.ties)
    if (std::find(classes.begin(), classes.end(), t.bug_class) == classes.end()) classes.push_back(t.bug_class);
  return fmt::format("{} (tied: {}){}", d.bug_class, fmt::join(classes, " | "), side);
}

std::string baseline_text(const diff::Diagnosis& d) {
  return d.baseline_residual ? sci(*d.baseline_residual) : "no replay";
}

std::string root_positions(const diff::RootFinding& root) {
  if (root.kind == "shape")
    return fmt::format("shape {} vs {}", shape_string(root.expected_shape), shape_string(root.actual_shape));
  const auto& at = root.at;
  const std::string n = fmt::format("{} position{}", at.diverged_positions.size(),
                                    at.diverged_positions.size() == 1 ? "" : "s");
  switch (at.pattern) {
    case diff::PositionPattern::all: return fmt::format("all ({})", n);
    case diff::PositionPattern::from: return fmt::format("from {} ({})", at.position, n);
    case diff::PositionPattern::some: return fmt::format("some from {} ({})", at.position, n);
    case diff::PositionPattern::none: break;
  }
  return fmt::format("{}", at.position);
}

namespace {

// "0-3,7"
std::string layer_ranges(const std::vector<int>& layers) {
  std::string ranges;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    ranges += (ranges.empty() ? "" : ",") + (j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]));
    i = j + 1;
  }
  return ranges;
}

// Taps by short name, in order of first appearance, each with the layers it appears in.
std::vector<std::pair<std::string, std::vector<int>>> by_short_name(const std::vector<std::string>& taps) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& tap : taps) {
    auto [name, layer] = split_full_tap_name(tap);
    auto it = std::find_if(groups.begin(), groups.end(), [&, n = name](const auto& g) { return g.first == n; });
    if (it == groups.end()) it = groups.insert(groups.end(), {name, {}});
    it->second.push_back(layer);
  }
  return groups;
}

// "attn_norm, attn_q in layers 0-31; output_norm": names that share their layers named together.
std::string taps_by_layers(const std::vector<std::string>& taps) {
  std::vector<std::pair<std::vector<int>, std::string>> groups;
  for (const auto& [name, layers] : by_short_name(taps)) {
    auto it = std::find_if(groups.begin(), groups.end(), [&, l = layers](const auto& g) { return g.first == l; });
    if (it == groups.end()) it = groups.insert(groups.end(), {layers, ""});
    it->second += (it->second.empty() ? "" : ", ") + name;
  }
  std::string out;
  for (const auto& [layers, names] : groups) {
    out += out.empty() ? "" : "; ";
    out += layers.front() < 0  ? names
           : layers.size() == 1 ? fmt::format("{} in layer {}", names, layers.front())
                                : fmt::format("{} in layers {}", names, layer_ranges(layers));
  }
  return out;
}

}  // namespace

std::string root_explained(const diff::RootFinding& root) {
  std::string out;
  for (const auto& [name, layers] : by_short_name(root.explained)) {
    out += out.empty() ? "" : ", ";
    if (layers.size() == 1) out += layers[0] < 0 ? name : fmt::format("blk.{}.{}", layers[0], name);
    else out += fmt::format("{} in layers {}", name, layer_ranges(layers));
  }
  return out;
}

std::vector<diff::StructuralFinding> findings_to_read(const diff::DiffResult& r) {
  // What a finding of taps a trace lacks says, less the count of a tap name's layers: the same
  // for every tap an engine does not record, or declares it cannot (one reason for all).
  const auto said = [](const diff::StructuralFinding& f) -> std::optional<std::string> {
    if (f.kind == "missing-in-actual" || f.kind == "missing-in-expected") return f.detail;
    if (f.kind != "not-available") return std::nullopt;
    const std::size_t count_end = f.detail.find("): ");
    return "not compared: " + (count_end == std::string::npos ? f.detail : f.detail.substr(count_end + 3));
  };
  std::vector<diff::StructuralFinding> out;
  for (const auto& f : r.findings) {
    const std::optional<std::string> what = said(f);
    std::vector<std::string> taps;
    for (const auto& g : r.findings)
      if (what && g.kind == f.kind && said(g) == what) taps.push_back(g.tap);
    if (taps.size() < 2) {
      out.push_back(f);
    } else if (taps.front() == f.tap) {  // the kind's first: all of them, where it stood
      out.push_back({f.kind, fmt::format(f.kind == "not-available" ? "{} tap names" : "{} taps", taps.size()),
                     fmt::format("{}: {}", *what, taps_by_layers(taps))});
    }
  }
  return out;
}

}  // namespace tapdiff::reports
