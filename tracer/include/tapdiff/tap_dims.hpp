// The model symbols that tap row shapes are written in. Plain integers, so the tracer does
// not depend on model/ (producers fill it from their ModelConfig); 0 means "unknown".
#pragma once

#include <cstdint>

namespace tapdiff {

struct TapDims {
  std::int64_t n_layer = 0;
  std::int64_t n_embd = 0;
  std::int64_t n_head = 0;
  std::int64_t n_head_kv = 0;
  std::int64_t head_dim = 0;
  std::int64_t n_ff = 0;
  std::int64_t n_vocab = 0;
  std::int64_t n_ctx = 0;  // the trace's declared total positions (prompt + generated)
  // A mixture of experts: experts per layer and per token (n_ff is each expert's width); 0 for a
  // dense model, and where a producer does not say.
  std::int64_t n_expert = 0;
  std::int64_t n_expert_used = 0;

  bool complete() const {
    return n_layer > 0 && n_embd > 0 && n_head > 0 && n_head_kv > 0 && head_dim > 0 && n_ff > 0 &&
           n_vocab > 0 && n_ctx > 0;
  }
  friend bool operator==(const TapDims& a, const TapDims& b) {
    return a.n_layer == b.n_layer && a.n_embd == b.n_embd && a.n_head == b.n_head &&
           a.n_head_kv == b.n_head_kv && a.head_dim == b.head_dim && a.n_ff == b.n_ff &&
           a.n_vocab == b.n_vocab && a.n_ctx == b.n_ctx && a.n_expert == b.n_expert &&
           a.n_expert_used == b.n_expert_used;
  }
  friend bool operator!=(const TapDims& a, const TapDims& b) { return !(a == b); }
};

}  // namespace tapdiff
