#include "diff/tap_graph.hpp"

#include <utility>

namespace tapdiff::diff {
namespace {

struct Node {
  std::string_view name;
  std::string_view cls;
  std::vector<TapInput> inputs;
};

// The forward pass as a graph of taps (DESIGN.md "Taps"; both programs compute exactly this).
const std::vector<Node>& graph() {
  static const std::vector<Node> nodes = {
      {"token_embd", "embedding", {}},
      {"attn_norm", "norm", {{"resid.ffn", -1}}},
      {"attn_q", "projection", {{"attn_norm"}}},
      {"attn_k", "projection", {{"attn_norm"}}},
      {"attn_v", "projection", {{"attn_norm"}}},
      // qwen3 normalizes q and k per head before RoPE; other models rotate attn_q itself (an
      // input a trace lacks counts as exact in the jump test).
      {"attn_q_norm", "norm", {{"attn_q"}}},
      {"attn_k_norm", "norm", {{"attn_k"}}},
      {"attn_q.rope", "rope", {{"attn_q_norm"}, {"attn_q"}}},
      {"attn_k.rope", "rope", {{"attn_k_norm"}, {"attn_k"}}},
      {"kv.k", "cache", {{"attn_k.rope"}}},
      {"kv.v", "cache", {{"attn_v"}}},
      {"attn.probs", "attention", {{"attn_q.rope"}, {"kv.k", 0, true}}},
      // Reduced from attn.probs by the trace writer; a trace without attn.probs judges it by
      // attn.probs' own inputs.
      {"attn.probs.summary", "attention", {{"attn.probs"}, {"attn_q.rope"}, {"kv.k", 0, true}}},
      {"attn.out", "attention", {{"attn.probs"}, {"kv.v", 0, true}}},
      {"attn_output", "projection", {{"attn.out"}}},
      // gemma2 normalizes each block's output before adding it to the stream.
      {"attn_post_norm", "norm", {{"attn_output"}}},
      {"resid.attn", "residual", {{"attn_post_norm"}, {"attn_output"}, {"resid.ffn", -1}}},
      {"ffn_norm", "norm", {{"resid.attn"}}},
      {"ffn_gate", "projection", {{"ffn_norm"}}},
      {"ffn_up", "projection", {{"ffn_norm"}}},
      {"ffn.act", "activation", {{"ffn_gate"}, {"ffn_up"}}},
      // A mixture of experts: the router, then the used experts' FFNs, whose down projections
      // ffn_down sums with the routing weights (a dense model has neither input).
      {"ffn_gate_inp", "projection", {{"ffn_norm"}}},
      {"ffn.routing", "routing", {{"ffn_gate_inp"}}},
      {"ffn_gate_exps", "projection", {{"ffn_norm"}, {"ffn.routing"}}},
      {"ffn_up_exps", "projection", {{"ffn_norm"}, {"ffn.routing"}}},
      {"ffn.act_exps", "activation", {{"ffn_gate_exps"}, {"ffn_up_exps"}}},
      {"ffn_down", "projection", {{"ffn.act"}, {"ffn.act_exps"}, {"ffn.routing"}}},
      {"ffn_post_norm", "norm", {{"ffn_down"}}},
      {"resid.ffn", "residual", {{"ffn_post_norm"}, {"ffn_down"}, {"resid.attn"}}},
      {"output_norm", "norm", {{"resid.ffn", -1}}},
      {"output", "logits", {{"output_norm"}}},
  };
  return nodes;
}

const Node* find_node(std::string_view name) {
  for (const auto& n : graph())
    if (n.name == name) return &n;
  return nullptr;
}

}  // namespace

std::string_view tap_class(std::string_view name) {
  const Node* n = find_node(name);
  return n ? n->cls : std::string_view{};
}

std::vector<std::string_view> tap_classes() {
  std::vector<std::string_view> out;
  for (const auto& n : graph()) {
    bool seen = false;
    for (auto c : out) seen = seen || c == n.cls;
    if (!seen) out.push_back(n.cls);
  }
  return out;
}

std::vector<ResolvedInput> tap_inputs(std::string_view name, int layer, int n_layer) {
  std::vector<ResolvedInput> out;
  const Node* n = find_node(name);
  if (!n) return out;
  for (const auto& in : n->inputs) {
    // Global taps read the last layer's output (or another global tap); layer taps read their
    // own layer, or the previous one, where "previous" of layer 0 is the embedding.
    if (in.name == "output_norm") {
      out.push_back({std::string(in.name), -1, in.all_earlier_positions});
      continue;
    }
    const int from = layer < 0 ? n_layer - 1 : layer + in.layer_offset;
    if (from < 0)
      out.push_back({"token_embd", -1, false});
    else
      out.push_back({std::string(in.name), from, in.all_earlier_positions});
  }
  return out;
}

}  // namespace tapdiff::diff
