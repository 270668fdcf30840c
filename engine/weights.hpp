// The engine's weights in executor memory. Each tensor is uploaded in its GGUF encoding and
// dequantized there by the engine's own kernels. Matrices and the embedding table are kept
// in the executor's weight storage type (rounded to the precision); norm weights and
// biases stay float32.
#pragma once

#include <vector>

#include "engine/device/buffer.hpp"
#include "engine/device/elem_type.hpp"
#include "engine/faults.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {
class TraceWriter;
struct WeightTapOptions;
}  // namespace tapdiff

namespace tapdiff::engine {

class Executor;

struct LayerWeights {
  Buffer attn_norm;     // (n_embd,) f32
  Buffer wq;            // (q_dim, n_embd) row-major, matrix_type
  Buffer wk, wv;        // (kv_dim, n_embd) each
  Buffer bq;            // (q_dim,) f32; empty without biases
  Buffer bk, bv;        // (kv_dim,) f32 each; empty without biases
  Buffer q_norm, k_norm;  // (head_dim,) f32 each; empty without q/k norm (qwen3)
  Buffer wo;            // (n_embd, q_dim)
  Buffer attn_post_norm, ffn_post_norm;  // (n_embd,) f32 each; empty without post-norms (gemma2)
  Buffer ffn_norm;      // (n_embd,) f32
  Buffer w_gate, w_up;  // (n_ff, n_embd) each
  Buffer w_down;        // (n_embd, n_ff)
};

struct EngineWeights {
  ElemType matrix_type = ElemType::f32;  // storage of matrices and token_embd
  Buffer token_embd;                     // (n_vocab, n_embd)
  Buffer rope_freqs;                     // (n_rot / 2,) f32; empty without frequency factors
  std::vector<LayerWeights> layers;      // (n_layer,)
  Buffer output_norm;                    // (n_embd,) f32
  Buffer output;                         // (n_vocab, n_embd); empty when tied to token_embd

  const Buffer& lm_head() const { return output.empty() ? token_embd : output; }
};

// Loads and dequantizes every weight `config` names (validate_weights has checked shapes).
// precision: the run's precision; matrices are rounded to it.
EngineWeights load_engine_weights(Executor& ex, const GgufFile& model, const ModelConfig& config,
                                  ElemType precision, const FaultSwitch& faults);

// Records every weight as the engine will use it — read back from executor memory after the
// engine's dequantization and rounding — as weight taps (tapdiff/weight_taps.hpp), in the
// order the loader loads them.
void record_weight_taps(Executor& ex, const EngineWeights& weights, const GgufFile& model,
                        const ModelConfig& config, TraceWriter& trace,
                        const WeightTapOptions& options);

}  // namespace tapdiff::engine
