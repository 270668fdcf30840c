// Error metrics of an actual row b against an expected row a, and of actual logits against
// expected logits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff::diff {

RowMetrics row_metrics(const float* a, const float* b, std::int64_t n);

// KL(softmax(a) || softmax(b)) in nats, computed in double (never below 0).
double kl_divergence(const float* a_logits, const float* b_logits, std::int64_t n);
// log softmax of n logits, in double.
std::vector<double> log_softmax(const float* logits, std::int64_t n);
// Σ exp(a_i) (a_i − b_i) of two log-probability vectors: KL as summed, rounding may leave it < 0.
double kl_of_log_probs(const std::vector<double>& log_a, const std::vector<double>& log_b);
// The k largest (index, value), largest first; ties by lower index.
std::vector<std::pair<int, float>> top_k(const float* logits, std::int64_t n, int k);

// llama.cpp-style summary (mean ± stderr, max, percentiles) of per-position logits results.
void summarize_logits(LogitsSummary& summary);

}  // namespace tapdiff::diff
