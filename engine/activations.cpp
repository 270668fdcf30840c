#include "engine/activations.hpp"

#include <algorithm>
#include <cstdint>

#include "engine/executor.hpp"

namespace tapdiff::engine {

Activations::Activations(Executor& ex, const ModelConfig& c, int rows, int n_ctx) : max_rows(rows) {
  const auto R = std::size_t(rows);
  auto floats = [&](std::size_t n) { return ex.allocate(n * sizeof(float)); };
  auto ints = [&](std::size_t n) { return ex.allocate(n * sizeof(std::int32_t)); };
  tokens = ints(R);
  positions = ints(R);
  rope_positions = ints(R);
  x = floats(R * std::size_t(c.n_embd));
  norm = floats(R * std::size_t(c.n_embd));
  q = floats(R * std::size_t(c.q_dim()));
  k = floats(R * std::size_t(c.kv_dim()));
  v = floats(R * std::size_t(c.kv_dim()));
  probs = ex.allocate(probs_bytes(c, rows, n_ctx));
  attn_out = floats(R * std::size_t(c.q_dim()));
  proj = floats(R * std::size_t(c.n_embd));
  const std::size_t slots = R * std::size_t(c.moe() ? c.n_expert_used : 1);
  gate = floats(slots * std::size_t(c.n_ff));
  up = floats(slots * std::size_t(c.n_ff));
  act = floats(slots * std::size_t(c.n_ff));
  if (c.moe()) {
    router = floats(R * std::size_t(c.n_expert));
    routing = floats(R * std::size_t(c.n_expert));
    experts = ints(slots);
    expert_weights = floats(slots);
    grouped_slots = ints(2 * slots);
    grouped_in = floats(slots * std::size_t(std::max(c.n_embd, c.n_ff)));
    grouped_gate = floats(slots * std::size_t(c.n_ff));
    grouped_up = floats(slots * std::size_t(c.n_ff));
    grouped_down = floats(slots * std::size_t(c.n_embd));
  }
  logits = floats(std::size_t(c.n_vocab));
  next_token = ints(1);
}

std::uint64_t Activations::probs_bytes(const ModelConfig& c, int max_rows, int n_ctx) {
  return std::uint64_t(max_rows) * std::uint64_t(c.n_head) * std::uint64_t(n_ctx) * sizeof(float);
}

}  // namespace tapdiff::engine
