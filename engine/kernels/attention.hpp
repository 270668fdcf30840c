// Attention for one (query row, head), over the keys of one layer's KV cache:
//   visible keys t: t < n_keys, t <= positions[row] when causal, and
//                   positions[row] - t < window for a sliding layer (window > 0)
//   s_t = softcap · tanh(scale · (q_h · K[t, g]) / softcap) (softcap > 0; else no tanh),
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

TD_HD inline void attention_row_head(const AttentionArgs& a, std::int64_t index) {
  const std::int64_t row = index / a.n_head;
  const int h = int(index % a.n_head);
  const int g = a.kv_head_map == KvHeadMap::modulo ? h % a.n_head_kv : h / (a.n_head / a.n_head_kv);
  const std::int64_t kv_row = std::int64_t(a.n_head_kv) * a.head_dim;
  const std::int64_t kv_col = std::int64_t(g) * a.head_dim;
  const float* q = a.q + index * a.head_dim;
  float* p = a.probs + index * a.probs_stride;
  const std::int64_t out_slot = a.out_heads_reversed ? row * a.n_head + (a.n_head - 1 - h) : index;
  float* out = a.out + out_slot * a.head_dim;

  std::int64_t visible = a.n_keys;
  if (a.causal && std::int64_t(a.positions[row]) + 1 < visible)
    visible = std::int64_t(a.positions[row]) + 1;

  std::int64_t first = 0;
  if (a.window > 0 && std::int64_t(a.positions[row]) - a.window + 1 > 0)
    first = std::int64_t(a.positions[row]) - a.window + 1;

  const std::int64_t softmax_len = a.softmax_over_all_keys ? a.n_keys : visible;
  float max = -INFINITY;
  for (std::int64_t t = first; t < softmax_len; ++t) {
    float dot = 0.0f;
    for (int d = 0; d < a.head_dim; ++d)
      dot += q[d] * load_element(a.k_cache, a.cache_type, t * kv_row + kv_col + d);
    p[t] = a.softcap > 0.0f ? a.softcap * tanhf(a.scale * dot / a.softcap) : a.scale * dot;
    max = p[t] > max ? p[t] : max;
  }
  float sum = 0.0f;
  for (std::int64_t t = first; t < softmax_len; ++t) sum += (p[t] = expf(p[t] - max));
  for (std::int64_t t = first; t < visible; ++t) p[t] /= sum;
  for (std::int64_t t = 0; t < first && t < a.probs_stride; ++t) p[t] = 0.0f;
  for (std::int64_t t = visible > 0 ? visible : 0; t < a.probs_stride; ++t) p[t] = 0.0f;

  for (int d = 0; d < a.head_dim; ++d) {
    float acc = 0.0f;
    for (std::int64_t t = first; t < visible; ++t)
      acc += p[t] * load_element(a.v_cache, a.cache_type, t * kv_row + kv_col + d);
    out[d] = acc;
  }
}

void validate(const AttentionArgs& a);
void attention_host(const AttentionArgs& a);
void attention_cuda(const AttentionArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
