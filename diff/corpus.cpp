#include "diff/corpus.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <tuple>

#include "diff/metrics.hpp"

namespace tapdiff::diff {
namespace {

// llama.cpp's mean with the standard error of the mean (0 for ten values or fewer).
std::pair<double, double> mean_and_uncertainty(double sum, double sum2, std::int64_t count) {
  if (count < 1) return {0, 0};
  const double mean = sum / double(count);
  const double var = sum2 / double(count) - mean * mean;
  return {mean, var > 0 && count > 10 ? std::sqrt(var / double(count - 1)) : 0};
}

// Linear interpolation between the closest ranks of sorted values, as llama.cpp's percentile().
double percentile(const std::vector<double>& sorted, double fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * double(sorted.size() - 1);
  const auto i = static_cast<std::size_t>(p);
  const double f = p - double(i);
  return (1 - f) * sorted[i] + f * sorted[std::min(i + 1, sorted.size() - 1)];
}

double median(const std::vector<double>& sorted) {
  const std::size_t n = sorted.size();
  return n % 2 == 0 ? 0.5 * (sorted[n / 2] + sorted[n / 2 - 1]) : sorted[n / 2];
}

}  // namespace

void CorpusStats::add(const float* expected_logits, const float* actual_logits, std::int64_t n_vocab,
                      int next_token, int window, std::int64_t position) {
  const std::vector<double> base = log_softmax(expected_logits, n_vocab), log_p = log_softmax(actual_logits, n_vocab);
  const auto top_base = std::max_element(expected_logits, expected_logits + n_vocab) - expected_logits;
  const auto top = std::max_element(actual_logits, actual_logits + n_vocab) - actual_logits;
  const auto t = std::size_t(next_token);
  const double nll = -log_p[t], nll_base = -base[t];
  sum_nll_ += nll;
  sum_nll2_ += nll * nll;
  sum_nll_base_ += nll_base;
  sum_nll_base2_ += nll_base * nll_base;
  sum_diff2_ += (nll - nll_base) * (nll - nll_base);
  const double kld = kl_of_log_probs(base, log_p);
  sum_kld_ += kld;
  sum_kld2_ += kld * kld;
  const double p_diff = std::exp(-nll) - std::exp(-nll_base);
  sum_p_diff_ += p_diff;
  sum_p_diff2_ += p_diff * p_diff;
  sum_p_diff4_ += p_diff * p_diff * p_diff * p_diff;
  same_top_ += top == top_base;
  if (kld_.empty() || kld > worst_kld_) {
    worst_kld_ = kld;
    worst_window_ = window;
    worst_position_ = position;
  }
  kld_.push_back(kld);
  p_diff_.push_back(p_diff);
  ++count_;
}

CorpusStats::Summary CorpusStats::summary() const {
  Summary s;
  s.count = count_;
  if (count_ == 0) return s;
  const auto log_ppl = mean_and_uncertainty(sum_nll_, sum_nll2_, count_);
  const auto log_ppl_base = mean_and_uncertainty(sum_nll_base_, sum_nll_base2_, count_);
  s.ppl = std::exp(log_ppl.first);
  s.ppl_unc = s.ppl * log_ppl.second;
  s.ppl_base = std::exp(log_ppl_base.first);
  s.ppl_base_unc = s.ppl_base * log_ppl_base.second;
  // llama.cpp takes the ratio's uncertainty as sqrt(unc² + unc_base² - 2 cov): the same as the
  // uncertainty of the per-token differences nll - nll_base, which is computed here from those
  // differences, since when both sides agree closely the subtraction leaves only rounding noise.
  // The covariance (and the correlation) follow from it.
  const auto log_ratio = mean_and_uncertainty(sum_nll_ - sum_nll_base_, sum_diff2_, count_);
  const double cov = count_ < 10 ? 0
                                 : 0.5 * (log_ppl.second * log_ppl.second + log_ppl_base.second * log_ppl_base.second -
                                          log_ratio.second * log_ratio.second);
  const double spread = log_ppl.second * log_ppl_base.second;
  s.log_ppl_cor = spread > 0 ? cov / spread : 0;
  s.log_ppl_ratio = log_ratio.first;
  s.log_ppl_ratio_unc = log_ratio.second;
  s.ppl_ratio = std::exp(s.log_ppl_ratio);
  s.ppl_ratio_unc = s.ppl_ratio * s.log_ppl_ratio_unc;
  s.ppl_diff = s.ppl - s.ppl_base;
  s.ppl_diff_unc = std::sqrt(std::max(0.0, s.ppl_unc * s.ppl_unc + s.ppl_base_unc * s.ppl_base_unc -
                                               2 * s.ppl * s.ppl_base * cov));

  std::vector<double> kld = kld_, p_diff = p_diff_;
  std::sort(kld.begin(), kld.end());
  std::sort(p_diff.begin(), p_diff.end());
  std::tie(s.kld_mean, s.kld_unc) = mean_and_uncertainty(sum_kld_, sum_kld2_, count_);
  s.kld_max = kld.back();
  s.kld_min = kld.front();
  s.kld_median = median(kld);
  for (double q : {99.9, 99.0, 95.0, 90.0, 10.0, 5.0, 1.0, 0.1}) s.kld_percentiles.emplace_back(q, percentile(kld, q / 100));
  std::tie(s.p_diff_mean, s.p_diff_unc) = mean_and_uncertainty(sum_p_diff_, sum_p_diff2_, count_);
  s.p_diff_max = p_diff.back();
  s.p_diff_min = p_diff.front();
  s.p_diff_median = median(p_diff);
  for (double q : {99.9, 99.0, 95.0, 90.0, 75.0, 25.0, 10.0, 5.0, 1.0, 0.1})
    s.p_diff_percentiles.emplace_back(q, percentile(p_diff, q / 100));
  const auto mse = mean_and_uncertainty(sum_p_diff2_, sum_p_diff4_, count_);
  s.p_diff_rms = std::sqrt(mse.first);
  s.p_diff_rms_unc = s.p_diff_rms > 0 ? 0.5 / s.p_diff_rms * mse.second : 0;
  s.same_top = double(same_top_) / double(count_);
  s.same_top_unc = count_ > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / double(count_ - 1)) : 0;
  s.worst_window = worst_window_;
  s.worst_position = worst_position_;
  return s;
}

