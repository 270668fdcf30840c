// attn.probs.summary: four numbers per head that say where a row of attn.probs put its weight,
// so a long context can keep attention evidence without the O(n²) rows. The trace writer
// derives it from every attn.probs row it is given (docs/taps.md, "Row layouts"); diff reduces
// a replayed attn.probs row the same way to test a hypothesis against it.
#pragma once

#include <cstdint>

namespace tapdiff {

// Per head, in this order:
//   missing   1 - Σ_j w_j                          0 for a softmax
//   max       max_j w_j
//   mean_key  Σ_j w_j · j / max(p, 1)              0: all on key 0; 1: all on key p
//   future    Σ_{j > p} w_j                        0 under a causal mask
inline constexpr int kAttnSummaryFields = 4;
inline constexpr const char* kAttnSummaryFieldNames[kAttnSummaryFields] = {"missing", "max", "mean_key", "future"};

// probs: one row [n_head, width] for position p (entry [h, j]: head h's weight on key j);
// summary: [n_head, kAttnSummaryFields]. Sums in double. The two fields a correct softmax keeps
// at 0 (missing, future) say directly what a mask or normalization bug did, and do not dilute
// the row's NMSE with a constant.
void summarize_attention_row(const float* probs, std::int64_t n_head, std::int64_t width, std::int64_t position,
                             float* summary);

}  // namespace tapdiff
