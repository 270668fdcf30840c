// Attention for one (query row, head), over the keys of one layer's KV cache:
//   visible keys t: t < n_keys, t <= positions[row] when causal, and
//                   positions[row] - t < window for a sliding layer (window > 0)
//   s_t = softcap · tanh(scale_r · (q_h · K[t, g]) / softcap) (softcap > 0; else no tanh),
//   scale_r = scale · (ln(floor(positions[row] / temp_floor) + 1) · temp_scale + 1) with Llama 4's
//   temperature (temp_scale != 0), scale without,
//   p = softmax(s) in float32,  out_h = Σ_t p_t V[t, g]
//   g = kv head of query head h: h / (n_head / n_head_kv) (grouped), or h % n_head_kv
//   (modulo: the fault gqa-head-map)
// probs receives p at [row][h][t] and 0 for every other t < probs_stride: the attn.probs tap
// (key slot t is position t). The scores are computed in the probs row itself, so attention
// needs no scratch memory.
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/kernels/element.hpp"

namespace tapdiff::engine {

enum class KvHeadMap : std::uint8_t { grouped, modulo };

struct AttentionArgs {
  const float* q = nullptr;       // (n_rows, n_head, head_dim) after RoPE
  const void* k_cache = nullptr;  // (capacity, n_head_kv, head_dim) cache_type
  const void* v_cache = nullptr;  // (capacity, n_head_kv, head_dim) cache_type
  ElemType cache_type = ElemType::f32;
  const std::int32_t* positions = nullptr;  // (n_rows,) absolute query positions (causal mask)
  float* probs = nullptr;                   // (n_rows, n_head, probs_stride)
  float* out = nullptr;                     // (n_rows, n_head, head_dim)
  std::int64_t n_rows = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  std::int64_t n_keys = 0;        // cache rows attention may read
  std::int64_t probs_stride = 0;  // >= n_keys: the cache capacity
  float scale = 1.0f;
  float temp_scale = 0.0f;   // Llama 4's attention temperature (Mistral 3); 0: none
  float temp_floor = 1.0f;   // its floor: YaRN's original context
  float softcap = 0.0f;      // Gemma 2's attention logit soft-cap; 0: none
  std::int64_t window = 0;   // a sliding layer's window; 0: every earlier key
  bool causal = true;
  KvHeadMap kv_head_map = KvHeadMap::grouped;
  // Fault softmax-sum-all-keys: the softmax runs over all n_keys rows and the causal mask is
  // applied afterwards (masked weights zeroed, the visible ones not renormalized).
  bool softmax_over_all_keys = false;
  // Fault attn-out-heads-reversed: head h's output stored in slot n_head - 1 - h.
  bool out_heads_reversed = false;
};

// One (query row, head): where its query, probabilities and output live and which keys it sees.
struct AttentionSpan {
  const float* q = nullptr;  // (head_dim,)
  float* p = nullptr;        // (probs_stride,)
  float* out = nullptr;      // (head_dim,)
  std::int64_t k_offset = 0;  // of the kv head's first element in a cache row
  std::int64_t first = 0;     // the first visible key
  std::int64_t visible = 0;   // keys [first, visible) are visible
  std::int64_t softmax_len = 0;
  float scale = 1.0f;  // the scores' scale at this row's position
};

TD_HD inline AttentionSpan attention_span(const AttentionArgs& a, std::int64_t index) {
  const std::int64_t row = index / a.n_head;
  const int h = int(index % a.n_head);
  const int g = a.kv_head_map == KvHeadMap::modulo ? h % a.n_head_kv : h / (a.n_head / a.n_head_kv);
  AttentionSpan s;
  s.q = a.q + index * a.head_dim;
  s.p = a.probs + index * a.probs_stride;
  const std::int64_t out_slot = a.out_heads_reversed ? row * a.n_head + (a.n_head - 1 - h) : index;
  s.out = a.out + out_slot * a.head_dim;
  s.k_offset = std::int64_t(g) * a.head_dim;
  s.visible = a.n_keys;
  if (a.causal && std::int64_t(a.positions[row]) + 1 < s.visible) s.visible = std::int64_t(a.positions[row]) + 1;
  if (a.window > 0 && std::int64_t(a.positions[row]) - a.window + 1 > 0)
    s.first = std::int64_t(a.positions[row]) - a.window + 1;
  s.softmax_len = a.softmax_over_all_keys ? a.n_keys : s.visible;
  s.scale = a.scale;
  if (a.temp_scale != 0.0f)
    s.scale *= float(log(floor(float(a.positions[row]) / a.temp_floor) + 1.0) * a.temp_scale + 1.0);
  return s;
}

// q · K[at .. at + n) in eight lanes: lane u adds the products of dims d = u (mod 8) below n
// rounded down to 8, in order, the rest go to a tail; then
// (((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))) + tail. The cache type is a constant in
// each copy, so the host compiler vectorizes the lanes.
template <ElemType kType>
TD_HD inline float head_dot(const float* q, const void* k, std::int64_t at, int n) {
  float l[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int u = 0; u < 8; ++u) l[u] += q[d + u] * load_element(k, kType, at + d + u);
  float tail = 0.0f;
  for (; d < n; ++d) tail += q[d] * load_element(k, kType, at + d);
  return (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))) + tail;
}

