// Corpus statistics: the actual logits against the expected ones token by token over a text, as
// `llama-perplexity --kl-divergence` reports them (tools/perplexity/perplexity.cpp): perplexity of
// both sides, KL divergence, Δp (the change in the probability of the right next token) and how
// often both choose the same top token, with llama.cpp's uncertainties and percentiles. Computed
// in double from the float32 logits, without llama.cpp's 16-bit storage of the base log-probs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tapdiff::diff {

class CorpusStats {
public:
  // One scored token: logits of both sides at a position and the token that follows it.
  // window/position locate it for the report of the worst token.
  void add(const float* expected_logits, const float* actual_logits, std::int64_t n_vocab, int next_token,
           int window, std::int64_t position);

  std::int64_t count() const { return count_; }

  struct Summary {
    std::int64_t count = 0;
    double ppl = 0, ppl_unc = 0;            // actual (llama.cpp's Q)
    double ppl_base = 0, ppl_base_unc = 0;  // expected (base)
    double log_ppl_cor = 0;                 // Cor(ln PPL(Q), ln PPL(base))
    double log_ppl_ratio = 0, log_ppl_ratio_unc = 0;
    double ppl_ratio = 0, ppl_ratio_unc = 0;
    double ppl_diff = 0, ppl_diff_unc = 0;
    double kld_mean = 0, kld_unc = 0, kld_max = 0, kld_median = 0, kld_min = 0;
    std::vector<std::pair<double, double>> kld_percentiles;  // (99.9, 99, 95, 90, 10, 5, 1, 0.1 %, value)
    double p_diff_mean = 0, p_diff_unc = 0, p_diff_max = 0, p_diff_median = 0, p_diff_min = 0;  // fractions
    std::vector<std::pair<double, double>> p_diff_percentiles;  // (99.9, 99, 95, 90, 75, 25, 10, 5, 1, 0.1 %, value)
    double p_diff_rms = 0, p_diff_rms_unc = 0;
    double same_top = 0, same_top_unc = 0;  // fractions
    int worst_window = -1;                  // the token of the largest KL divergence
    std::int64_t worst_position = -1;
  };
  Summary summary() const;

private:
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_diff2_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0, sum_p_diff_ = 0, sum_p_diff2_ = 0, sum_p_diff4_ = 0;
  std::int64_t same_top_ = 0, count_ = 0;
  std::vector<double> kld_, p_diff_;
  double worst_kld_ = 0;
  int worst_window_ = -1;
  std::int64_t worst_position_ = -1;
};

// What a corpus check must stay within; a limit that is nullopt is not checked.
struct CorpusGate {
  std::optional<double> max_kld_mean;
  std::optional<double> max_kld_99;       // the 99th percentile of KL divergence
  std::optional<double> min_same_top;     // fraction
  std::optional<double> max_ppl_ratio;    // PPL(actual) / PPL(expected)
};

// What `check --corpus` found: the statistics, the gate and the limits broken.
struct CorpusReport {
  std::string corpus;    // the text or token file
  std::string expected;  // "reference f32"
  std::string actual;    // "engine-host f16, fault rope-wrong-base"
  std::int64_t n_tokens = 0;
  int window = 0;        // tokens per window
  int n_windows = 0;
  CorpusStats::Summary summary;
  CorpusGate gate;
  std::vector<std::string> failures;  // empty: pass
  // When the gate fails: the first finding of the window of the largest KL divergence, run
  // again with every tap ("blk.0.attn_q.rope @ 70 · rope (...)"), and its traces when kept.
  std::string worst_window_finding;
  std::vector<std::string> worst_window_traces;
};

// The gate for a precision ("f32", "f16", "bf16", "q8"), from the figures in docs/tolerance.md;
// each limit `given` sets replaces the precision's.
CorpusGate corpus_gate_for(const std::string& precision, const CorpusGate& given = {});

// Each limit the summary breaks, in words ("mean KLD 0.0123 > 0.001"); empty when it passes.
std::vector<std::string> corpus_gate_failures(const CorpusStats::Summary& s, const CorpusGate& gate);

}  // namespace tapdiff::diff
