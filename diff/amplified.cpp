#include "diff/amplified.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <optional>

#include "diff/block_replay.hpp"
#include "diff/hypotheses.hpp"
#include "diff/replay_model.hpp"
#include "diff/replay_rows.hpp"
#include "tapdiff/tap_catalogue.hpp"

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

// Whether every diverged row of t is within its replay band (nothing to confirm above it).
bool within_replay_band(const TapComparison& t) {
  return std::all_of(t.rows.begin(), t.rows.end(),
                     [&](const RowMetrics& row) { return !row.diverged || row.nmse <= t.replay_band_nmse; });
}

// Each diverged row of t replayed from each trace's own inputs. A row both traces' inputs give
// (within the tap's tolerance) is inherited: cleared, with an "amplified" finding. A row the
// actual trace's inputs do not give is this op's own divergence; one only the expected trace's
// do not give is the expected trace's ("expected-off-its-inputs"). Rows either replay cannot
// give (an input a trace lacks) are left as they are. Returns whether an own divergence was found.
bool judge_rows_by_replay(DiffResult& r, TapComparison& t, const TraceReader& a, const TraceReader& b,
                          ReplayModel& model) {
  const TraceMetadata& m = a.metadata();
  // The candidates' replays refer to their inputs: these outlive them.
  ReplayInputs in_b = replay_inputs(b, b, model, m.prompt_length);
  ReplayInputs in_a = replay_inputs(a, a, model, m.prompt_length);
  in_a.baseline_only = in_b.baseline_only = true;
  // Attention on a quantized cache the replay cannot store as the run did keeps its noise. A
  // mixture of experts' per-expert taps a trace lacks (llama.cpp records none) are computed from
  // the router's and the norm's taps it holds (diff/block_replay.hpp).
  const auto candidates = [&](ReplayInputs& in, const TraceReader& trace) {
    if (!in.cache.modeled && t.tap_class == "attention") return std::vector<Candidate>{};
    const UnrecordedInputs gap = unrecorded_inputs(t.name, t.layer, trace, a);
    const bool experts_only = gap.replayed() && std::all_of(gap.ops.begin(), gap.ops.end(), [](const TapInfo* op) {
      const TapSpec* spec = find_tap_spec(op->name);
      return spec && spec->feature == TapFeature::experts;
    });
    return experts_only ? block_candidates(t.name, t.layer, in, gap.ops, false) : candidates_for(t.name, t.layer, in);
  };
  const std::vector<Candidate> cb = candidates(in_b, b), ca = candidates(in_a, a);
  const auto baseline = [](const std::vector<Candidate>& c) {
    const auto it = std::find_if(c.begin(), c.end(), [](const Candidate& x) { return x.baseline; });
    return it == c.end() ? nullptr : &*it;
  };
  const Candidate *base_b = baseline(cb), *base_a = baseline(ca);
  if (!base_b) return false;
  bool actual_off = false;
  std::optional<StructuralFinding> expected_off;
  DivergedRows cleared;
  double worst_own = 0;
  for (RowMetrics& row : t.rows) {
    if (!row.diverged) continue;
    const Row replay_b = base_b->replay(row.position);
    if (replay_b.empty()) continue;
    const double own_b = own_error(trace_row(b, t.name, t.layer, row.position), replay_b);
    if (row.suspect) {  // confirmed by an own error above the floor, else no divergence
      row.suspect = !(own_b > t.own_error_floor_nmse);
      row.diverged = !row.suspect;
      row.own_nmse = own_b;
      actual_off = actual_off || row.diverged;
      continue;
    }
    const double bar = t.threshold_nmse;  // the op's own error within the tap's tolerance
    if (!(own_b <= bar)) {
      actual_off = true;
      continue;
    }
    // The actual row is what its inputs give; the expected one must be too (a golden recorded
    // from a faulty build, or the traces given in the other order, is not).
    const Row replay_a = base_a ? base_a->replay(row.position) : Row{};
    if (replay_a.empty()) continue;
    const double own_a = own_error(trace_row(a, t.name, t.layer, row.position), replay_a);
    if (!(own_a <= bar)) {
      if (!expected_off) expected_off = expected_off_its_inputs(t, row.position, own_a, bar);
      continue;
    }
    worst_own = std::max(worst_own, own_b);
    cleared.nmse = std::max(cleared.nmse, row.nmse);
    cleared.input = std::max(cleared.input, row.input_nmse);
    ++cleared.rows;
    row.diverged = false;
  }
  if (cleared.rows > 0)
    r.findings.push_back(
        {"amplified", t.full_name,
         rows_over(cleared) +
             fmt::format(" what the correct computation gives from the actual trace's own inputs, as its cache "
                         "stores them (residual {:.2g}): a difference inherited and amplified, not a divergence "
                         "of this op",
                         worst_own)});
  if (!actual_off && !expected_off) return false;
  t.own_error_replayed = true;
  if (!actual_off) {
    t.expected_off_its_inputs = true;
    r.findings.push_back(std::move(*expected_off));
  }
  return true;
}

