// What a diff of two traces found: the data model every report renders (reports/ depends on
// this header only). A = expected (usually the reference), B = actual (usually an engine).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {
class TraceReader;
}

namespace tapdiff::diff {

// Errors of B against A over one row (one tap at one position).
struct RowMetrics {
  std::int64_t position = 0;
  double max_abs = 0;        // max |b - a|
  double max_rel = 0;        // max |b - a| / max(|a|, floor), floor = 1e-6 · max|a| of the row
  double nmse = 0;           // Σ(b - a)² / Σa² (Σ(b-a)² when a is all zero)
  double cosine = 1;         // a·b / (|a| |b|); 1 when both are zero
  std::int64_t nonfinite = 0;         // elements of b that are NaN or ±inf
  std::int64_t nonfinite_expected = 0;  // the same in a
  std::int64_t worst_index = -1;      // flat index of the largest |b - a|
  float worst_expected = 0;
  float worst_actual = 0;
  double input_nmse = 0;     // the largest nmse of this tap's inputs (jump test)
  bool diverged = false;
  // Diverged under the threshold (ToleranceProfile::own_error_floor_nmse), not yet confirmed by a
  // replay; a row left so passes.
  bool suspect = false;
  double own_nmse = 0;  // a suspect's error against the op replayed from its own inputs (0: not replayed)
  bool confirmed_suspect() const { return diverged && own_nmse > 0; }
};

enum class PositionPattern { none, all, from, some };  // which positions diverge
std::string position_pattern_text(PositionPattern pattern, std::int64_t first);
std::string runs_text(const std::vector<std::int64_t>& values);  // increasing values as runs: "3", "0..4, 7"

// One tap (name, layer) compared over the positions both traces hold.
struct TapComparison {
  std::string name;       // short name, "attn_q"
  int layer = -1;         // -1 for global taps
  std::string full_name;  // "blk.3.attn_q"
  std::string tap_class;  // tolerance class, e.g. "projection" (see tolerance.hpp)
  std::vector<std::int64_t> row_shape;
  std::vector<RowMetrics> rows;  // by position
  double threshold_nmse = 0;     // the profile's threshold for this tap class
  double jump_factor = 0;        // the profile's jump test factor
  double replay_band_nmse = 0;   // the profile's replay band (ToleranceProfile::replay_band_nmse)
  double own_error_floor_nmse = 0;  // ToleranceProfile::own_error_floor_nmse
  // The smallest nmse threshold at which no row would have diverged: evidence for tuning.
  double min_passing_nmse = 0;
  // Set by clear_amplified_rows: the replay found this op's own error in the actual trace's row,
  // or in the expected trace's (whose bug it then is to diagnose).
  bool own_error_replayed = false;
  bool expected_off_its_inputs = false;
  // False where the actual trace records none of the op's inputs (nor theirs, two ops up): its
  // rows' input_nmse is then no measurement, and the jump test reads the inputs as exact.
  bool inputs_recorded = true;
  bool diverged() const;
  const RowMetrics* first_diverged() const;
  const RowMetrics* worst() const;  // largest nmse
};

// A structural difference, reported rather than crashed on.
struct StructuralFinding {
  std::string kind;    // "shape", "missing-in-actual", "missing-in-expected", "token-sequence", "near-tie",
                       // "metadata", "non-finite", "context-length", "nothing-compared", "routing-tie"
  std::string tap;     // full name, or "" for trace-level findings
  std::string detail;  // one sentence with both values
  std::vector<std::int64_t> expected_shape, actual_shape;  // "shape" only: the row shapes

  StructuralFinding() = default;
  StructuralFinding(std::string kind_, std::string tap_, std::string detail_,
                    std::vector<std::int64_t> expected_shape_ = {},
                    std::vector<std::int64_t> actual_shape_ = {})
      : kind(std::move(kind_)), tap(std::move(tap_)), detail(std::move(detail_)),
        expected_shape(std::move(expected_shape_)), actual_shape(std::move(actual_shape_)) {}
};

// llama.cpp perplexity --kl-divergence style summary over the compared positions.
struct LogitsSummary {
  std::int64_t n_positions = 0;
  double kl_mean = 0, kl_stderr = 0, kl_max = 0;
  // percentiles 99.9, 99, 95, 90, 50, 10, 1 of KL(A||B)
  std::vector<std::pair<double, double>> kl_percentiles;
  double same_top1_rate = 1;
  double mean_top5_overlap = 5;
  std::optional<std::int64_t> first_greedy_difference;  // first position whose argmax differs
  struct Position {
    std::int64_t position = 0;
    double kl = 0;
    bool same_top1 = true;
    int top5_overlap = 5;
    std::vector<std::pair<int, float>> top_expected;  // (token, logit), best first
    std::vector<std::pair<int, float>> top_actual;
  };
  std::vector<Position> positions;
};

struct Hypothesis {
  std::string variant;      // "W^T x + b (weights transposed)"
  double residual = 0;      // its squared error against B, relative to the tensors' scale
  std::string bug_class;    // the class it would indicate
};

// How much a diagnosis rests on: a replayed variant, signatures, or nothing but observations.
enum class Evidence {
  reproduced,   // a named variant replays the actual values, clearly better than anything else
  tied,         // several variants of different classes replay them equally well
  indicated,    // signatures point to a class; nothing was replayed
  unexplained,  // neither: the signatures say what was observed
};
std::string evidence_text(Evidence evidence);  // "reproduced", "tied", "indicated", "unexplained"

struct Diagnosis {
  std::string bug_class;    // "kv-cache", "rope", "bias", "matmul-layout", "attention-mask",
                            // "attention-scale", "gqa-mapping", "dequantization",
                            // "weight-loading", "shape", "normalization", "token-sequence",
                            // "residual", "activation", "embedding", "buffer", "softcap",
                            // "softmax", "sampling", "layer-loop", "non-finite", "nondeterministic";
                            // "unexplained" when no evidence names one (never the tap's op family)
  Evidence evidence = Evidence::unexplained;
  std::string variant;      // the hypothesis that reproduces B (indicated: what the signatures
                            // point to, not replayed), "" when none does
  std::string copied_from;  // the tap whose values that variant takes ("" when it computes them)
  std::vector<std::string> carried_from;  // the taps whose own error that variant carries (Candidate::carries)
  std::string decoder_suspect;  // unexplained at an op reading a quantized weight that neither trace holds
                                // decoded: that weight, whose decoder the activations cannot clear
  double residual = 0;      // its relative squared error against B
  std::optional<double> baseline_residual;  // the correct computation's; absent without replay
  std::vector<Hypothesis> ties;         // every variant as good as the best, the best first; empty
                                        // when one is clearly best
  std::string separating_experiment;    // with ties: the run that tells them apart
  std::vector<Hypothesis> runners_up;   // next best hypotheses, best first
  std::vector<std::string> signatures;  // "position 0 intact", "constant offset per row", ...
  std::string explanation;  // one paragraph, names the code area to inspect
  // The bug diagnosed is the expected trace's: its row is off its own inputs, the actual's is
  // not (an "expected-off-its-inputs" finding); the replay ran with the roles swapped.
  bool in_expected = false;

