#include "diff/metrics.hpp"

#include <algorithm>
#include <cmath>

namespace tapdiff::diff {

namespace {

// The common case, every value finite, in vectorized passes: the sums in double as below, in
// another order (their last bits may differ), the maxima exact, the worst element the first at
// the largest difference. False, with m untouched, when a value is not finite. Compiled for
// AVX2 and AVX-512 as well (picked at load time): the division per element made it a fifth of
// diff's time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
bool finite_row_metrics(const float* a, const float* b, std::int64_t n, RowMetrics& m) {
  float max_a = 0, nan_if_not_finite = 0;  // x - x is 0 for a finite x, NaN for ±inf and NaN
#pragma omp simd reduction(max : max_a) reduction(+ : nan_if_not_finite)
  for (std::int64_t i = 0; i < n; ++i) {
    max_a = std::max(max_a, std::fabs(a[i]));
    nan_if_not_finite += (a[i] - a[i]) + (b[i] - b[i]);
  }
  if (!(nan_if_not_finite == 0)) return false;
  const double rel_floor = std::max(1e-6 * double(max_a), 1e-30);
  double err2 = 0, ref2 = 0, dot = 0, act2 = 0, max_abs = 0, max_rel = 0;
#pragma omp simd reduction(+ : err2, ref2, dot, act2) reduction(max : max_abs, max_rel)
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i], d = std::fabs(y - x);
    err2 += d * d;
    ref2 += x * x;
    dot += x * y;
    act2 += y * y;
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, d / std::max(std::fabs(x), rel_floor));
  }
  std::int64_t worst = 0;
  while (worst < n - 1 && std::fabs(double(b[worst]) - double(a[worst])) != max_abs) ++worst;
  m.max_abs = max_abs;
  m.max_rel = max_rel;
  m.nmse = ref2 > 0 ? err2 / ref2 : err2;
  m.cosine = (ref2 > 0 && act2 > 0) ? dot / std::sqrt(ref2 * act2) : (ref2 == act2 ? 1.0 : 0.0);
  if (n > 0) {
    m.worst_index = worst;
    m.worst_expected = a[worst];
    m.worst_actual = b[worst];
  }
  return true;
}

}  // namespace

RowMetrics row_metrics(const float* a, const float* b, std::int64_t n) {
  RowMetrics m;
  if (finite_row_metrics(a, b, n, m)) return m;
  double max_a = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(a[i])) max_a = std::max(max_a, std::abs(double(a[i])));
  const double rel_floor = std::max(1e-6 * max_a, 1e-30);
  double err2 = 0, ref2 = 0, dot = 0, act2 = 0;
  double worst = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    if (!std::isfinite(x)) ++m.nonfinite_expected;
    // |b - a| is infinite (or NaN) where one trace is finite and the other not.
    if (std::isfinite(x) != std::isfinite(y)) m.max_abs = m.max_rel = INFINITY;
    if (!std::isfinite(y)) {
      ++m.nonfinite;
      if (worst < INFINITY) {
        worst = INFINITY;
        m.worst_index = i;
      }
      continue;
    }
    if (!std::isfinite(x)) continue;
    const double d = std::abs(y - x);
    err2 += d * d;
    ref2 += x * x;
    dot += x * y;
    act2 += y * y;
    m.max_abs = std::max(m.max_abs, d);
    m.max_rel = std::max(m.max_rel, d / std::max(std::abs(x), rel_floor));
    if (d > worst) {
      worst = d;
      m.worst_index = i;
    }
  }
  if (m.nonfinite > m.nonfinite_expected) {
    m.nmse = INFINITY;
    m.cosine = NAN;
  } else {
    m.nmse = ref2 > 0 ? err2 / ref2 : err2;
    m.cosine = (ref2 > 0 && act2 > 0) ? dot / std::sqrt(ref2 * act2) : (ref2 == act2 ? 1.0 : 0.0);
  }
  if (m.worst_index >= 0) {
    m.worst_expected = a[m.worst_index];
    m.worst_actual = b[m.worst_index];
  }
  return m;
}

