// The reference's weights, read through model/ from the mapped GGUF. Norm weights, biases and
// frequency factors are dequantized to float32 at load. Matrices are dequantized on use: each
// keeps its float32 values only while the model's kept matrices fit a memory budget (in load
// order); the rest are decoded row by row every time they are used, so a model whose float32
// weights exceed memory (a 7B model is 27 GB) still runs, at the cost of decoding.
#pragma once

#include <map>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {
class TraceWriter;
struct WeightTapOptions;
}  // namespace tapdiff

namespace tapdiff::ref {

// A matrix [rows][cols], row-major as GGUF stores it ([out][in]).
class Matrix {
public:
  Matrix() = default;
  explicit Matrix(const GgufTensorInfo& tensor);

  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::uint64_t float_bytes() const { return std::uint64_t(rows_ * cols_) * sizeof(float); }
  // Dequantizes the whole matrix and keeps it.
  void keep();
  bool kept() const { return !values_.empty(); }
  const float* values() const { return values_.data(); }  // only when kept()
  // Row r, dequantized (from the kept values or from the file) into out[cols].
  void row(std::int64_t r, float* out) const;
  // The whole matrix, dequantized.
  std::vector<float> dequantized() const;

private:
  GgufTensorInfo tensor_;
  std::int64_t rows_ = 0, cols_ = 0;
  std::uint64_t row_bytes_ = 0;
  std::vector<float> values_;
};

struct LayerWeights {
  std::vector<float> attn_norm;                 // [n_embd]
  Matrix wq, wk, wv;                            // [q_dim][n_embd], [kv_dim][n_embd] ×2
  std::vector<float> bq, bk, bv;                // [q_dim], [kv_dim] ×2; empty without biases
  std::vector<float> q_norm, k_norm;            // [head_dim] ×2; empty without q/k norm
  Matrix wo;                                    // [n_embd][q_dim]
  std::vector<float> attn_post_norm, ffn_post_norm;  // [n_embd] ×2; empty without post-norms
  std::vector<float> ffn_norm;                  // [n_embd]
  Matrix w_gate, w_up;                          // [n_ff][n_embd]; a mixture of experts has none
  Matrix w_down;                                // [n_embd][n_ff]
  Matrix w_router;                              // [n_expert][n_embd] (ffn_gate_inp); empty when dense
  std::vector<Matrix> gate_exps, up_exps;       // n_expert × [n_ff][n_embd]
  std::vector<Matrix> down_exps;                // n_expert × [n_embd][n_ff]
};

struct Weights {
  ModelConfig config;
  Matrix token_embd;               // [n_vocab][n_embd]
  // [n_rot / 2] RoPE frequency factors by tensor name: Llama 3.1's rope_freqs.weight, LongRoPE's
  // rope_factors_long/short.weight (ModelConfig::rope_factors_tensor picks a run's).
  std::map<std::string, std::vector<float>> rope_factors;
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [n_embd]
  Matrix output;                   // [n_vocab][n_embd]; rows() == 0 when tied to token_embd

  const Matrix& lm_head() const { return output.rows() == 0 ? token_embd : output; }
};

// Matrices kept as float32 up to this many bytes unless the caller says otherwise.
inline constexpr std::uint64_t kDefaultKeptWeightBytes = std::uint64_t(4) << 30;

// `file` outlives the weights (matrices not kept are read from its mapping).
Weights load_weights(const GgufFile& file, std::uint64_t kept_bytes = kDefaultKeptWeightBytes);

// Records every weight as the reference uses it (after model/'s dequantization) as weight
// taps (tapdiff/weight_taps.hpp), in the order the engine's loader loads them.
void record_weight_taps(const Weights& weights, const GgufFile& file, TraceWriter& trace,
                        const WeightTapOptions& options);

}  // namespace tapdiff::ref