CorpusGate corpus_gate_for(const std::string& precision, const CorpusGate& given) {
  CorpusGate g;
  if (precision == "q8") {  // llama.cpp on quantized weights: 8-bit activations in every dot product
    g.max_kld_mean = 2e-2;
    g.max_kld_99 = 1e-1;
    g.min_same_top = 0.90;
    g.max_ppl_ratio = 1.03;
  } else if (precision == "bf16") {
    g.max_kld_mean = 2e-3;
    g.max_kld_99 = 2e-2;
    g.min_same_top = 0.95;
    g.max_ppl_ratio = 1.01;
  } else if (precision == "f16") {
    g.max_kld_mean = 1e-4;
    g.max_kld_99 = 1e-3;
    g.min_same_top = 0.98;
    g.max_ppl_ratio = 1.001;
  } else {
    g.max_kld_mean = 1e-6;
    g.max_kld_99 = 1e-5;
    g.min_same_top = 0.99;
    g.max_ppl_ratio = 1.0001;
  }
  for (auto [limit, replacement] : {std::pair{&g.max_kld_mean, &given.max_kld_mean}, std::pair{&g.max_kld_99, &given.max_kld_99},
                                    std::pair{&g.min_same_top, &given.min_same_top},
                                    std::pair{&g.max_ppl_ratio, &given.max_ppl_ratio}})
    if (*replacement) *limit = *replacement;
  return g;
}

std::vector<std::string> corpus_gate_failures(const CorpusStats::Summary& s, const CorpusGate& g) {
  std::vector<std::string> out;
  const double kld_99 = s.kld_percentiles.size() > 1 ? s.kld_percentiles[1].second : s.kld_max;
  if (g.max_kld_mean && !(s.kld_mean <= *g.max_kld_mean))
    out.push_back(fmt::format("mean KLD {:.6g} > {:.6g}", s.kld_mean, *g.max_kld_mean));
  if (g.max_kld_99 && !(kld_99 <= *g.max_kld_99))
    out.push_back(fmt::format("99% KLD {:.6g} > {:.6g}", kld_99, *g.max_kld_99));
  if (g.min_same_top && !(s.same_top >= *g.min_same_top))
    out.push_back(fmt::format("same top {:.3f}% < {:.3f}%", 100 * s.same_top, 100 * *g.min_same_top));
  if (g.max_ppl_ratio && !(s.ppl_ratio <= *g.max_ppl_ratio))
    out.push_back(fmt::format("PPL ratio {:.6g} > {:.6g}", s.ppl_ratio, *g.max_ppl_ratio));
  return out;
}

}  // namespace tapdiff::diff
