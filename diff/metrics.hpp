// Error metrics of an actual row b against an expected row a, and of actual logits against
// expected logits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff::diff {

RowMetrics row_metrics(const float* a, const float* b, std::int64_t n);

// KL(softmax(a) || softmax(b)) in nats, computed in double.
double kl_divergence(const float* a_logits, const float* b_logits, std::int64_t n);
// The k largest (index, value), largest first; ties by lower index.
std::vector<std::pair<int, float>> top_k(const float* logits, std::int64_t n, int k);

// llama.cpp-style summary (mean ± stderr, max, percentiles) of per-position logits results.
void summarize_logits(LogitsSummary& summary);

}  // namespace tapdiff::diff
