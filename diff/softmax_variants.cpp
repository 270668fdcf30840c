#include "diff/softmax_variants.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "model/half.hpp"

namespace tapdiff::diff {
namespace {

// Query head h's score of key t: its scaled and soft-capped dot product with the key's kv head.
double score_of(const std::vector<double>& q, const std::vector<double>& K, const ref::AttentionShape& shape,
                ref::GqaMap map, float scale, float cap, int h, std::int64_t t) {
  const int kv_dim = shape.n_head_kv * shape.head_dim, g = ref::kv_head_for(h, shape.n_head, shape.n_head_kv, map);
  double score = 0;
  for (int d = 0; d < shape.head_dim; ++d)
    score += q[std::size_t(h * shape.head_dim + d)] * K[std::size_t(t * kv_dim + g * shape.head_dim + d)];
  score *= scale;
  ref::softcap(&score, 1, cap);
  return score;
}

// Z = Σ_t exp(s_t) of head h's softmax over keys [first, n_keys), read off its likeliest key
// (p_t = exp(s_t) / Z); 0 when no key has weight or Z overflows (a term added to it is then lost).
double head_softmax_sum(const double* ph, const std::vector<double>& q, const std::vector<double>& K,
                        const ref::AttentionShape& shape, ref::GqaMap map, float scale, float cap, int h,
                        std::int64_t first, std::int64_t n_keys) {
  const std::int64_t t = std::max_element(ph + first, ph + n_keys) - ph;
  if (t >= n_keys || !(ph[t] > 0)) return 0;
  const double z = std::exp(score_of(q, K, shape, map, scale, cap, h, t) - std::log(ph[t]));
  return std::isfinite(z) ? z : 0;
}

}  // namespace

// The mask applied to probabilities already normalized over n_keys keys: the masked-out ones
// zeroed, the rest not renormalized, and the output recomputed from what is left.
void mask_after_softmax(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& V,
                        const ref::AttentionShape& shape, ref::GqaMap map, std::int64_t visible,
                        std::int64_t n_keys, std::int64_t stride) {
  const int kv_dim = shape.n_head_kv * shape.head_dim;
  for (int h = 0; h < shape.n_head; ++h) {
    const int g = ref::kv_head_for(h, shape.n_head, shape.n_head_kv, map);
    double* ph = probs.data() + std::int64_t(h) * stride;
    for (std::int64_t t = visible; t < n_keys; ++t) ph[t] = 0;
    double* oh = out.data() + std::int64_t(h) * shape.head_dim;
    std::fill(oh, oh + shape.head_dim, 0.0);
    for (std::int64_t t = 0; t < visible; ++t)
      for (int d = 0; d < shape.head_dim; ++d) oh[d] += ph[t] * V[std::size_t(t * kv_dim + g * shape.head_dim + d)];
  }
}

// The softmax with 1 added to its denominator ("quiet" or off-by-one softmax): each head's
// probabilities and output times Z / (1 + Z).
void quiet_softmax(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                   const std::vector<double>& K, const ref::AttentionShape& shape, ref::GqaMap map, float scale,
                   float cap, std::int64_t first, std::int64_t n_keys, std::int64_t stride) {
  for (int h = 0; h < shape.n_head; ++h) {
    double* ph = probs.data() + std::int64_t(h) * stride;
    const double z = head_softmax_sum(ph, q, K, shape, map, scale, cap, h, first, n_keys);
    if (!(z > 0)) continue;
    const double kept = z / (1 + z);
    for (std::int64_t k = first; k < n_keys; ++k) ph[k] *= kept;
    for (int d = 0; d < shape.head_dim; ++d) out[std::size_t(h * shape.head_dim + d)] *= kept;
  }
}

void masked_keys_scored(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                        const std::vector<double>& K, const std::vector<double>& V, const ref::AttentionShape& shape,
                        ref::GqaMap map, float scale, float cap, std::int64_t first, std::int64_t n_keys,
                        std::int64_t batch_end, std::int64_t stride, double masked) {
  const int kv_dim = shape.n_head_kv * shape.head_dim;
  const double weight = std::exp(masked), extra = double(first + batch_end - n_keys) * weight;
  for (int h = 0; h < shape.n_head; ++h) {
    double* ph = probs.data() + std::int64_t(h) * stride;
    const double z = head_softmax_sum(ph, q, K, shape, map, scale, cap, h, first, n_keys);
    if (!(z > 0)) continue;
    const int g = ref::kv_head_for(h, shape.n_head, shape.n_head_kv, map);
    const double kept = z / (z + extra), each = weight / (z + extra);
    for (std::int64_t k = first; k < n_keys; ++k) ph[k] *= kept;
    double* oh = out.data() + std::int64_t(h) * shape.head_dim;
    for (int d = 0; d < shape.head_dim; ++d) oh[d] *= kept;
    for (const auto& [from, to] : {std::pair{std::int64_t(0), first}, std::pair{n_keys, batch_end}})
      for (std::int64_t k = from; k < to; ++k) {
        ph[k] = each;
        for (int d = 0; d < shape.head_dim; ++d) oh[d] += each * V[std::size_t(k * kv_dim + g * shape.head_dim + d)];
      }
  }
}

// The softmax run in 16-bit floats (torch's softmax of a half tensor): each score rounded to f16,
// the probabilities computed from those and rounded to f16, the output recomputed from them.
void half_precision_softmax(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                            const std::vector<double>& K, const std::vector<double>& V, const ref::AttentionShape& shape,
                            ref::GqaMap map, float scale, float cap, std::int64_t first, std::int64_t n_keys,
                            std::int64_t stride, HalfSoftmax rounded) {
  const bool sum_only = rounded == HalfSoftmax::sum_f16 || rounded == HalfSoftmax::sum_bf16;
  const bool whole = rounded == HalfSoftmax::whole || rounded == HalfSoftmax::whole_bf16;
  const bool bf16 = rounded == HalfSoftmax::whole_bf16 || rounded == HalfSoftmax::sum_bf16;
  const int kv_dim = shape.n_head_kv * shape.head_dim;
  const auto half = [bf16](double x) { return double(rounded_16bit(float(x), bf16)); };
  std::vector<double> scores(std::size_t(std::max<std::int64_t>(n_keys, 0)));
  for (int h = 0; h < shape.n_head; ++h) {
    const int g = ref::kv_head_for(h, shape.n_head, shape.n_head_kv, map);
    double* ph = probs.data() + std::int64_t(h) * stride;
    double max = -INFINITY;
    for (std::int64_t t = first; t < n_keys; ++t) {
      const double st = score_of(q, K, shape, map, scale, cap, h, t);
      scores[std::size_t(t)] = whole ? half(st) : st;
      max = std::max(max, scores[std::size_t(t)]);
    }
    const auto numerator = [&](std::int64_t t) {
      const double e = std::exp(scores[std::size_t(t)] - max);
      return whole || sum_only ? e : half(e);
    };
    double sum = 0;
    for (std::int64_t t = first; t < n_keys; ++t) sum = sum_only ? half(sum + half(numerator(t))) : sum + numerator(t);
    double* oh = out.data() + std::int64_t(h) * shape.head_dim;
    std::fill(oh, oh + shape.head_dim, 0.0);
    for (std::int64_t t = first; t < n_keys; ++t) {
      ph[t] = whole ? half(numerator(t) / sum) : numerator(t) / sum;
      for (int d = 0; d < shape.head_dim; ++d) oh[d] += ph[t] * V[std::size_t(t * kv_dim + g * shape.head_dim + d)];
    }
  }
}

void online_sum_not_rescaled(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& q,
                             const std::vector<double>& K, const ref::AttentionShape& shape, ref::GqaMap map,
                             float scale, float cap, std::int64_t first, std::int64_t n_keys, std::int64_t stride) {
  std::vector<double> scores(std::size_t(std::max<std::int64_t>(n_keys - first, 0)));
  for (int h = 0; h < shape.n_head; ++h) {
    double running_max = -INFINITY, stale_sum = 0, z = 0;
    for (std::int64_t t = first; t < n_keys; ++t) {
      const double st = scores[std::size_t(t - first)] = score_of(q, K, shape, map, scale, cap, h, t);
      running_max = std::max(running_max, st);
      stale_sum += std::exp(st - running_max);
    }
    for (const double st : scores) z += std::exp(st - running_max);
    if (!(stale_sum > 0) || !std::isfinite(stale_sum)) continue;
    const double kept = z / stale_sum;
    double* ph = probs.data() + std::int64_t(h) * stride;
    for (std::int64_t k = first; k < n_keys; ++k) ph[k] *= kept;
    for (int d = 0; d < shape.head_dim; ++d) out[std::size_t(h * shape.head_dim + d)] *= kept;
  }
}

// Probabilities p soft-capped after the softmax, c · tanh(p / c), and the output recomputed.
void cap_probabilities(std::vector<double>& probs, std::vector<double>& out, const std::vector<double>& V,
                       const ref::AttentionShape& shape, ref::GqaMap map, float cap, std::int64_t first,
                       std::int64_t n_keys, std::int64_t stride) {
  const int kv_dim = shape.n_head_kv * shape.head_dim;
  for (int h = 0; h < shape.n_head; ++h) {
    const int g = ref::kv_head_for(h, shape.n_head, shape.n_head_kv, map);
    double* ph = probs.data() + std::int64_t(h) * stride;
    ref::softcap(ph + first, n_keys - first, cap);
    double* oh = out.data() + std::int64_t(h) * shape.head_dim;
    std::fill(oh, oh + shape.head_dim, 0.0);
    for (std::int64_t t = first; t < n_keys; ++t)
      for (int d = 0; d < shape.head_dim; ++d) oh[d] += ph[t] * V[std::size_t(t * kv_dim + g * shape.head_dim + d)];
  }
}

// The output of an online softmax that never divides by its sum: each head's output times
// Σ_t exp(s_t − max s) = 1 / (its largest probability).
void scale_heads_by_softmax_sum(const std::vector<double>& probs, std::vector<double>& out, int n_head,
                                std::int64_t stride) {
  const std::size_t d = out.size() / std::size_t(n_head);
  for (int h = 0; h < n_head; ++h) {
    const auto head = probs.begin() + std::int64_t(h) * stride;
    const double largest = *std::max_element(head, head + stride);
    if (largest > 0)
      for (std::size_t i = 0; i < d; ++i) out[std::size_t(h) * d + i] /= largest;
  }
}

}  // namespace tapdiff::diff
