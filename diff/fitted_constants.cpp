#include "diff/fitted_constants.hpp"

#include <algorithm>
#include <cmath>

namespace tapdiff::diff {

std::optional<double> fit_rope_base(const std::vector<float>& x, const std::vector<float>& y, int n_heads,
                                    int head_dim, int n_rot, std::int64_t position, ref::Pairing pairing) {
  const int half = n_rot / 2;
  if (position < 1 || half < 2 || x.size() != y.size() ||
      x.size() < std::size_t(n_heads) * std::size_t(head_dim))
    return std::nullopt;
  std::vector<double> bases;
  for (int i = 1; i < half; ++i) {
    // Amplitude-weighted mean of the pair's rotation over the heads: sum of a×a' and a·a'.
    double cross = 0, dot = 0;
    const int ia = pairing == ref::Pairing::norm ? 2 * i : i;
    const int ib = pairing == ref::Pairing::norm ? 2 * i + 1 : i + half;
    for (int h = 0; h < n_heads; ++h) {
      const std::size_t o = std::size_t(h) * std::size_t(head_dim);
      const double a = x[o + ia], b = x[o + ib], a2 = y[o + ia], b2 = y[o + ib];
      cross += a * b2 - b * a2;
      dot += a * a2 + b * b2;
    }
    const double angle = std::atan2(cross, dot);
    // Small angles are imprecise; large ones may have wrapped past pi.
    if (angle < 0.05 || angle > 2.5) continue;
    bases.push_back(std::pow(double(position) / angle, double(n_rot) / (2.0 * i)));
  }
  if (bases.empty()) return std::nullopt;
  std::nth_element(bases.begin(), bases.begin() + std::ptrdiff_t(bases.size() / 2), bases.end());
  const double base = bases[bases.size() / 2];
  return std::isfinite(base) && base > 1 ? std::optional<double>(base) : std::nullopt;
}

std::optional<double> fit_scale(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.empty() || x.size() != y.size()) return std::nullopt;
  double xy = 0, xx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) xy += double(x[i]) * y[i], xx += double(x[i]) * x[i];
  return xx > 0 ? std::optional<double>(xy / xx) : std::nullopt;
}

std::optional<GeluConstants> fit_gelu_constants(const std::vector<float>& gate, const std::vector<float>& up,
                                                const std::vector<float>& act) {
  if (gate.empty() || gate.size() != up.size() || gate.size() != act.size()) return std::nullopt;
  // Normal equations of z = k g + kc g³ in the unknowns (k, kc).
  double s11 = 0, s13 = 0, s33 = 0, s1z = 0, s3z = 0;
  int n = 0;
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i], u = up[i];
    if (std::abs(g) < 1e-2 || std::abs(u) < 1e-3) continue;
    const double t = 2 * double(act[i]) / (g * u) - 1;
    if (!(std::abs(t) < 0.95)) continue;  // near +-1 atanh amplifies the rounding
    const double z = std::atanh(t), g3 = g * g * g;
    s11 += g * g, s13 += g * g3, s33 += g3 * g3, s1z += g * z, s3z += g3 * z, ++n;
  }
  const double det = s11 * s33 - s13 * s13;
  if (n < 8 || !(det > 1e-12 * s11 * s33)) return std::nullopt;
  const double k = (s1z * s33 - s3z * s13) / det, kc = (s11 * s3z - s13 * s1z) / det;
  if (!(k > 0) || !std::isfinite(kc)) return std::nullopt;
  return GeluConstants{k, kc / k};
}

std::optional<double> fit_swiglu_limit(const std::vector<float>& gate, const std::vector<float>& up,
                                       const std::vector<float>& act) {
  if (gate.empty() || gate.size() != up.size() || gate.size() != act.size()) return std::nullopt;
  double scale = 0;
  for (float a : act) scale = std::max(scale, std::abs(double(a)));
  double bound = HUGE_VAL;
  for (std::size_t i = 0; i < gate.size(); ++i)
    if (std::abs(ref::silu(double(gate[i])) * up[i] - act[i]) > 1e-4 * scale)
      bound = std::min(bound, std::max(double(gate[i]), std::abs(double(up[i]))));
  if (!(bound > 0 && bound < HUGE_VAL)) return std::nullopt;
  const auto error = [&](double c) {
    double e = 0;
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const double d = swiglu_clamped(gate[i], up[i], c) - act[i];
      e += d * d;
    }
    return e;
  };
  constexpr int kSteps = 256;
  int best = kSteps;
  for (int k = 1; k < kSteps; ++k)
    if (error(bound * k / kSteps) < error(bound * best / kSteps)) best = k;
  double lo = bound * (best - 1) / kSteps, hi = bound * std::min(best + 1, kSteps) / kSteps;
  const double phi = (std::sqrt(5.0) - 1) / 2;
  for (int i = 0; i < 60; ++i) {
    const double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo);
    if (error(a) < error(b)) hi = b;
    else lo = a;
  }
  const double c = (lo + hi) / 2;
  if (!(error(c) < error(HUGE_VAL))) return std::nullopt;
  return c;
}

