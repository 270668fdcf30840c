// The fault table the engine tests share: every fault on a fixture where it applies, with the
// first divergence docs/faults.md states, and the rule that finds a first divergence between
// a clean and a faulty trace of the same engine. The rule follows DESIGN.md: the earliest tap
// in execution order with a differing row, at its earliest such position, considering only
// positions before the first token that differs (later positions ran on other inputs); when
// nothing differs before it, the finding is the token sequence at that position.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "engine_test_util.hpp"

namespace tapdiff::engine::test {

struct Divergence {
  std::string tap;  // full name, or "tokens"
  std::int64_t position = -1;
};

inline std::int64_t first_token_difference(const std::vector<std::int32_t>& a,
                                           const std::vector<std::int32_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return std::int64_t(i);
  return a.size() == b.size() ? -1 : std::int64_t(n);
}

// `clean` and `faulty` come from the same engine and executor: any bit that differs is the
// fault's doing.
inline Divergence first_divergence(const std::string& clean, const std::string& faulty) {
  const TraceReader c(clean), f(faulty);
  const std::int64_t token_limit = first_token_difference(c.metadata().tokens, f.metadata().tokens);
  const std::int64_t last =
      token_limit < 0 ? std::numeric_limits<std::int64_t>::max() : token_limit - 1;
  for (const TapInfo& ct : c.taps()) {  // execution order
    const TapRows x = c.read(ct, 0, last), y = f.read(f.tap(ct.name, ct.layer), 0, last);
    // A row of another shape differs at the first position both hold.
    if (x.row_shape != y.row_shape && x.size() > 0 && y.size() > 0)
      return {ct.full_name, std::max(x.positions.front(), y.positions.front())};
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (std::memcmp(x.row(i), y.row(i), std::size_t(x.row_size) * sizeof(float)) != 0)
        return {ct.full_name, x.positions[i]};
  }
  if (token_limit >= 0) return {"tokens", token_limit};
  return {};
}

struct FaultCase {
  const char* fault;
  FixtureSpec spec;
  Divergence expected;
  int prefill_chunk = 0;  // both runs prefill in chunks of this many tokens (0: one batch)
};

inline void PrintTo(const FaultCase& c, std::ostream* os) {
  *os << c.fault << " on " << arch_name(c.spec.arch);
}

// Q8_0 matrices with an F32 embedding: the scale bug first shows in a projection.
inline FixtureSpec q8_projections() {
  FixtureSpec s = llama_spec(GgmlType::Q8_0);
  s.type_overrides = {{"token_embd.weight", GgmlType::F32}};
  return s;
}

// Prompt of P = 5 tokens, 6 generated: decode positions 5..9.
inline std::vector<FaultCase> fault_cases() {
  return {
      {"kv-stuck-length", llama_spec(), {"blk.0.attn.probs", 5}},
      {"kv-append-offset", llama_spec(), {"blk.0.attn.probs", 5}},
      {"kv-unsliced", llama_spec(), {"blk.0.attn.probs", 5}},
      {"first-token-twice", llama_spec(), {"tokens", 6}},
      {"prefill-rope-same-position", llama_spec(), {"blk.0.attn_q.rope", 1}},
      {"rope-wrong-pairing", llama_spec(), {"blk.0.attn_q.rope", 1}},
      {"rope-wrong-pairing", qwen2_spec(), {"blk.0.attn_q.rope", 1}},
      {"rope-wrong-base", qwen2_spec(), {"blk.0.attn_q.rope", 1}},
      {"weights-transposed", llama_spec(), {"blk.0.attn_output", 0}},
      {"lm-head-op-n", llama_spec(), {"output", 4}},
      {"lm-head-op-n", qwen2_spec(), {"output", 4}},  // tied output: token_embd as the head
      {"bias-dropped", qwen2_spec(), {"blk.0.attn_q", 0}},
      {"bias-misread", qwen2_spec(), {"blk.0.attn_q", 0}},
      {"dequant-q8-scale", q8_projections(), {"blk.0.attn_q", 0}},
      {"dequant-q8-scale", llama_spec(GgmlType::Q8_0), {"token_embd", 0}},
      {"attn-scale", llama_spec(), {"blk.0.attn.probs", 1}},
      {"causal-mask-off", llama_spec(), {"blk.0.attn.probs", 0}},
      {"gqa-head-map", llama_spec(), {"blk.0.attn.probs", 1}},
      {"norm-weight-dropped", llama_spec(), {"blk.0.attn_norm", 0}},
      {"dequant-missing", llama_spec(GgmlType::Q8_0), {"token_embd", 0}},
      // token_embd is cut at row 150, past every prompt token; attn_q's Q8_0 weight at row 30.
      {"tensor-bytes-truncated", llama_spec(GgmlType::Q8_0), {"blk.0.attn_q", 0}},
      {"weight-not-wired", llama_spec(), {"blk.0.attn_v", 0}},
      {"weight-not-wired", qwen2_spec(), {"blk.0.attn_v", 0}},
      {"rope-position-ignored", llama_spec(), {"blk.0.attn_q.rope", 1}},
      {"kv-not-written-decode", llama_spec(), {"blk.0.kv.k", 5}},
      {"ffn-dim-wrong", llama_spec(), {"blk.0.ffn_gate", 0}},
      {"token-id-bookkeeping", llama_spec(), {"tokens", 5}},
      {"ffn-norm-loads-attn-norm", llama_spec(), {"blk.0.ffn_norm", 0}},
      {"kv-layer-shared", llama_spec(), {"blk.0.attn.probs", 5}},
      {"attn-keys-off-by-one", llama_spec(), {"blk.0.attn.probs", 4}},
      {"softmax-sum-all-keys", llama_spec(), {"blk.0.attn.probs", 0}},
      {"norm-weight-plus-one", llama_spec(), {"blk.0.attn_norm", 0}},
      {"final-norm-skipped", llama_spec(), {"output_norm", 0}},
      {"resid-attn-dropped", llama_spec(), {"blk.0.resid.attn", 0}},
      {"ffn-gelu-for-silu", llama_spec(), {"blk.0.ffn.act", 0}},
      {"ffn-gate-up-swapped", llama_spec(), {"blk.0.ffn.act", 0}},
      {"attn-v-aliases-k", llama_spec(), {"blk.0.attn_k", 0}},
      {"attn-v-aliases-k", qwen2_spec(), {"blk.0.attn_k", 0}},
      {"lm-head-stale-row", llama_spec(), {"output", 5}},
      {"lm-head-stale-row", qwen2_spec(), {"output", 5}},  // tied output
      {"embed-scaled", llama_spec(), {"token_embd", 0}},
      {"dequant-q8-unsigned", llama_spec(GgmlType::Q8_0), {"token_embd", 0}},
      {"dequant-q8-unsigned", q8_projections(), {"blk.0.attn_q", 0}},
      {"rope-q-not-rotated", llama_spec(), {"blk.0.attn_q.rope", 1}},
      {"rope-q-not-rotated", qwen2_spec(), {"blk.0.attn_q.rope", 1}},
      {"rope-freq-n-embd", llama_spec(), {"blk.0.attn_q.rope", 1}},
      {"rope-freq-n-embd", qwen2_spec(), {"blk.0.attn_q.rope", 1}},
      {"norm-mean-centered", llama_spec(), {"blk.0.attn_norm", 0}},
      {"attn-out-heads-reversed", llama_spec(), {"blk.0.attn.out", 0}},
      {"attn-out-heads-reversed", qwen2_spec(), {"blk.0.attn.out", 0}},
      {"kv-decode-write-late", llama_spec(), {"blk.0.attn.probs", 5}},
      {"resid-attn-doubled", llama_spec(), {"blk.1.resid.attn", 0}},
      {"embed-position-for-token", llama_spec(), {"token_embd", 0}},
      {"dequant-q8-block-stride", llama_spec(GgmlType::Q8_0), {"token_embd", 0}},
      {"dequant-q8-block-stride", q8_projections(), {"blk.0.attn_q", 0}},
      {"ffn-up-op-n", llama_spec(), {"blk.0.ffn_up", 0}},
      {"ffn-up-op-n", qwen2_spec(), {"blk.0.ffn_up", 0}},
      {"ffn-down-race", llama_spec(), {"blk.0.ffn_down", 0}},
      {"ffn-down-race", qwen2_spec(), {"blk.0.ffn_down", 0}},
      {"qk-norm-dropped", qwen3_spec(), {"blk.0.attn_q_norm", 0}},
      {"rope-freq-factors-ignored", llama3_spec(), {"blk.0.attn_q.rope", 1}},
      {"attn-softcap-missing", gemma2_spec(), {"blk.0.attn.probs", 1}},
      {"rope-local-base-ignored", gemma3_spec(), {"blk.0.attn_q.rope", 1}},
      {"fused-qkv-kv-swapped", phi3_spec(), {"blk.0.attn_k", 0}},  // without weight taps
      {"ffn-gate-up-swapped", phi3_spec(), {"blk.0.ffn.act", 0}},
      {"weight-not-wired", phi3_spec(), {"blk.0.attn_v", 0}},
      {"qk-norm-dropped", gemma3_spec(), {"blk.0.attn_q_norm", 0}},
      {"norm-weight-dropped", gemma2_spec(), {"blk.0.attn_norm", 0}},
      {"resid-attn-dropped", gemma2_spec(), {"blk.0.resid.attn", 0}},
      {"rope-wrong-pairing", qwen3_spec(), {"blk.0.attn_q.rope", 1}},
      {"gqa-head-map", qwen3_spec(), {"blk.0.attn.probs", 1}},
      // Chunks of 2: the chunk at 2..3 overwrites slots 0..1 and attends to them.
      {"kv-chunk-offset", llama_spec(), {"blk.0.attn.probs", 2}, 2},
      {"kv-chunk-offset", qwen2_spec(), {"blk.0.attn.probs", 3}, 3},
      {"moe-weights-unnormalized", qwen3moe_spec(), {"blk.0.ffn.routing", 0}},
      // Gemma 3 scales its global layers only, the first at 5; linear scaling leaves position 0
      // (angle 0) alone, YaRN's magnitude factor does not.
      {"rope-scaling-ignored", rope_scaled(gemma3_spec(), RopeScalingType::linear), {"blk.5.attn_q.rope", 1}},
      {"rope-scaling-ignored", rope_scaled(llama_spec(), RopeScalingType::yarn), {"blk.0.attn_q.rope", 0}},
      {"rope-yarn-as-linear", rope_scaled(qwen2_spec(), RopeScalingType::yarn), {"blk.0.attn_q.rope", 0}},
      {"rope-q-not-rotated", rope_scaled(llama_spec(), RopeScalingType::yarn), {"blk.0.attn_q.rope", 0}},
      // LongRoPE's magnitude factor (1.5) acts at position 0 too.
      {"rope-scaling-ignored", rope_scaled(phi3_spec(), RopeScalingType::longrope), {"blk.0.attn_q.rope", 0}},
      {"moe-weights-unnormalized", mixtral_spec(GgmlType::Q8_0), {"blk.0.ffn.routing", 0}},
      // Layers 0..2 rotate as they should; layer 3, without RoPE, is rotated from position 1 on.
      {"rope-nope-rotated", smollm3_spec(), {"blk.3.attn_q.rope", 1}},
      // Right below position 8, YaRN's original context, where the temperature is still 1.
      {"attn-temperature-ignored", mistral3_spec(), {"blk.0.attn.probs", 8}},
      {"resid-multiplier-ignored", granite_spec(), {"blk.0.resid.attn", 0}},
      // Logits are recorded from the last prompt position on.
      {"logit-scale-ignored", granite_spec(GgmlType::Q8_0), {"output", 4}},
  };
}

// Runs a fault case on `backend`: the clean and the faulty trace, and where they first differ.
inline Divergence run_fault_case(const FaultCase& fc, Backend backend) {
  const GgufFile model = fixture_file(fc.spec);
  const std::vector<int> prompt = {1, 17, 42, 99, 7};
  EngineOptions o;
  o.backend = backend;
  o.n_predict = 6;
  o.prefill_chunk = fc.prefill_chunk;
  const TempTrace clean("clean"), faulty(std::string("fault_") + fc.fault);
  const auto clean_tokens = run_engine(model, prompt, o, clean.path);
  // The token-sequence fault is visible only if the clean run's first two tokens differ.
  if (std::string(fc.fault) == "first-token-twice") {
    EXPECT_NE(clean_tokens[5], clean_tokens[6]);
  }
  // The step-index fault is visible only if the clean run's first token is not 0.
  if (std::string(fc.fault) == "token-id-bookkeeping") {
    EXPECT_NE(clean_tokens[5], 0);
  }
  o.fault = fc.fault;
  run_engine(model, prompt, o, faulty.path);
  const TraceReader reader(faulty.path);
  EXPECT_TRUE(reader.complete());
  EXPECT_EQ(reader.metadata().fault, fc.fault);
  return first_divergence(clean.path, faulty.path);
}

}  // namespace tapdiff::engine::test