// The correct op of tap t replayed from `inputs` under the observed run's settings: its own error
// against the observed row at each of `positions`, infinity where it cannot be replayed.
std::vector<double> own_errors_at(const TapComparison& t, const TraceReader& inputs, const TraceReader& observed,
                                  ReplayModel& model, std::int64_t prompt_length,
                                  const std::vector<std::int64_t>& positions) {
  std::vector<double> errors(positions.size(), INFINITY);
  ReplayInputs in = replay_inputs(inputs, observed, model, prompt_length);  // the replays refer to it
  in.baseline_only = true;
  if (!in.cache.modeled && t.tap_class == "attention") return errors;  // its noise is the cache's
  const std::vector<Candidate> candidates = candidates_for(t.name, t.layer, in);
  const auto base = std::find_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.baseline; });
  if (base == candidates.end()) return errors;
  for (std::size_t i = 0; i < positions.size(); ++i)
    errors[i] = own_error(trace_row(observed, t.name, t.layer, positions[i]), base->replay(positions[i]));
  return errors;
}

std::vector<std::int64_t> own_rows_replayed(const TapComparison& t, const TraceReader& b, ReplayModel& model,
                                            std::int64_t prompt_length) {
  std::vector<std::int64_t> carrying;
  for (const RowMetrics& row : t.rows)
    if (!row.diverged && row.nmse > t.threshold_nmse) carrying.push_back(row.position);
  const auto own = [&](const std::vector<std::int64_t>& positions) {
    std::vector<std::int64_t> out;
    const std::vector<double> errors = own_errors_at(t, b, b, model, prompt_length, positions);
    for (std::size_t i = 0; i < positions.size(); ++i)
      if (std::isfinite(errors[i]) && errors[i] > t.threshold_nmse) out.push_back(positions[i]);
    return out;
  };
  // Every tap after a root carries its error: the first and last such row of the prompt and of
  // the decode steps are replayed first (an op's bug shows at all of its rows, or from some step
  // on), the others only where one of those is the op's own.
  std::vector<std::int64_t> probes;
  for (const bool decode : {false, true}) {
    const auto phase = [&](std::int64_t p) { return (p >= prompt_length) == decode; };
    const auto first = std::find_if(carrying.begin(), carrying.end(), phase);
    const auto last = std::find_if(carrying.rbegin(), carrying.rend(), phase);
    if (first != carrying.end()) probes.insert(probes.end(), {*first, *last});
  }
  return own(probes).empty() ? std::vector<std::int64_t>{} : own(carrying);
}

}  // namespace

std::vector<std::int64_t> own_rows_under_inherited(const TapComparison& t, const TraceReader& b, ReplayModel& model,
                                                   std::int64_t prompt_length) {
  std::vector<std::int64_t> own = own_rows_replayed(t, b, model, prompt_length);
  model.drop_weights();  // the candidates that read them are gone
  return own;
}

