// The reference forward pass: one token at a time, row-major, no fusion, like llama2.c's
// run.c. T is the activation type (float, or double for the noise-floor run). Every tap in
// docs/taps.md is recorded at the point the catalogue names, through the tracer.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/ops.hpp"
#include "tapdiff/row_shape.hpp"
#include "reference/weights.hpp"

namespace tapdiff {
class TraceWriter;
}

namespace tapdiff::ref {

template <typename T>
class Forward {
public:
  // n_ctx: positions the KV cache holds. trace may be null (no taps).
  Forward(const Weights& weights, int n_ctx, TraceWriter* trace);

  // Runs `token` at `position` (positions 0..position-1 must have run) and returns the logits.
  // The `output` tap is recorded only when record_logits: a batched engine computes logits
  // for the last prompt position alone, and the catalogue asks both programs for the same.
  const std::vector<T>& step(int token, int position, bool record_logits = true);

private:
  void attention_block(int layer, int position);
  void ffn_block(int layer, int position);
  void add_residual();
  void dense_ffn(const LayerWeights& L, int layer, int position);
  void experts_ffn(const LayerWeights& L, int layer, int position);
  void record(const char* name, int layer, int position, const T* data, const RowShape& shape);
  bool tapped(const char* name, int layer, int position) const;

  const Weights& w_;
  const ModelConfig& c_;
  int n_ctx_;
  const float* rope_factors_ = nullptr;  // the RoPE frequency factors this run's context takes, if any
  TraceWriter* trace_;

  // The KV cache: [n_layer][n_ctx][kv_dim], keys after RoPE.
  std::vector<T> k_cache_, v_cache_;
  // Activations, named as the taps they feed.
  std::vector<T> x_;         // [n_embd] residual stream
  std::vector<T> norm_;      // [n_embd] attn_norm / ffn_norm output
  std::vector<T> q_, k_, v_; // [q_dim], [kv_dim], [kv_dim]
  std::vector<T> probs_;     // [n_head][n_ctx] attention weights, zero past the visible keys
  std::vector<T> attn_out_;  // [q_dim]
  std::vector<T> proj_;      // [n_embd] attn_output / ffn_down
  std::vector<T> gate_, up_, act_;  // [n_ff]; a mixture of experts: [n_expert_used][n_ff]
  std::vector<T> router_, routing_;  // [n_expert] ffn_gate_inp, ffn.routing
  std::vector<int> experts_;         // [n_expert_used] the used experts, ascending
  std::vector<T> logits_;    // [n_vocab]
  std::vector<float> tap_buffer_;   // float copy of the tap being recorded
  std::vector<float> embed_row_;    // [n_embd] the token's embedding row
};

extern template class Forward<float>;
extern template class Forward<double>;

}  // namespace tapdiff::ref
