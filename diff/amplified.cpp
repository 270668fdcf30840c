#include "diff/amplified.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <optional>

#include "diff/hypotheses.hpp"
#include "diff/replay_model.hpp"
#include "diff/replay_rows.hpp"

namespace tapdiff::diff {
namespace {

// Σ(b - r)² / Σb², or infinity when the replay is missing or the row holds non-finite values.
double own_error(const Row& b, const Row& replay) {
  if (b.empty() || b.size() != replay.size()) return INFINITY;
  double err = 0, size = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double d = double(b[i]) - double(replay[i]);
    err += d * d;
    size += double(b[i]) * double(b[i]);
  }
  return size > 0 && std::isfinite(err) ? err / size : INFINITY;
}

// ffn.act = f(gate) * up, f SiLU or GELU. Both have |f(g)| <= |g| and slopes within kSlope, so
// from the two traces' own inputs alone
//   |act_b - act_a| <= kSlope |gate_b - gate_a| |up_b| + |gate_a| |up_b - up_a|
// plus each side's rounding of f and the product (a few ulps): no model and no knowledge of f.
// Whether every element of the actual row is within that bound; false where a row is missing.
constexpr double kSlope = 1.13;           // SiLU's steepest slope is 1.0998, GELU's 1.1289
constexpr double kOwnRounding = 0x1p-20;  // of |act_a| + |act_b|: expf and two roundings each side
bool activation_within_its_inputs(const TraceReader& a, const TraceReader& b, int layer, std::int64_t p) {
  const Row act_a = trace_row(a, "ffn.act", layer, p), act_b = trace_row(b, "ffn.act", layer, p);
  const Row gate_a = trace_row(a, "ffn_gate", layer, p), gate_b = trace_row(b, "ffn_gate", layer, p);
  const Row up_a = trace_row(a, "ffn_up", layer, p), up_b = trace_row(b, "ffn_up", layer, p);
  const std::size_t n = act_a.size();
  if (n == 0 || act_b.size() != n || gate_a.size() != n || gate_b.size() != n || up_a.size() != n || up_b.size() != n)
    return false;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(act_a[i]) || !std::isfinite(act_b[i])) return false;  // an infinite bound admits anything
    const double bound = kSlope * std::fabs(double(gate_b[i]) - gate_a[i]) * std::fabs(up_b[i]) +
                         std::fabs(gate_a[i]) * std::fabs(double(up_b[i]) - up_a[i]) +
                         kOwnRounding * (std::fabs(act_a[i]) + std::fabs(act_b[i]));
    if (!(std::fabs(double(act_b[i]) - act_a[i]) <= bound)) return false;
  }
  return true;
}

// The worst diverged row's (nmse, input nmse) of t, and how many rows diverged.
struct DivergedRows {
  double nmse = 0, input = 0;
  std::int64_t rows = 0;
};
DivergedRows diverged_rows(const TapComparison& t) {
  DivergedRows d;
  for (const RowMetrics& row : t.rows)
    if (row.diverged) {
      d.nmse = std::max(d.nmse, row.nmse);
      d.input = std::max(d.input, row.input_nmse);
      ++d.rows;
    }
  return d;
}

std::string rows_over(const DivergedRows& d) {
  return fmt::format("{} row{} over the threshold (nmse up to {:.3g}, its inputs' {:.3g}) {}", d.rows,
                     d.rows == 1 ? "" : "s", d.nmse, d.input, d.rows == 1 ? "is" : "are");
}

StructuralFinding expected_off_its_inputs(const TapComparison& t, std::int64_t position, double own, double bar) {
  return {"expected-off-its-inputs", t.full_name,
          fmt::format("at position {} the expected trace's row is not what the correct computation gives from the "
                      "expected trace's own inputs (nmse {:.3g}, the tolerance {:.3g}), while the actual trace's is: "
                      "the expected side is the one that diverged here (a golden recorded from a faulty build, or "
                      "the traces given in the other order)",
                      position, own, bar)};
}

}  // namespace

void clear_amplified_rows(DiffResult& r, const TraceReader& a, const TraceReader& b, const std::string& model_path) {
  std::optional<ReplayModel> model;
  const TraceMetadata& m = a.metadata();
  for (TapComparison& t : r.taps) {
    if (!t.diverged()) continue;
    if (t.name == "ffn.act" &&
        std::all_of(t.rows.begin(), t.rows.end(), [&](const RowMetrics& row) {
          return !row.diverged || activation_within_its_inputs(a, b, t.layer, row.position);
        })) {
      r.findings.push_back({"amplified", t.full_name,
                            rows_over(diverged_rows(t)) +
                                " within what the two traces' own ffn_gate and ffn_up differences carry "
                                "through any SiLU or GELU gate, element by element: a difference inherited "
                                "and amplified, not a divergence of this op"});
      for (RowMetrics& row : t.rows) row.diverged = false;
      continue;
    }
    double worst_own = 0;
    try {
      if (!model) model.emplace(model_path.empty() ? m.model_path : model_path, m.model_sha256, m.hparams);
      // Both traces' rows must be what the correct computation gives from their own inputs: an
      // expected trace that is not (a golden recorded from a faulty build, or the traces given
      // in the other order) diverged at this op itself.
      const double bar = t.threshold_nmse;  // the op's own error within the tap's tolerance
      for (const TraceReader* trace : {&b, &a}) {
        // The candidates' replays refer to `in`: it outlives them.
        ReplayInputs in{*trace, *model, m.prompt_length, m.dims ? m.dims->n_ctx : std::int64_t(m.tokens.size()),
                        cache_format_of(trace->metadata()), prefill_chunk_of(trace->metadata())};
        const std::vector<Candidate> candidates = candidates_for(t.name, t.layer, in);
        const auto baseline =
            std::find_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.baseline; });
        if (baseline == candidates.end()) return;
        for (const RowMetrics& row : t.rows) {
          if (!row.diverged) continue;
          const double own =
              own_error(trace_row(*trace, t.name, t.layer, row.position), baseline->replay(row.position));
          if (!(own <= bar)) {
            if (trace == &a) {
              t.expected_off_its_inputs = true;
              r.findings.push_back(expected_off_its_inputs(t, row.position, own, bar));
            }
            return;  // this op's own divergence: the first one
          }
          if (trace == &b) worst_own = std::max(worst_own, own);
        }
      }
    } catch (const std::exception&) {
      return;  // no model, another model (its sha256), or a trace the replay cannot read: the rows stand
    }
    r.findings.push_back(
        {"amplified", t.full_name,
         rows_over(diverged_rows(t)) +
             fmt::format(" what the correct computation gives from the actual trace's own inputs, as its cache "
                         "stores them (residual {:.2g}): a difference inherited and amplified, not a divergence "
                         "of this op",
                         worst_own)});
    for (RowMetrics& row : t.rows) row.diverged = false;
  }
}

}  // namespace tapdiff::diff
