// The reference's weights: every tensor dequantized to float32 once at load through model/,
// row-major as GGUF stores them ([out][in] for matrices).
#pragma once

#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {
class TraceWriter;
struct WeightTapOptions;
}  // namespace tapdiff

namespace tapdiff::ref {

struct LayerWeights {
  std::vector<float> attn_norm;                 // [n_embd]
  std::vector<float> wq, wk, wv;                // [q_dim][n_embd], [kv_dim][n_embd] ×2
  std::vector<float> bq, bk, bv;                // [q_dim], [kv_dim] ×2; empty without biases
  std::vector<float> q_norm, k_norm;            // [head_dim] ×2; empty without q/k norm
  std::vector<float> wo;                        // [n_embd][q_dim]
  std::vector<float> attn_post_norm, ffn_post_norm;  // [n_embd] ×2; empty without post-norms
  std::vector<float> ffn_norm;                  // [n_embd]
  std::vector<float> w_gate, w_up;              // [n_ff][n_embd]
  std::vector<float> w_down;                    // [n_embd][n_ff]
};

struct Weights {
  ModelConfig config;
  std::vector<float> token_embd;   // [n_vocab][n_embd]
  std::vector<float> rope_freqs;   // [n_rot / 2] frequency factors; empty without them
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [n_embd]
  std::vector<float> output;       // [n_vocab][n_embd]; empty when tied to token_embd

  const std::vector<float>& lm_head() const { return output.empty() ? token_embd : output; }
};

Weights load_weights(const GgufFile& file);

// Records every weight as the reference uses it (after model/'s dequantization) as weight
// taps (tapdiff/weight_taps.hpp), in the order the engine's loader loads them.
void record_weight_taps(const Weights& weights, const GgufFile& file, TraceWriter& trace,
                        const WeightTapOptions& options);

}  // namespace tapdiff::ref
