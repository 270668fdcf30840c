#include "reference/forward.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "tapdiff/trace_writer.hpp"

namespace tapdiff::ref {
namespace {

Pairing pairing_of(const ModelConfig& c) {
  return c.rope_pairing == RopePairing::norm ? Pairing::norm : Pairing::neox;
}

}  // namespace

// y = W x. A kept matrix is ops' matvec; otherwise each row is dequantized just before its dot
// product, the same values and the same dot.
template <typename T>
void project(const Matrix& W, const T* x, T* y) {
  const int n_in = int(W.cols()), n_out = int(W.rows());
  if (W.kept()) return matvec(W.values(), x, n_in, n_out, y);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<std::size_t>(n_in));
#pragma omp for schedule(static)
    for (int o = 0; o < n_out; ++o) {
      W.row(o, row.data());
      y[o] = dot(row.data(), x, n_in);
    }
  }
}

template <typename T>
Forward<T>::Forward(const Weights& weights, int n_ctx, TraceWriter* trace)
    : w_(weights), c_(weights.config), n_ctx_(n_ctx), trace_(trace) {
  if (const char* tensor = c_.rope_factors_tensor(n_ctx)) rope_factors_ = w_.rope_factors.at(tensor).data();
  const auto layers = static_cast<std::size_t>(c_.n_layer);
  const auto kv_row = static_cast<std::size_t>(c_.kv_dim());
  k_cache_.assign(layers * static_cast<std::size_t>(n_ctx) * kv_row, T(0));
  v_cache_.assign(k_cache_.size(), T(0));
  x_.resize(static_cast<std::size_t>(c_.n_embd));
  norm_.resize(x_.size());
  proj_.resize(x_.size());
  q_.resize(static_cast<std::size_t>(c_.q_dim()));
  attn_out_.resize(q_.size());
  k_.resize(kv_row);
  v_.resize(kv_row);
  probs_.resize(static_cast<std::size_t>(c_.n_head) * static_cast<std::size_t>(n_ctx));
  // A mixture of experts keeps every used expert's rows, in the order of the experts.
  gate_.resize(static_cast<std::size_t>(c_.n_ff) * static_cast<std::size_t>(std::max(1, c_.n_expert_used)));
  up_.resize(gate_.size());
  act_.resize(gate_.size());
  logits_.resize(static_cast<std::size_t>(c_.n_vocab));
  router_.resize(static_cast<std::size_t>(c_.n_expert));
  routing_.resize(router_.size());
  experts_.resize(static_cast<std::size_t>(c_.n_expert_used));
}

template <typename T>
bool Forward<T>::tapped(const char* name, int layer, int position) const {
  return trace_ && trace_->enabled(name, layer, position);
}

template <typename T>
void Forward<T>::record(const char* name, int layer, int position, const T* data,
                        const RowShape& shape) {
  if (!tapped(name, layer, position)) return;
  const auto n = static_cast<std::size_t>(shape.elements());
  tap_buffer_.resize(n);
  for (std::size_t i = 0; i < n; ++i) tap_buffer_[i] = float(data[i]);
  trace_->record(name, layer, position, 1, shape, tap_buffer_.data());
}

template <typename T>
const std::vector<T>& Forward<T>::step(int token, int position, bool record_logits) {
  if (token < 0 || token >= c_.n_vocab)
    throw std::out_of_range(fmt::format("token id {} outside the vocabulary 0..{}", token, c_.n_vocab - 1));
  if (position < 0 || position >= n_ctx_)
    throw std::out_of_range(fmt::format("position {} outside the context 0..{}", position, n_ctx_ - 1));
  const int E = c_.n_embd;
  embed_row_.resize(static_cast<std::size_t>(E));
  w_.token_embd.row(token, embed_row_.data());
  std::copy(embed_row_.begin(), embed_row_.end(), x_.begin());
  if (const T factor = T(c_.embedding_factor()); factor != T(1))
    for (T& v : x_) v *= factor;
  record("token_embd", -1, position, x_.data(), {E});

  for (int l = 0; l < c_.n_layer; ++l) {
    attention_block(l, position);
    ffn_block(l, position);
  }

  rmsnorm(x_.data(), w_.output_norm.data(), E, c_.rms_eps, norm_.data());
  record("output_norm", -1, position, norm_.data(), {E});
  // logits = W_out [n_vocab][n_embd] · x
  project(w_.lm_head(), norm_.data(), logits_.data());
  if (const T factor = T(c_.logit_factor()); factor != T(1))
    for (T& v : logits_) v *= factor;
  softcap(logits_.data(), c_.n_vocab, c_.final_softcap);
  if (record_logits) record("output", -1, position, logits_.data(), {c_.n_vocab});
  return logits_;
}