// A key's score from its dot product with the query.
TD_HD inline float attention_logit(const AttentionArgs& a, const AttentionSpan& s, float dot) {
  return a.softcap > 0.0f ? a.softcap * tanhf(s.scale * dot / a.softcap) : s.scale * dot;
}

// The score of key t, before the softmax.
TD_HD inline float attention_score(const AttentionArgs& a, const AttentionSpan& s, std::int64_t t) {
  const std::int64_t k_row = t * a.n_head_kv * a.head_dim + s.k_offset;
  float dot = 0.0f;
  switch (a.cache_type) {
    case ElemType::f32:
      dot = head_dot<ElemType::f32>(s.q, a.k_cache, k_row, a.head_dim);
      break;
    case ElemType::f16:
      dot = head_dot<ElemType::f16>(s.q, a.k_cache, k_row, a.head_dim);
      break;
    case ElemType::bf16:
      dot = head_dot<ElemType::bf16>(s.q, a.k_cache, k_row, a.head_dim);
      break;
  }
  return attention_logit(a, s, dot);
}

// Output element d: the visible keys' values weighted by their probabilities, in key order.
TD_HD inline float attention_output(const AttentionArgs& a, const AttentionSpan& s, int d) {
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  float acc = 0.0f;
  for (std::int64_t t = s.first; t < s.visible; ++t)
    acc += s.p[t] * load_element(a.v_cache, a.cache_type, t * kv_row + s.k_offset + d);
  return acc;
}

// Every output element at once, each summed as attention_output sums it (key order, from 0):
// keys outermost, so the host compiler vectorizes across the elements.
template <ElemType kType>
TD_HD inline void attention_outputs(const AttentionArgs& a, const AttentionSpan& s) {
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  for (int d = 0; d < a.head_dim; ++d) s.out[d] = 0.0f;
  for (std::int64_t t = s.first; t < s.visible; ++t) {
    const float p = s.p[t];
    const std::int64_t at = t * kv_row + s.k_offset;
    for (int d = 0; d < a.head_dim; ++d) s.out[d] += p * load_element(a.v_cache, kType, at + d);
  }
}

// The scores of keys [first, softmax_len) into the probs row.
TD_HD inline void attention_scores(const AttentionArgs& a, const AttentionSpan& s) {
  for (std::int64_t t = s.first; t < s.softmax_len; ++t) s.p[t] = attention_score(a, s, t);
}

// The scores in the probs row become the softmax; zeros around the visible keys.
TD_HD inline void attention_softmax(const AttentionArgs& a, const AttentionSpan& s) {
  float max = -INFINITY;
  for (std::int64_t t = s.first; t < s.softmax_len; ++t) max = s.p[t] > max ? s.p[t] : max;
  float sum = 0.0f;
  for (std::int64_t t = s.first; t < s.softmax_len; ++t) sum += (s.p[t] = expf(s.p[t] - max));
  for (std::int64_t t = s.first; t < s.visible; ++t) s.p[t] /= sum;
  for (std::int64_t t = 0; t < s.first && t < a.probs_stride; ++t) s.p[t] = 0.0f;
  for (std::int64_t t = s.visible > 0 ? s.visible : 0; t < a.probs_stride; ++t) s.p[t] = 0.0f;
}

TD_HD inline void attention_values(const AttentionArgs& a, const AttentionSpan& s) {
  switch (a.cache_type) {
    case ElemType::f32:
      return attention_outputs<ElemType::f32>(a, s);
    case ElemType::f16:
      return attention_outputs<ElemType::f16>(a, s);
    case ElemType::bf16:
      return attention_outputs<ElemType::bf16>(a, s);
  }
}

TD_HD inline void attention_row_head(const AttentionArgs& a, std::int64_t index) {
  const AttentionSpan s = attention_span(a, index);
  attention_scores(a, s);
  attention_softmax(a, s);
  attention_values(a, s);
}

void validate(const AttentionArgs& a);
void attention_host(const AttentionArgs& a);
// Whether attention_host scores and sums eight floats a register with its own AVX2 loops (the
// body's floats bit for bit), widening a 16-bit cache's elements as it loads them: a CPU with
// AVX2 and F16C.
bool attention_host_in_eights(const AttentionArgs& a);
void attention_cuda(const AttentionArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
