// Named activation buffers for one forward step of up to max_rows positions (the prompt for a
// prefill, 1 for a decode). A buffer's name is the tap it feeds, so recording a tap is a
// pointer read. Rows are positions; buffers marked "rounded" hold values rounded to the
// precision because a real engine stores them in 16 bits (GEMM inputs, attention's q).
#pragma once

#include <cstdint>

#include "engine/device/buffer.hpp"
#include "model/config.hpp"

namespace tapdiff::engine {

class Executor;

struct Activations {
  Activations(Executor& ex, const ModelConfig& c, int max_rows, int n_ctx);
  // The buffer that grows with the context: attn.probs of max_rows positions.
  static std::uint64_t probs_bytes(const ModelConfig& c, int max_rows, int n_ctx);

  int max_rows;
  Buffer tokens;          // (max_rows,) int32 input token ids
  Buffer positions;       // (max_rows,) int32 absolute positions (causal mask, RoPE)
  Buffer rope_positions;  // (max_rows,) int32 what RoPE rotates by under prefill-rope-same-position
  Buffer x;               // (max_rows, n_embd) residual stream: token_embd, resid.attn, resid.ffn
  Buffer norm;            // (max_rows, n_embd) attn_norm / ffn_norm / output_norm, rounded
  Buffer q;           // (max_rows, n_head, head_dim) attn_q, then attn_q.rope in place (rounded)
  Buffer k;           // (max_rows, n_head_kv, head_dim) attn_k, then attn_k.rope in place
  Buffer v;           // (max_rows, n_head_kv, head_dim) attn_v
  Buffer probs;       // (max_rows, n_head, n_ctx) attn.probs
  Buffer attn_out;    // (max_rows, n_head, head_dim) attn.out, rounded
  Buffer proj;        // (max_rows, n_embd) attn_output, then ffn_down
  Buffer gate;        // (max_rows, n_ff) ffn_gate; a mixture of experts: (max_rows, n_expert_used, n_ff)
  Buffer up;          // (max_rows, n_ff) ffn_up; as gate
  Buffer act;         // (max_rows, n_ff) ffn.act, rounded; as gate
  // A mixture of experts only. A token's n_expert_used rows ("slots") follow the order of its
  // experts; grouped buffers hold every slot's row grouped by expert, for the experts' GEMMs.
  Buffer router;          // (max_rows, n_expert) ffn_gate_inp
  Buffer routing;         // (max_rows, n_expert) ffn.routing
  Buffer experts;         // (max_rows, n_expert_used) int32 each slot's expert, ascending
  Buffer expert_weights;  // (max_rows, n_expert_used) each slot's routing weight
  Buffer grouped_slots;   // (2, max_rows · n_expert_used) int32: each grouped row's slot, then its token
  Buffer grouped_in;      // (max_rows · n_expert_used, max(n_embd, n_ff)) an expert GEMM's input rows; then ffn_down's slots
  Buffer grouped_gate;    // (max_rows · n_expert_used, n_ff)
  Buffer grouped_up;      // (max_rows · n_expert_used, n_ff)
  Buffer grouped_down;    // (max_rows · n_expert_used, n_embd)
  Buffer logits;      // (1, n_vocab) output of the step's last position
  Buffer next_token;  // (1,) int32 argmax of logits
};

}  // namespace tapdiff::engine