  // A variant replayed against B: its residual means something.
  bool replayed() const { return !variant.empty() && evidence != Evidence::indicated; }
};

struct FirstDivergence {
  std::string tap;       // full name
  std::string name;      // short name
  int layer = -1;
  std::int64_t position = 0;       // earliest diverging position at that tap
  PositionPattern pattern = PositionPattern::none;
  std::vector<std::int64_t> diverged_positions;
  RowMetrics metrics;    // at `position`
  // A row shape mismatch that is the root (it precedes every divergence): no position or
  // metrics, the two row shapes instead.
  bool shape = false;
  std::vector<std::int64_t> expected_shape, actual_shape;
};

// One independent root: a divergence not explained by an earlier one, the later diverged taps
// it explains, and its diagnosis. kind "shape": a tap whose row shape differs (at.metrics is
// empty; the diagnosis names the config value that explains the other width).
struct RootFinding {
  std::string kind = "divergence";     // "divergence", "shape" or "weights" (a weight tensor)
  FirstDivergence at;                  // the root tap, its earliest position and pattern
  std::vector<std::string> explained;  // later diverged taps this root accounts for (full names)
  std::optional<Diagnosis> diagnosis;
  std::vector<std::int64_t> expected_shape, actual_shape;  // kind "shape": the row shapes
};

// What diff_traces looks for.
enum class DiffMode {
  first,     // the first divergence (roots holds it alone, plus shape findings)
  all,       // every divergence, grouped by independent root (the jump test, then replay)
  lockstep,  // the actual trace is a lockstep run: every tap over its tolerance, by op
};
std::string diff_mode_text(DiffMode mode);  // "first", "all", "lockstep"

// One weight tensor compared (weight taps, diff/weights.hpp): rows are the tensor's rows.
struct WeightComparison {
  std::string tensor;                 // GGUF name, "blk.0.attn_v.weight"
  std::string mode;                   // "full" (every row's values) or "stats" (per-row statistics)
  std::int64_t rows = 0, cols = 0;
  std::int64_t compared_rows = 0;     // rows both traces describe
  std::int64_t differing_rows = 0;
  std::int64_t first_differing_row = -1;
  double max_abs = 0;                 // over the full rows both hold
  std::string summary;                // "rows 0..149 match, rows 151.. are zero (row 150 partly)"
  bool differs() const { return differing_rows > 0; }
};

enum class Verdict { pass, diverged, incompatible };
std::string verdict_text(Verdict verdict);  // "PASS", "DIVERGED", "INCOMPATIBLE"

struct TraceSide {
  std::string path;
  TraceMetadata metadata;
  bool complete = true;
};

struct DiffResult {
  TraceSide expected, actual;
  std::string profile;   // tolerance profile name, e.g. "f16"
  Verdict verdict = Verdict::pass;
  std::vector<StructuralFinding> findings;
  std::vector<TapComparison> taps;  // execution order
  DiffMode mode = DiffMode::first;
  std::optional<FirstDivergence> first;  // the earliest divergence, in every mode
  std::optional<Diagnosis> diagnosis;    // at `first`
  std::vector<RootFinding> roots;        // independent findings, execution order
  std::optional<LogitsSummary> logits;
  std::int64_t compared_positions = 0;  // common token prefix length
  std::vector<WeightComparison> weights;  // load order; empty without weight taps
};

// The first finding: the first root in execution order (a weight, a tap of the wrong shape, a
// divergence), else the first divergence (the token sequence); at is null when nothing diverged.
struct LeadingFinding {
  const FirstDivergence* at = nullptr;
  const Diagnosis* diagnosis = nullptr;
};
LeadingFinding leading_finding(const DiffResult& result);

// The compared tap of that full name, or nullptr.
const TapComparison* find_tap(const DiffResult& result, std::string_view full_name);
// Layers the compared taps span: one past the highest layer index.
int layer_count(const DiffResult& result);
// Layers a trace's taps span, compared or not (the model's, where it records every layer's).
int layer_count(const TraceReader& trace);

}  // namespace tapdiff::diff