std::vector<double> log_softmax(const float* x, std::int64_t n) {
  double max = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) max = std::max(max, double(x[i]));
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - max);
  const double log_z = max + std::log(sum);
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[std::size_t(i)] = double(x[i]) - log_z;
  return out;
}

double kl_of_log_probs(const std::vector<double>& log_a, const std::vector<double>& log_b) {
  double kl = 0;
  for (std::size_t i = 0; i < log_a.size(); ++i) kl += std::exp(log_a[i]) * (log_a[i] - log_b[i]);
  return kl;
}

// As kl_of_log_probs(log_softmax(a), log_softmax(b)), with two exponentials an element, not three:
// softmax(a) from the exponentials that normalize it.
double kl_divergence(const float* a, const float* b, std::int64_t n) {
  double max_a = -INFINITY, max_b = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) {
    max_a = std::max(max_a, double(a[i]));
    max_b = std::max(max_b, double(b[i]));
  }
  std::vector<double> exp_a(static_cast<std::size_t>(n));
  double sum_a = 0, sum_b = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    exp_a[std::size_t(i)] = std::exp(double(a[i]) - max_a);
    sum_a += exp_a[std::size_t(i)];
    sum_b += std::exp(double(b[i]) - max_b);
  }
  const double log_z_a = max_a + std::log(sum_a), log_z_b = max_b + std::log(sum_b);
  double kl = 0;
  for (std::int64_t i = 0; i < n; ++i)
    kl += exp_a[std::size_t(i)] / sum_a * ((double(a[i]) - log_z_a) - (double(b[i]) - log_z_b));
  return std::max(kl, 0.0);
}

std::vector<std::pair<int, float>> top_k(const float* logits, std::int64_t n, int k) {
  std::vector<int> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[std::size_t(i)] = int(i);
  const auto better = [&](int x, int y) {
    const bool fx = !std::isnan(logits[x]), fy = !std::isnan(logits[y]);
    if (fx != fy) return fx;
    return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
  };
  const auto kk = std::min<std::int64_t>(k, n);
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), better);
  std::vector<std::pair<int, float>> out;
  for (std::int64_t i = 0; i < kk; ++i) out.emplace_back(idx[std::size_t(i)], logits[idx[std::size_t(i)]]);
  return out;
}

void summarize_logits(LogitsSummary& s) {
  s.n_positions = static_cast<std::int64_t>(s.positions.size());
  if (s.positions.empty()) return;
  std::vector<double> kls;
  double sum = 0, sum2 = 0, same = 0, overlap = 0;
  for (const auto& p : s.positions) {
    kls.push_back(p.kl);
    sum += p.kl;
    sum2 += p.kl * p.kl;
    same += p.same_top1;
    overlap += p.top5_overlap;
    if (!p.same_top1 && !s.first_greedy_difference) s.first_greedy_difference = p.position;
  }
  const double n = double(kls.size());
  s.kl_mean = sum / n;
  s.kl_stderr = n > 1 ? std::sqrt(std::max(0.0, (sum2 / n - s.kl_mean * s.kl_mean) / (n - 1))) : 0;
  std::sort(kls.begin(), kls.end());
  s.kl_max = kls.back();
  s.kl_percentiles.clear();
  for (double q : {99.9, 99.0, 95.0, 90.0, 50.0, 10.0, 1.0}) {
    // Linear interpolation between closest ranks.
    const double rank = q / 100.0 * (n - 1);
    const auto lo = static_cast<std::size_t>(std::floor(rank));
    const auto hi = std::min(lo + 1, kls.size() - 1);
    s.kl_percentiles.emplace_back(q, kls[lo] + (kls[hi] - kls[lo]) * (rank - double(lo)));
  }
  s.same_top1_rate = same / n;
  s.mean_top5_overlap = overlap / n;
}

}  // namespace tapdiff::diff
