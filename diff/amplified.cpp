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

}  // namespace

void clear_amplified_rows(DiffResult& r, const TraceReader& a, const TraceReader& b, const std::string& model_path) {
  std::optional<ReplayModel> model;
  const TraceMetadata& m = a.metadata();
  for (TapComparison& t : r.taps) {
    if (!t.diverged()) continue;
    double worst_own = 0, worst_nmse = 0, worst_input = 0;
    std::int64_t rows = 0;
    try {
      if (!model) model.emplace(model_path.empty() ? m.model_path : model_path, m.model_sha256, m.hparams);
      // The candidates' replays refer to `in`: it outlives them.
      ReplayInputs in{b, *model, m.prompt_length, m.dims ? m.dims->n_ctx : std::int64_t(m.tokens.size()),
                      cache_type_of(b.metadata()), prefill_chunk_of(b.metadata())};
      const std::vector<Candidate> candidates = candidates_for(t.name, t.layer, in);
      const auto baseline =
          std::find_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.baseline; });
      if (baseline == candidates.end()) return;
      const double bar = t.threshold_nmse;  // the op's own error within the tap's tolerance
      for (const RowMetrics& row : t.rows) {
        if (!row.diverged) continue;
        const double own = own_error(trace_row(b, t.name, t.layer, row.position), baseline->replay(row.position));
        if (!(own <= bar)) return;  // this op's own divergence: the first one
        worst_own = std::max(worst_own, own);
        worst_nmse = std::max(worst_nmse, row.nmse);
        worst_input = std::max(worst_input, row.input_nmse);
        ++rows;
      }
    } catch (const std::exception&) {
      return;  // no model, another model (its sha256), or a trace the replay cannot read: the rows stand
    }
    for (RowMetrics& row : t.rows) row.diverged = false;
    r.findings.push_back(
        {"amplified", t.full_name,
         fmt::format("{} row{} over the threshold (nmse up to {:.3g}, its inputs' {:.3g}) {} what the correct "
                     "computation gives from the actual trace's own inputs, as its cache stores them (residual "
                     "{:.2g}): a difference inherited and amplified, not a divergence of this op",
                     rows, rows == 1 ? "" : "s", worst_nmse, worst_input, rows == 1 ? "is" : "are", worst_own)});
  }
}

}  // namespace tapdiff::diff