template <typename T>
void Forward<T>::attention_block(int l, int p) {
  const LayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  const int E = c_.n_embd, Q = c_.q_dim(), KV = c_.kv_dim(), H = c_.n_head, D = c_.head_dim;

  rmsnorm(x_.data(), L.attn_norm.data(), E, c_.rms_eps, norm_.data());
  record("attn_norm", l, p, norm_.data(), {E});

  project(L.wq, norm_.data(), q_.data());
  project(L.wk, norm_.data(), k_.data());
  project(L.wv, norm_.data(), v_.data());
  if (c_.qkv_bias) {
    add_bias(q_.data(), L.bq.data(), Q);
    add_bias(k_.data(), L.bk.data(), KV);
    add_bias(v_.data(), L.bv.data(), KV);
  }
  record("attn_q", l, p, q_.data(), {Q});
  record("attn_k", l, p, k_.data(), {KV});
  record("attn_v", l, p, v_.data(), {KV});
  if (c_.qk_norm) {
    for (int h = 0; h < H; ++h) rmsnorm(q_.data() + h * D, L.q_norm.data(), D, c_.rms_eps, q_.data() + h * D);
    for (int h = 0; h < c_.n_head_kv; ++h)
      rmsnorm(k_.data() + h * D, L.k_norm.data(), D, c_.rms_eps, k_.data() + h * D);
    record("attn_q_norm", l, p, q_.data(), {Q});
    record("attn_k_norm", l, p, k_.data(), {KV});
  }

  if (c_.rotates(l)) {
    const float* factors = rope_factors_;
    rope(q_.data(), H, D, c_.n_rot, p, c_.rope_base(l), pairing_of(c_), factors, c_.rope_scaling_of(l));
    rope(k_.data(), c_.n_head_kv, D, c_.n_rot, p, c_.rope_base(l), pairing_of(c_), factors, c_.rope_scaling_of(l));
  }
  record("attn_q.rope", l, p, q_.data(), {Q});
  record("attn_k.rope", l, p, k_.data(), {KV});

  const std::int64_t layer_base = std::int64_t(l) * n_ctx_ * KV;
  T* k_layer = k_cache_.data() + layer_base;
  T* v_layer = v_cache_.data() + layer_base;
  std::copy(k_.begin(), k_.end(), k_layer + std::int64_t(p) * KV);
  std::copy(v_.begin(), v_.end(), v_layer + std::int64_t(p) * KV);
  record("kv.k", l, p, k_layer + std::int64_t(p) * KV, {KV});
  record("kv.v", l, p, v_layer + std::int64_t(p) * KV, {KV});

  std::fill(probs_.begin(), probs_.end(), T(0));
  const float scale = c_.attn_scale() * c_.attn_temperature(p);
  // A sliding layer sees the last sliding_window positions, its own included.
  const std::int64_t first_key = c_.sliding(l) ? std::max<std::int64_t>(0, p - c_.sliding_window + 1) : 0;
  attention(q_.data(), k_layer, v_layer, first_key, std::int64_t(p) + 1, AttentionShape{H, c_.n_head_kv, D},
            scale, GqaMap::grouped, attn_out_.data(), probs_.data(), n_ctx_, c_.attn_softcap);
  record("attn.probs", l, p, probs_.data(), {H, n_ctx_});
  record("attn.out", l, p, attn_out_.data(), {Q});

  project(L.wo, attn_out_.data(), proj_.data());
  record("attn_output", l, p, proj_.data(), {E});
  if (c_.post_norms) {
    rmsnorm(proj_.data(), L.attn_post_norm.data(), E, c_.rms_eps, proj_.data());
    record("attn_post_norm", l, p, proj_.data(), {E});
  }
  add_residual();
  record("resid.attn", l, p, x_.data(), {E});
}