bool clear_amplified_rows(DiffResult& r, const TraceReader& a, const TraceReader& b, const std::string& model_path,
                          bool every_tap) {
  std::optional<ReplayModel> model;
  const TraceMetadata& m = a.metadata();
  for (TapComparison& t : r.taps) {
    if (!t.diverged()) continue;
    const auto suspects_only = std::all_of(t.rows.begin(), t.rows.end(),
                                           [](const RowMetrics& row) { return !row.diverged || row.suspect; });
    if (t.name == "ffn.act" && !suspects_only &&
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
    try {
      if (!model) model.emplace(model_path.empty() ? m.model_path : model_path, m.model_sha256, m.hparams);
      if (judge_rows_by_replay(r, t, a, b, *model) && !every_tap) return true;
    } catch (const std::exception&) {
      // No model, another model (its sha256), or a trace the replay cannot read: the rows stand,
      // but suspects need a replay to stand (drop_unconfirmed_suspects), and later taps are judged on.
      if (suspects_only) continue;
      return false;
    }
    // Rows no replay judged (an input a trace lacks) stand, unless within the replay band or
    // suspects (which no replay confirmed).
    if (!suspects_only && t.diverged() && !within_replay_band(t) && !every_tap) return true;
  }
  return true;
}

void confirm_lockstep_suspects(DiffResult& r, const TraceReader& a, const TraceReader& b,
                               const std::string& model_path) {
  const TraceMetadata& m = a.metadata();
  std::optional<ReplayModel> model;
  for (TapComparison& t : r.taps) {
    std::vector<std::int64_t> suspects;
    for (const RowMetrics& row : t.rows)
      if (row.suspect) suspects.push_back(row.position);
    if (suspects.empty()) continue;
    try {
      if (!model) model.emplace(model_path.empty() ? m.model_path : model_path, m.model_sha256, m.hparams);
      const std::vector<double> errors = own_errors_at(t, a, b, *model, m.prompt_length, suspects);
      model->drop_weights();
      for (RowMetrics& row : t.rows) {
        const auto at = std::find(suspects.begin(), suspects.end(), row.position);
        if (!row.suspect || at == suspects.end()) continue;
        const double own = errors[std::size_t(at - suspects.begin())];
        if (!std::isfinite(own) || !(own > t.own_error_floor_nmse)) continue;
        row.suspect = false;
        row.diverged = true;
        row.own_nmse = own;
      }
    } catch (const std::exception&) {
      return;  // no model: the suspects stay unconfirmed
    }
  }
}

void drop_unconfirmed_suspects(DiffResult& r) {
  for (TapComparison& t : r.taps) {
    const RowMetrics* confirmed = nullptr;
    for (RowMetrics& row : t.rows) {
      if (row.suspect) row.diverged = row.suspect = false;
      else if (row.confirmed_suspect() && !confirmed) confirmed = &row;
    }
    if (!confirmed) continue;
    const std::string against_inputs =
        confirmed->input_nmse > 0 ? fmt::format("{:.3g}x its inputs' ({:.3g})", confirmed->nmse / confirmed->input_nmse,
                                                confirmed->input_nmse)
                                  : std::string("where its inputs agree exactly");
    r.findings.push_back(
        {"below-threshold", t.full_name,
         fmt::format("diverges under the {} threshold ({:.3g}): at position {} its error (nmse {:.3g}) is {}, and the "
                     "op replayed from the actual trace's own inputs is off by nmse {:.3g}, over the floor {:.3g} "
                     "that no honest op of this precision reaches",
                     r.profile, t.threshold_nmse, confirmed->position, confirmed->nmse, against_inputs,
                     confirmed->own_nmse, t.own_error_floor_nmse)});
  }
}

void settle_replay_band(DiffResult& r, bool replayed) {
  std::vector<std::string> taps;
  std::int64_t rows = 0;
  for (TapComparison& t : r.taps) {
    if (t.own_error_replayed || !(t.replay_band_nmse > t.threshold_nmse)) continue;
    for (RowMetrics& row : t.rows)
      if (row.diverged && row.nmse <= t.replay_band_nmse && row.nonfinite <= row.nonfinite_expected) {
        row.diverged = false;
        ++rows;
        if (taps.empty() || taps.back() != t.full_name) taps.push_back(t.full_name);
      }
  }
  if (rows == 0 || replayed) return;
  const auto shown = taps.begin() + std::ptrdiff_t(std::min<std::size_t>(taps.size(), 4));
  r.findings.push_back(
      {"unreplayed", taps.size() == 1 ? taps.front() : "",
       fmt::format("{} row{} of {} tap{} ({}{}) over the {} profile's threshold but within its replay band ({:.3g}) "
                   "pass: only a replay of the op from its own inputs (the model, and not --no-diagnosis) tells an "
                   "op's own error there from noise it inherited",
                   rows, rows == 1 ? "" : "s", taps.size(), taps.size() == 1 ? "" : "s",
                   fmt::join(taps.begin(), shown, ", "), taps.size() > 4 ? ", ..." : "", r.profile,
                   r.taps.front().replay_band_nmse)});
}

}  // namespace tapdiff::diff
