// What the renderers select and derive from a DiffResult, computed one way for every format.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff::reports {

using diff::find_tap;

// The row is not a plain number comparison: b (or a) holds NaN/inf, or the metric itself is.
bool row_nonfinite(const diff::RowMetrics& row);

// Over the taps with a row compared (a tap both traces hold, at no common position, is not).
struct TapCounts {
  int taps = 0;
  int diverged = 0;
  int nonfinite = 0;           // taps with a non-finite row
  std::int64_t positions = 0;  // positions at which some tap's rows were compared
};
TapCounts count_taps(const diff::DiffResult& result);

// One tap's rows reduced for a table line. Maxima propagate NaN (a NaN is worse than any number).
struct TapStats {
  const diff::RowMetrics* worst = nullptr;  // the row with the largest nmse (TapComparison::worst)
  const diff::RowMetrics* first_diverged = nullptr;
  double max_abs = 0;
  double min_cosine = 1;
  std::int64_t nonfinite = 0;  // non-finite elements of b over all rows
  bool nonfinite_rows = false;  // a row with NaN/Inf in either trace: not "ok" even where not diverged
  int diverged_rows = 0;
  // Rows over the threshold that did not diverge: no larger than their inputs' error allows (the
  // jump test), or the op replayed from the actual's own inputs reproduces them; inherited.
  bool inherited = false;
};
TapStats tap_stats(const diff::TapComparison& tap);

// A compact table's rows: every diverged tap in execution order, then the `worst_passing`
// passing taps closest to their threshold (largest worst-NMSE / threshold), at most `max_rows`.
struct TapSelection {
  std::vector<const diff::TapComparison*> taps;
  int omitted_diverged = 0;  // diverged taps cut by max_rows
};
TapSelection select_taps(const diff::DiffResult& result, int worst_passing, int max_rows);

// Taps grouped by tolerance class, classes in order of first appearance ("" -> "unclassified").
struct ClassSummary {
  std::string tap_class;
  int taps = 0;
  int diverged = 0;
  const diff::TapComparison* first_diverged = nullptr;  // earliest in execution order
};
std::vector<ClassSummary> class_summaries(const diff::DiffResult& result);

// The model's dimensions, from either trace.
std::optional<TapDims> model_dims(const diff::DiffResult& result);

// Where a flat row index sits in model terms: "head 2, dim 5", "head 1, key position 7",
// "token 318", "element 37".
std::string element_location(const diff::TapComparison* tap, std::int64_t index,
                             const std::optional<TapDims>& dims);

// "blk.3.attn_q at position 5" for a divergence, the first finding for an incompatible
// result, "all N taps within the <profile> profile" for a pass. Unescaped.
std::string headline(const diff::DiffResult& result);

// The independent roots (DiffResult::roots) get their own section in all and lockstep modes,
// and in first mode when there is more than the first divergence (a shape root).
bool show_roots(const diff::DiffResult& result);
// "lockstep: every tap over tolerance, grouped by op" etc. Unescaped.
std::string mode_summary(const diff::DiffResult& result);
// A root measured at a tap (not a shape root, not the token sequence): it has an nmse.
bool root_measured(const diff::RootFinding& root);
// The root's diagnosed class ("shape", "bias", ...; "-" without a diagnosis).
std::string root_class(const diff::RootFinding& root);
// "3 of 9 positions", "12 of 320 rows" (a weight), "from position 5" (the token sequence).
std::string diverged_count(const diff::DiffResult& result, const diff::FirstDivergence& first);
std::string root_class_with_evidence(const diff::RootFinding& root);  // "rope (reproduced)"
// "rope (reproduced)", "unexplained (tied: rope | buffer)": the class with its evidence.
std::string class_with_evidence(const diff::Diagnosis& d);
// "1.2e-05" or "no replay".
std::string baseline_text(const diff::Diagnosis& d);
// "from 1 (11 positions)", or the two shapes for a shape root. Unescaped.
std::string root_positions(const diff::RootFinding& root);
// "blk.0.attn_k, attn_v in layers 0-3": the diverged taps a root explains, a tap found in
// several layers named once with its layers. Unescaped.
std::string root_explained(const diff::RootFinding& root);
// The structural findings as a reader wants them: the taps one trace lacks in one finding of
// each kind ("64 taps: recorded in the expected trace only: attn_norm, attn_q in layers 0-31"),
// not one a tap. Unescaped.
std::vector<diff::StructuralFinding> findings_to_read(const diff::DiffResult& r);

// "reference f32" / "engine-host f16, fault kv-stuck-length". Unescaped.
std::string side_summary(const diff::TraceSide& side);

}  // namespace tapdiff::reports