template <typename T>
void Forward<T>::ffn_block(int l, int p) {
  const LayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  const int E = c_.n_embd;

  rmsnorm(x_.data(), L.ffn_norm.data(), E, c_.rms_eps, norm_.data());
  record("ffn_norm", l, p, norm_.data(), {E});
  if (c_.moe()) {
    experts_ffn(L, l, p);
  } else {
    dense_ffn(L, l, p);
  }
  if (c_.post_norms) {
    rmsnorm(proj_.data(), L.ffn_post_norm.data(), E, c_.rms_eps, proj_.data());
    record("ffn_post_norm", l, p, proj_.data(), {E});
  }
  add_residual();
  record("resid.ffn", l, p, x_.data(), {E});
}

// x += proj, the block's output times the model's residual multiplier (Granite's; 1 elsewhere).
template <typename T>
void Forward<T>::add_residual() {
  const T scale = T(c_.residual_factor());
  for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += scale * proj_[i];
}

// proj = W_down (act(W_gate norm) * W_up norm)
template <typename T>
void Forward<T>::dense_ffn(const LayerWeights& L, int l, int p) {
  const int E = c_.n_embd, F = c_.n_ff;
  project(L.w_gate, norm_.data(), gate_.data());
  project(L.w_up, norm_.data(), up_.data());
  record("ffn_gate", l, p, gate_.data(), {F});
  record("ffn_up", l, p, up_.data(), {F});
  if (c_.activation == Activation::gelu)
    geglu(gate_.data(), up_.data(), F, act_.data());
  else
    swiglu(gate_.data(), up_.data(), F, act_.data());
  record("ffn.act", l, p, act_.data(), {F});
  project(L.w_down, act_.data(), proj_.data());
  record("ffn_down", l, p, proj_.data(), {E});
}

// proj = Σ over the used experts e of routing[e] · W_down[e] (silu(W_gate[e] norm) * W_up[e] norm)
template <typename T>
void Forward<T>::experts_ffn(const LayerWeights& L, int l, int p) {
  const int E = c_.n_embd, F = c_.n_ff, NE = c_.n_expert, K = c_.n_expert_used;
  project(L.w_router, norm_.data(), router_.data());
  record("ffn_gate_inp", l, p, router_.data(), {NE});
  moe_route(router_.data(), NE, K, routing_.data(), experts_.data());
  record("ffn.routing", l, p, routing_.data(), {NE});
  for (int k = 0; k < K; ++k) {
    const auto e = static_cast<std::size_t>(experts_[static_cast<std::size_t>(k)]);
    project(L.gate_exps[e], norm_.data(), gate_.data() + std::size_t(k) * std::size_t(F));
    project(L.up_exps[e], norm_.data(), up_.data() + std::size_t(k) * std::size_t(F));
  }
  record("ffn_gate_exps", l, p, gate_.data(), {K, F});
  record("ffn_up_exps", l, p, up_.data(), {K, F});
  swiglu(gate_.data(), up_.data(), K * F, act_.data());
  record("ffn.act_exps", l, p, act_.data(), {K, F});
  std::fill(proj_.begin(), proj_.end(), T(0));
  std::vector<T> down(static_cast<std::size_t>(E));
  for (int k = 0; k < K; ++k) {
    const int e = experts_[static_cast<std::size_t>(k)];
    project(L.down_exps[std::size_t(e)], act_.data() + std::size_t(k) * std::size_t(F), down.data());
    for (int i = 0; i < E; ++i) proj_[std::size_t(i)] += routing_[std::size_t(e)] * down[std::size_t(i)];
  }
  record("ffn_down", l, p, proj_.data(), {E});
}

template class Forward<float>;
template class Forward<double>;

}  // namespace tapdiff::ref