std::optional<double> fit_score_scale(const std::vector<float>& actual, const std::vector<float>& correct,
                                      int n_head) {
  if (actual.empty() || actual.size() != correct.size() || n_head < 1 || actual.size() % std::size_t(n_head) != 0)
    return std::nullopt;
  const std::size_t keys = actual.size() / std::size_t(n_head);
  double xy = 0, xx = 0;
  for (std::size_t h = 0; h < std::size_t(n_head); ++h) {
    double sx = 0, sy = 0, sxy = 0, sxx = 0, n = 0;
    for (std::size_t t = h * keys; t < (h + 1) * keys; ++t) {
      if (!(actual[t] > 0 && correct[t] > 0)) continue;
      const double x = std::log(double(correct[t])), y = std::log(double(actual[t]));
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      sx += x, sy += y, sxy += x * y, sxx += x * x, n += 1;
    }
    if (n < 2) continue;
    xy += sxy - sx * sy / n;
    xx += sxx - sx * sx / n;
  }
  return xx > 1e-12 && xy > 0 ? std::optional<double>(xy / xx) : std::nullopt;
}

std::optional<std::vector<int>> fit_head_sources(const std::vector<float>& actual, int n_head, int n_options,
                                                 const std::function<const float*(int head, int source)>& source) {
  if (actual.empty() || n_head < 1 || actual.size() % std::size_t(n_head) != 0) return std::nullopt;
  const std::size_t size = actual.size() / std::size_t(n_head);
  std::vector<int> from(std::size_t(n_head), -1);
  for (int h = 0; h < n_head; ++h) {
    const float* a = actual.data() + std::size_t(h) * size;
    double own = 0, best = INFINITY, next = INFINITY;
    for (std::size_t i = 0; i < size; ++i) own += double(a[i]) * double(a[i]);
    for (int k = 0; k < n_options; ++k) {
      const float* b = source(h, k);
      if (b == nullptr) continue;
      double e = 0;
      for (std::size_t i = 0; i < size; ++i) e += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
      if (!(e < next)) continue;
      if (e < best) next = best, best = e, from[std::size_t(h)] = k;
      else next = e;
    }
    if (from[std::size_t(h)] < 0 || !(own > 0) || best > 1e-2 * own || best > 0.25 * next) return std::nullopt;
  }
  return from;
}

std::optional<double> fit_rms_eps(const std::vector<float>& x, const std::vector<float>& y, const float* w) {
  if (x.empty() || x.size() != y.size()) return std::nullopt;
  double ms = 0, xy = 0, xx = 0;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const double xw = double(x[j]) * (w ? double(w[j]) : 1.0);
    ms += double(x[j]) * double(x[j]);
    xy += xw * double(y[j]);
    xx += xw * xw;
  }
  ms /= double(x.size());
  if (xx <= 0 || xy <= 0) return std::nullopt;
  const double scale = xy / xx;  // 1 / sqrt(ms + eps)
  const double eps = 1.0 / (scale * scale) - ms;
  return std::isfinite(eps) && eps > 0 ? std::optional<double>(eps) : std::nullopt;
}

std::optional<std::vector<bool>> fit_bias_mask(const std::vector<float>& without, const std::vector<float>& actual,
                                               const std::vector<float>& b) {
  const std::size_t n = b.size();
  if (n == 0 || without.size() != n || actual.size() != n) return std::nullopt;
  float row = 0;
  for (float v : actual) row = std::max(row, std::fabs(v));
  const float told = 1e-2f * row;  // a bias this small hides in a 16-bit row's rounding
  std::vector<bool> added(n);
  std::size_t seen = 0, on = 0, first_told = n;
  for (std::size_t i = 0; i < n; ++i) {
    const float bi = std::fabs(b[i]), d = actual[i] - without[i];
    if (bi > told) {
      const bool near_b = std::fabs(d - b[i]) < 0.25f * bi, near_0 = std::fabs(d) < 0.25f * bi;
      if (near_b == near_0) return std::nullopt;
      first_told = std::min(first_told, i);
      ++seen;
      on += near_b;
      added[i] = near_b;
    } else if (i > 0) {
      added[i] = added[i - 1];
    }
  }
  if (seen == 0 || on == 0 || on == seen) return std::nullopt;
  for (std::size_t i = 0; i < first_told; ++i) added[i] = added[first_told];
  return added;
}

}  // namespace tapdiff::diff
