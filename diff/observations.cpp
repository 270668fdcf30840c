#include "diff/observations.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace tapdiff::diff {
namespace {

double nmse_against(const Row& actual, const Row& model) {
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    err += (double(actual[i]) - model[i]) * (double(actual[i]) - model[i]);
    ref += double(model[i]) * model[i];
  }
  return ref > 0 ? err / ref : INFINITY;
}

// The shapes of B at one position that name no cause but narrow the search.
void degenerate_shapes(const Row& a, const Row& b, Observations& o) {
  if (a.size() != b.size() || b.empty()) return;
  constexpr double kClose = 1e-4;
  const bool zero = std::all_of(b.begin(), b.end(), [](float v) { return v == 0; });
  if (zero) {
    o.lines.push_back("the actual values are all zero: never written, or never loaded");
    return;
  }
  if (std::all_of(b.begin(), b.end(), [&](float v) { return v == b.front(); })) {
    o.lines.push_back(fmt::format("every actual value is {:g}: a constant fill, not a computed row", b.front()));
    return;
  }
  Row negated(a.size());
  std::transform(a.begin(), a.end(), negated.begin(), [](float v) { return -v; });
  if (nmse_against(b, negated) < kClose) {
    o.lines.push_back("the actual values are the expected ones with the sign flipped");
    return;
  }
  double ab = 0, aa = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i];
  if (aa > 0) {
    const double c = ab / aa;
    Row scaled(a.size());
    std::transform(a.begin(), a.end(), scaled.begin(), [c](float v) { return float(c * v); });
    if (nmse_against(b, scaled) < kClose) {
      o.lines.push_back(fmt::format("the actual values are the expected ones times {:.6g} (a scale factor)", c));
      return;
    }
  }
  Row sa = a, sb = b;
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  if (nmse_against(sb, sa) < kClose)
    o.lines.push_back("the actual values are the expected ones in another order (a permutation: an index or "
                      "layout error)");
}

}  // namespace

Observations observe(const DiffResult& r, const FirstDivergence& f, const TraceReader& a, const TraceReader& b) {
  Observations o;
  o.lines.push_back(fmt::format("diverges at {}", position_pattern_text(f.pattern, f.position)));
  const TapComparison* t = find_tap(r, f.tap);
  if (t && !t->rows.empty() && t->rows.front().position == 0 && f.position > 0)
    o.lines.push_back(fmt::format("position 0 intact (nmse {:.2g}): RoPE, the attention scale and the "
                                  "KV cache leave a lone first position untouched",
                                  t->rows.front().nmse));
  if (f.position >= a.metadata().prompt_length && f.position > 0)
    o.lines.push_back(fmt::format("the prompt (positions 0..{}) is intact: the first decode step is the first to "
                                  "diverge",
                                  a.metadata().prompt_length - 1));
  if (f.metrics.nonfinite > f.metrics.nonfinite_expected)
    o.lines.push_back(fmt::format("{} non-finite values appear here while every input is finite", f.metrics.nonfinite));
  const Row ra = trace_row(a, f.name, f.layer, f.position), rb = trace_row(b, f.name, f.layer, f.position);
  degenerate_shapes(ra, rb, o);
  if (f.diverged_positions.size() >= 2 && t) {
    // B - A the same vector at every diverged position: an additive constant.
    std::vector<double> first_delta;
    double spread = 0, size = 0;
    for (std::size_t k = 0; k < std::min<std::size_t>(f.diverged_positions.size(), 8); ++k) {
      const auto p = f.diverged_positions[k];
      const Row xa = trace_row(a, f.name, f.layer, p), xb = trace_row(b, f.name, f.layer, p);
      if (xa.empty() || xa.size() != xb.size()) break;
      std::vector<double> delta(xa.size());
      for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = double(xb[i]) - xa[i];
      if (first_delta.empty()) {
        first_delta = delta;
        for (double d : delta) size += d * d;
      } else {
        for (std::size_t i = 0; i < delta.size(); ++i) spread += (delta[i] - first_delta[i]) * (delta[i] - first_delta[i]);
      }
    }
    if (size > 0 && spread < 1e-4 * size) {
      o.constant_offset = true;
      o.lines.push_back("the error is the same vector at every diverged position: a constant offset per row");
    }
  }
  return o;
}

}  // namespace tapdiff::diff
