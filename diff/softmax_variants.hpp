// The softmax as a buggy engine may have computed it: edits of a correct attention replay's
// probabilities ([n_head][stride]) and output ([n_head][head_dim]) in place, from the same q,
// K and V (hypotheses_attention.cpp replays the cache and calls these).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/ops.hpp"

namespace tapdiff::diff {

// The mask applied to probabilities already normalized over n_keys keys: the masked-out ones
// zeroed, the rest not renormalized, and the output recomputed from what is left.
void mask_after_softmax(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& V,
                        const ref::AttentionShape& shape, ref::GqaMap map, std::int64_t visible,
                        std::int64_t n_keys, std::int64_t stride);

// The softmax with 1 added to its denominator ("quiet" or off-by-one softmax): each head's
// probabilities and output times Z / (1 + Z).
void quiet_softmax(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                   const std::vector<double>& K, const ref::AttentionShape& shape, ref::GqaMap map, float scale,
                   float cap, std::int64_t first, std::int64_t n_keys, std::int64_t stride);

// Masked keys scored `masked` instead of -inf: the batch's later keys [n_keys, batch_end) and a
// window's earlier ones [0, first) (a mask's fill value written as 0; a soft-cap applied after
// the mask, -inf capped to -cap). Each head's softmax gains exp(masked) per such key, so the
// visible keys keep Z / (Z + E) of their weight, E those keys' exp(masked).
void masked_keys_scored(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                        const std::vector<double>& K, const std::vector<double>& V, const ref::AttentionShape& shape,
                        ref::GqaMap map, float scale, float cap, std::int64_t first, std::int64_t n_keys,
                        std::int64_t batch_end, std::int64_t stride, double masked);

// The softmax run in 16-bit floats, the output recomputed from its probabilities: `whole` (torch's
// softmax of a half tensor) each score rounded to f16, the probabilities computed from those and
// rounded to f16; `whole_bf16` the same in bf16; `exponentials` only exp(s - max) kept in f16,
// summed and divided in f32; `sum_f16` / `sum_bf16` only the denominator accumulated key by key in
// f16 / bf16 (each term and partial sum rounded: past a few hundred keys small terms stop counting).
enum class HalfSoftmax { whole, whole_bf16, exponentials, sum_f16, sum_bf16 };
void half_precision_softmax(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                            const std::vector<double>& K, const std::vector<double>& V, const ref::AttentionShape& shape,
                            ref::GqaMap map, float scale, float cap, std::int64_t first, std::int64_t n_keys,
                            std::int64_t stride, HalfSoftmax rounded);

// An online softmax (keys visited in order) whose running sum is not rescaled when the running
// max grows: S = Σ_t exp(s_t − M_t), M_t the max up to key t, while the output's accumulator is
// rescaled right; each head's probabilities and output are the correct ones times Z / S ≤ 1.
void online_sum_not_rescaled(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                             const std::vector<double>& K, const ref::AttentionShape& shape, ref::GqaMap map,
                             float scale, float cap, std::int64_t first, std::int64_t n_keys, std::int64_t stride);

// Probabilities p soft-capped after the softmax, c · tanh(p / c), and the output recomputed.
void cap_probabilities(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& V,
                       const ref::AttentionShape& shape, ref::GqaMap map, float cap, std::int64_t first,
                       std::int64_t n_keys, std::int64_t stride);

// The output of an online softmax that never divides by its sum: each head's output times
// Σ_t exp(s_t − max s) = 1 / (its largest probability).
void scale_heads_by_softmax_sum(const std::vector<double>& probs, std::vector<double>& out, int n_head,
                                std::int64_t stride);

}  // namespace tapdiff::diff
