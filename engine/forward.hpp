// The forward pass, shared by both executors: which op runs on which buffer, every GEMM's op
// flags and leading dimensions, the bias adds, the RoPE and attention calls, KV cache
// bookkeeping, precision rounding and taps. One step runs n consecutive positions as one
// batch (the whole prompt for prefill, 1 for decode).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/activations.hpp"
#include "engine/device/elem_type.hpp"
#include "engine/faults.hpp"
#include "engine/gemm/gemm.hpp"
#include "engine/kv_cache.hpp"
#include "engine/options.hpp"
#include "engine/taps.hpp"
#include "engine/weights.hpp"
#include "model/config.hpp"

namespace tapdiff {
class TraceWriter;
}

namespace tapdiff::engine {

class Executor;

class Forward {
public:
  // Decoded weight values a batched GEMM's scratch slice holds at most, unless the constructor
  // says otherwise (scratch_elements).
  static constexpr std::int64_t kScratchElements = std::int64_t(1) << 24;

  // n_ctx: positions the run declares (prompt + generated), the KV cache's capacity and the
  // width of attn.probs rows. max_rows: the largest batch step() takes. trace may be null;
  // lockstep, when not null, is the trace every tap point continues from (taps.hpp).
  // logits_all: a batched step computes (and records) the logits of every row, not just the last.
  Forward(Executor& ex, const EngineWeights& weights, const ModelConfig& config, int n_ctx,
          int max_rows, Precision precision, FaultSwitch faults, TraceWriter* trace,
          const LockstepSource* lockstep = nullptr, bool logits_all = false,
          std::int64_t scratch_elements = kScratchElements);

  // Runs tokens[0..n) at positions p0..p0+n-1 in one batch, records the step's taps and
  // returns the greedy next token after position p0+n-1 (-1 when a model part lacks the head).
  int step(const int* tokens, int n, int p0);

  std::vector<float> logits() const;  // (n_vocab,) of the last step's last position
  const KvCache& cache() const { return cache_; }

private:
  void stream_in(int p0, int n);  // act_.x = the embedding, or what enters a model part's first stage
  void attention_block(int layer, int p0, int n);
  void ffn_block(int layer, int p0, int n);
  void dense_ffn(const LayerWeights& L, int layer, int p0, int n);    // act_.proj = ffn_down
  void experts_ffn(const LayerWeights& L, int layer, int p0, int n);  // act_.proj = ffn_down (forward_experts.cpp)
  int output_head(int p0, int n);
  void logits_out(float* logits, std::int64_t n);
  float residual_factor() const;
  void norm(const Buffer& weight, int n);    // act_.norm = RMSNorm(act_.x), rounded
  void round(float* x, std::int64_t count);  // to the precision; nothing in f32
  // C = op(W) B for a weight W in its GGUF encoding (B not transposed; see forward.cpp).
  void gemm(GemmOp op_w, int m, int n, int k, const Matrix& w, int ldw, const float* b, int ldb,
            float* c, int ldc);
  // C = W B with 8-bit activations (precision q8, W q8_multipliable, read by rows).
  void gemm_q8(int m, int n, int k, const Matrix& w, const float* b, int ldb, float* c, int ldc);
  // Elements [first, first + n) of W decoded into scratch_ in the GEMM's operand type.
  const void* decode_to_scratch(const Matrix& w, std::int64_t first, std::int64_t n);
  void upload_ints(Buffer& dst, const std::vector<std::int32_t>& values);
  void grow(Buffer& scratch, std::size_t bytes);  // to at least `bytes`, contents not kept

  Executor& ex_;
  const EngineWeights& w_;
  const ModelConfig& c_;
  int n_ctx_;
  const float* rope_factors_ = nullptr;  // on the device: the RoPE frequency factors this run's context takes
  ElemType precision_;                   // what activations are stored as
  bool int8_activations_;                // precision q8
  FaultSwitch faults_;
  KvCache cache_;
  Activations act_;
  TapProbe taps_;
  ElemType operand_type_;                // a decoded weight's type as a GEMM operand
  Buffer scratch_;                       // decoded weights for batched GEMMs
  Buffer q8_scratch_;                    // a GEMM's quantized activations (precision q8)
  std::vector<std::int32_t> host_ints_;  // (max_rows,) staging for token and position uploads
  int stale_head_row_ = -1;              // fault lm-head-stale-row: the first step's head row
  bool logits_all_;
  std::int64_t scratch_elements_;
  Buffer prompt_logits_;                 // (max_rows - 1, n_vocab) when logits_all_: the rows before the last
};

}  // namespace tapdiff::engine
