#include "diff/judge.hpp"

#include <algorithm>
#include <cmath>

#include "tapdiff/attn_summary.hpp"

namespace tapdiff::diff {
namespace {

constexpr double kReproduces = 1e-3;      // relative residual under which a variant explains B, at most
constexpr double kNoiseFraction = 0.1;    // of the tolerance: replays closer than this are equal
constexpr double kBeatsBaseline = 0.01;   // ... and at most this fraction of the correct one's
constexpr double kClearMargin = 10;       // a different variant within this factor is a tie

// Over the finite values: a NaN or inf in a row is matched value for value by distance().
double sum_squares(const Row& r) {
  double s = 0;
  for (float v : r)
    if (std::isfinite(v)) s += double(v) * v;
  return s;
}

// Σ_i weight_i Σ(x_i - y_i)² over rows both hold; infinite where a row of y is missing or where
// the two differ by a non-finite amount (the same inf or NaN on both sides is no difference).
double distance(const Rows& x, const Rows& y, const std::vector<double>& weight) {
  double err = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i].size() != y[i].size()) return INFINITY;
    double row = 0;
    for (std::size_t k = 0; k < x[i].size(); ++k) {
      const float a = x[i][k], b = y[i][k];
      if (a == b || (std::isnan(a) && std::isnan(b))) continue;
      const double d = double(a) - b;
      if (!std::isfinite(d)) return INFINITY;
      row += d * d;
    }
    err += weight[i] * row;
  }
  return err;
}

bool all_zero(const Rows& rows) {
  for (const Row& r : rows)
    for (float v : r)
      if (v != 0) return false;
  return true;
}

// The summary of an all-zero attn.probs row: every head's largest weight 0 (its other fields
// then say 1 missing, no mean key, nothing after p).
bool summarizes_zero_rows(const Rows& rows) {
  for (const Row& r : rows)
    for (std::size_t h = 0; h + kAttnSummaryFields <= r.size(); h += kAttnSummaryFields)
      if (r[h + 1] != 0) return false;
  return true;
}

}  // namespace

Judgement judge(const std::vector<Candidate>& candidates, const std::vector<std::int64_t>& positions,
                const Rows& actual, const Rows& expected, double tolerance, std::string_view tap) {
  const double noise = kNoiseFraction * tolerance, bar = std::min(kReproduces, tolerance);
  struct Replayed {
    const Candidate* c;
    Rows rows;
    double err;
  };
  std::vector<Replayed> replayed;
  for (const Candidate& c : candidates) {
    Replayed r{&c, {}, 0};
    for (auto p : positions) r.rows.push_back(c.replay(p));
    replayed.push_back(std::move(r));
  }
  const Replayed* baseline = nullptr;
  for (const auto& r : replayed)
    if (r.c->baseline && r.rows.size() == actual.size()) baseline = &r;
  // Each row's scale: the largest of actual, expected and the correct replay, so that neither a
  // zero actual nor a zero prediction makes every error look small. Each row weighs by its own
  // scale, so the residuals are relative row by row: a late position's attention row, spread
  // thin over many keys, counts as much as position 0's one-hot row. A row zero in all three
  // takes the largest row's scale.
  std::vector<double> weight(actual.size(), 0.0), actual_size(actual.size(), 0.0);
  double largest = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    actual_size[i] = sum_squares(actual[i]);
    weight[i] = std::max({actual_size[i], i < expected.size() ? sum_squares(expected[i]) : 0.0,
                          baseline && baseline->rows[i].size() == actual[i].size() ? sum_squares(baseline->rows[i])
                                                                                      : 0.0});
    largest = std::max(largest, weight[i]);
  }
  if (!(largest > 0)) return {};
  const auto scale = double(actual.size());  // every row weighs 1
  double a = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    weight[i] = 1 / (weight[i] > 0 ? weight[i] : largest);
    a += weight[i] * actual_size[i];
  }
  for (auto& r : replayed) r.err = distance(actual, r.rows, weight);
  if (baseline && !std::isfinite(baseline->err)) baseline = nullptr;

  Judgement j;
  if (baseline) j.baseline_residual = baseline->err / scale;
  const bool zero_actual = tap == "attn.probs.summary" ? summarizes_zero_rows(actual) : all_zero(actual);
  // A variant predicting what the correct computation predicts here cannot be judged. Two
  // variants predicting the same values stay apart: they tie, and the report says so.
  std::vector<const Replayed*> judged;
  for (const auto& r : replayed)
    if (!r.c->baseline && std::isfinite(r.err) && !(baseline && distance(baseline->rows, r.rows, weight) <= noise * scale))
      judged.push_back(&r);
  std::stable_sort(judged.begin(), judged.end(), [](auto* x, auto* y) { return x->err < y->err; });
  // A variant must explain the actual values themselves, not just their smallness: its error
  // is judged against the actual's own size (a near-zero prediction "fits" any near-zero
  // actual), within what the precision allows a correct op, and an all-zero actual only by a
  // variant that writes zeros by design. A generic copy of another buffer must be bit-exact:
  // a copy is, and a tap that merely resembles another (a residual stream dominated by the
  // norm's output, say) is not one.
  const double own = zero_actual ? scale : a;
  auto admissible = [&](const Replayed& r) {
    return r.err <= bar * own && (!baseline || r.err <= kBeatsBaseline * baseline->err) &&
           (!zero_actual || r.c->explains_zeros) && !(r.c->generic && !r.c->takes.empty() && r.err > 0);
  };
  // Ties: within the margin, or within the noise. A copy of another buffer is bit-exact when
  // true, so an exact copy is not tied by other copies that merely come close.
  std::vector<const Replayed*> rest;
  if (!judged.empty() && admissible(*judged[0])) {
    const Replayed& best = *judged[0];
    const bool exact_copy = best.err == 0 && !best.c->takes.empty();
    const double tie = std::max(kClearMargin * best.err, noise * own);
    for (const Replayed* r : judged) {
      const bool tied = admissible(*r) && r->err <= tie && !(exact_copy && !r->c->takes.empty() && r->err > 0);
      if (tied)
        j.reproducing.push_back({r->c, r->err / scale});
      else
        rest.push_back(r);
    }
  } else {
    rest = judged;
  }
  // A fitted variant reproduces whatever it was fitted to: a listed one that also reproduces names the bug.
  const bool listed = std::any_of(j.reproducing.begin(), j.reproducing.end(),
                                  [](const Judged& r) { return !r.candidate->fitted; });
  if (listed)
    j.reproducing.erase(std::remove_if(j.reproducing.begin(), j.reproducing.end(),
                                       [](const Judged& r) { return r.candidate->fitted; }),
                        j.reproducing.end());
  // Runners-up come clearly closer than the correct computation (by a tenth of its residual): one
  // no closer explains nothing.
  for (std::size_t i = 0; i < rest.size() && j.runners_up.size() < 3; ++i)
    if (!baseline || rest[i]->err < 0.9 * baseline->err) j.runners_up.push_back({rest[i]->c, rest[i]->err / scale});
  return j;
}

}  // namespace tapdiff::diff
