// The engine's weights in executor memory. Matrices and the embedding table stay resident in
// their GGUF encoding (on the host executor: the mapped file's own bytes) and are decoded by
// the engine's kernels where they are used: decode GEMVs and the embedding gather decode on the
// fly, a batched GEMM decodes into a scratch matrix first (forward.cpp). Norm weights and biases
// are decoded once, to float32.
#pragma once

#include <map>
#include <vector>

#include "engine/device/buffer.hpp"
#include "engine/device/elem_type.hpp"
#include "engine/faults.hpp"
#include "engine/kernels/dequant.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {
class TraceWriter;
struct WeightTapOptions;
}  // namespace tapdiff

namespace tapdiff::engine {

class Executor;

// A matrix in its GGUF encoding: rows of `cols` elements, row-major, as the file stores it.
struct Matrix {
  Buffer bytes;
  GgmlType type = GgmlType::F32;
  std::int64_t rows = 0, cols = 0;
  DequantQuirks quirks;  // the decoder bugs a fault plants

  Encoded encoded() const { return Encoded{bytes.as<std::uint8_t>(), type, quirks}; }
  std::int64_t elements() const { return rows * cols; }
};

struct LayerWeights {
  Buffer attn_norm;     // (n_embd,) f32
  Matrix wq;            // (q_dim, n_embd)
  Matrix wk, wv;        // (kv_dim, n_embd) each
  Buffer bq;            // (q_dim,) f32; empty without biases
  Buffer bk, bv;        // (kv_dim,) f32 each; empty without biases
  Buffer q_norm, k_norm;  // (head_dim,) f32 each; empty without q/k norm (qwen3)
  Matrix wo;            // (n_embd, q_dim)
  Buffer attn_post_norm, ffn_post_norm;  // (n_embd,) f32 each; empty without post-norms (gemma2)
  Buffer ffn_norm;      // (n_embd,) f32
  Matrix w_gate, w_up;  // (n_ff, n_embd) each; a mixture of experts has none
  Matrix w_down;        // (n_embd, n_ff)
  Matrix w_router;      // (n_expert, n_embd) ffn_gate_inp; empty when dense
  Matrix gate_exps, up_exps;  // (n_expert · n_ff, n_embd) each: the experts' matrices stacked
  Matrix down_exps;           // (n_expert · n_embd, n_ff)
};

// Expert e's matrix of a stacked one (n_expert of them): a view of its rows.
Matrix expert_matrix(const Matrix& stacked, int expert, int n_expert);

struct EngineWeights {
  Matrix token_embd;                     // (n_vocab, n_embd)
  // (n_rot / 2,) f32 RoPE frequency factors by tensor name (reference/weights.hpp).
  std::map<std::string, Buffer> rope_factors;
  std::vector<LayerWeights> layers;      // (n_layer,); empty for a layer a model part lacks
  Buffer output_norm;                    // (n_embd,) f32
  Matrix output;                         // (n_vocab, n_embd); empty when tied to token_embd

  const Matrix& lm_head() const { return output.bytes.empty() ? token_embd : output; }
};

// Loads every weight `config` names in the stages the file holds (a whole model, or a part:
// model/model_part.hpp; validate_weights has checked shapes); the kernels round
// matrix values to the run's precision where they decode them. `model` outlives the weights
// (the host executor's matrices are views of its mapping).
EngineWeights load_engine_weights(Executor& ex, const GgufFile& model, const ModelConfig& config,
                                  const FaultSwitch& faults);

// Records every weight as the engine's kernels see it at `precision` — decoded and rounded by
// the engine's dequantize kernel from executor memory — as weight taps
// (tapdiff/weight_taps.hpp), in the order the loader loads them.
void record_weight_taps(Executor& ex, const EngineWeights& weights, ElemType precision,
                        const GgufFile& model, const ModelConfig& config, TraceWriter& trace,
                        const WeightTapOptions& options);

}  // namespace tapdiff::engine
