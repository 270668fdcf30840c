#include "adapters/llama_cpp/node_map.hpp"

#include <array>
#include <charconv>

#include "tapdiff/tap_catalogue.hpp"

namespace tapdiff::adapters::llama_cpp {
namespace {

// "attn_norm-3" -> ("attn_norm", 3); "result_norm" -> ("result_norm", -1).
std::pair<std::string_view, int> split_layer(std::string_view name) {
  const std::size_t dash = name.rfind('-');
  if (dash == std::string_view::npos || dash + 1 == name.size()) return {name, -1};
  int layer = 0;
  const char* end = name.data() + name.size();
  auto [p, ec] = std::from_chars(name.data() + dash + 1, end, layer);
  if (ec != std::errc() || p != end) return {name, -1};
  return {name.substr(0, dash), layer};
}

// "blk.3.attn_q.weight" -> ("attn_q", 3, "weight"); nothing for other names.
struct WeightName {
  std::string_view tensor;
  int layer;
  std::string_view kind;  // weight | bias
};
std::optional<WeightName> parse_weight(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  int layer = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || p == name.data() || *p != '.') return std::nullopt;
  name.remove_prefix(static_cast<std::size_t>(p - name.data()) + 1);
  const std::size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  return WeightName{name.substr(0, dot), layer, name.substr(dot + 1)};
}

// Projections found by their weight: the tensor's GGUF name is the tap's name.
constexpr std::array<std::string_view, 8> kProjections = {"attn_q",   "attn_k", "attn_v",   "attn_output",
                                                          "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp"};

struct NamedNode {
  std::string_view node;  // llama.cpp's name, without the layer suffix
  std::string_view tap;
  NodeLayout layout;
};
constexpr std::array<NamedNode, 20> kNamed = {{
    {"embd", "token_embd", NodeLayout::rows},
    {"inp_scaled", "token_embd", NodeLayout::rows},
    {"attn_norm", "attn_norm", NodeLayout::rows},
    {"Qcur_normed", "attn_q_norm", NodeLayout::rows},
    {"Kcur_normed", "attn_k_norm", NodeLayout::rows},
    {"kq_soft_max", "attn.probs", NodeLayout::kq_softmax},
    {"attn_post_norm", "attn_post_norm", NodeLayout::rows},
    {"ffn_inp", "resid.attn", NodeLayout::rows},
    {"sa_out", "resid.attn", NodeLayout::rows},
    {"ffn_post_norm", "ffn_post_norm", NodeLayout::rows},
    {"ffn_norm", "ffn_norm", NodeLayout::rows},
    {"ffn_moe_weights_norm", "ffn.routing", NodeLayout::expert_weights},
    {"ffn_moe_gate", "ffn_gate_exps", NodeLayout::expert_rows},
    {"ffn_moe_up", "ffn_up_exps", NodeLayout::expert_rows},
    {"ffn_moe_swiglu", "ffn.act_exps", NodeLayout::expert_rows},
    {"ffn_moe_gate_par", "ffn.act_exps", NodeLayout::expert_rows},
    {"ffn_moe_out", "ffn_down", NodeLayout::rows},
    {"l_out", "resid.ffn", NodeLayout::rows},
    {"result_norm", "output_norm", NodeLayout::rows},
    {"result_output", "output", NodeLayout::rows},
}};

}  // namespace

int node_layer(std::string_view name) { return split_layer(name).second; }

std::optional<TapTarget> tap_for_node(const GraphNode& node) {
  if (node.op == NodeOp::get_rows && node.src0 == "token_embd.weight") return TapTarget{"token_embd", -1};
  if (node.op == NodeOp::mul_mat || node.op == NodeOp::add) {
    // A projection is its weight's MUL_MAT, then the ADD of its bias when the model has one.
    const auto w = parse_weight(node.op == NodeOp::mul_mat ? node.src0 : node.src1);
    if (w && w->kind == (node.op == NodeOp::mul_mat ? "weight" : "bias")) {
      for (std::string_view p : kProjections)
        if (w->tensor == p) return TapTarget{std::string(p), w->layer};
      if (w->tensor == "attn_qkv") return TapTarget{"attn_q", w->layer, NodeLayout::fused_qkv};
    }
  }
  const auto [base, layer] = split_layer(node.name);
  // Q and K as attention takes them: the ROPE named Qcur, after the RESHAPE of the same name; in a
  // layer without RoPE (smollm3's NoPE layers) that RESHAPE is the last.
  if ((node.op == NodeOp::rope || node.op == NodeOp::reshape) && layer >= 0) {
    if (base == "Qcur") return TapTarget{"attn_q.rope", layer};
    if (base == "Kcur") return TapTarget{"attn_k.rope", layer};
  }
  for (const NamedNode& n : kNamed) {
    const bool global = n.tap == "output_norm" || n.tap == "output" || n.tap == "token_embd";
    if (base != n.node) continue;
    if ((layer < 0) == global) return TapTarget{std::string(n.tap), layer, n.layout};
    if (!global && layer < 0 && node.layer_hint >= 0) return TapTarget{std::string(n.tap), node.layer_hint, n.layout};
  }
  return std::nullopt;
}

int expert_ids_layer(const GraphNode& node) {
  const auto [base, layer] = split_layer(node.name);
  return base == "ffn_moe_topk" ? layer : -1;
}

std::optional<TapTarget> tap_for_input(const GraphNode& node) {
  if (node.op != NodeOp::mul_mat) return std::nullopt;
  const auto w = parse_weight(node.src0);
  if (!w || w->kind != "weight") return std::nullopt;
  if (w->tensor == "attn_output") return TapTarget{"attn.out", w->layer};
  if (w->tensor == "ffn_down") return TapTarget{"ffn.act", w->layer};
  return std::nullopt;
}

const std::vector<NodeMapRow>& node_map_table() {
  static const std::vector<NodeMapRow> table = {
      {"token_embd", "the `GET_ROWS` of `token_embd.weight` (gemma2: `inp_scaled`, the row times sqrt(n_embd); "
                     "granite: `embd`, the row times its embedding multiplier)"},
      {"attn_norm", "`attn_norm-{l}`"},
      {"attn_q", "the `MUL_MAT` of `blk.{l}.attn_q.weight`, then the `ADD` of its bias (phi3: the first n_head * head_dim of each row of `blk.{l}.attn_qkv.weight`'s, k and v the next)"},
      {"attn_k", "the `MUL_MAT` of `blk.{l}.attn_k.weight`, then the `ADD` of its bias"},
      {"attn_v", "the `MUL_MAT` of `blk.{l}.attn_v.weight`, then the `ADD` of its bias"},
      {"attn_q_norm", "`Qcur_normed-{l}` (qwen3)"},
      {"attn_k_norm", "`Kcur_normed-{l}` (qwen3)"},
      {"attn_q.rope", "the `ROPE` named `Qcur-{l}` (a layer without RoPE: the `RESHAPE` named so, smollm3)"},
      {"attn_k.rope", "the `ROPE` named `Kcur-{l}` (a layer without RoPE: the `RESHAPE` named so, smollm3)"},
      {"kv.k", "not available from llama.cpp"},
      {"kv.v", "not available from llama.cpp"},
      {"attn.probs", "`kq_soft_max-{l}`, `[n_kv, n_tokens, n_head]` permuted to `[n_head, n_ctx]`; "
                     "not available with flash attention"},
      {"attn.probs.summary", "derived by the trace writer from `attn.probs` (with it, not available with flash "
                             "attention)"},
      {"attn.out", "the input (`src[1]`) of the `MUL_MAT` of `blk.{l}.attn_output.weight`"},
      {"attn_output", "the `MUL_MAT` of `blk.{l}.attn_output.weight`, then the `ADD` of its bias"},
      {"attn_post_norm", "`attn_post_norm-{l}` (gemma2)"},
      {"resid.attn", "`ffn_inp-{l}` (gemma2: `sa_out-{l}`)"},
      {"ffn_norm", "`ffn_norm-{l}`"},
      {"ffn_gate", "the `MUL_MAT` of `blk.{l}.ffn_gate.weight` (phi3: the first n_ff of each row of `blk.{l}.ffn_up.weight`'s, up the second)"},
      {"ffn_up", "the `MUL_MAT` of `blk.{l}.ffn_up.weight`"},
      {"ffn.act", "the input (`src[1]`) of the `MUL_MAT` of `blk.{l}.ffn_down.weight`"},
      {"ffn_gate_inp", "the `MUL_MAT` of `blk.{l}.ffn_gate_inp.weight` (a mixture of experts)"},
      {"ffn.routing", "`ffn_moe_weights_norm-{l}`, each token's weights scattered to their experts by `ffn_moe_topk-{l}`"},
      {"ffn_gate_exps", "`ffn_moe_gate-{l}`, `[n_ff, n_used, n_tokens]` in each token's top-k order, put in ascending "
                        "expert order by `ffn_moe_topk-{l}`"},
      {"ffn_up_exps", "`ffn_moe_up-{l}`, as `ffn_gate_exps`"},
      {"ffn.act_exps", "`ffn_moe_swiglu-{l}` (older graphs: `ffn_moe_gate_par-{l}`), as `ffn_gate_exps`"},
      {"ffn_down", "the `MUL_MAT` of `blk.{l}.ffn_down.weight` (a mixture of experts: `ffn_moe_out-{l}`)"},
      {"ffn_post_norm", "`ffn_post_norm` (gemma2; named without a layer: the layer of the nodes around it)"},
      {"resid.ffn", "`l_out-{l}`"},
      {"output_norm", "`result_norm`"},
      {"output", "`result_output`"},
  };
  return table;
}

std::string node_map_markdown() {
  std::string out = "| tap | llama.cpp node |\n|---|---|\n";
  for (const NodeMapRow& row : node_map_table()) {
    const bool layer = find_tap_spec(row.tap) != nullptr && find_tap_spec(row.tap)->scope == TapScope::layer;
    out += "| `" + std::string(layer ? "blk.{l}." : "") + std::string(row.tap) + "` | " + std::string(row.node) + " |\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> unavailable_taps(bool flash_attn, std::string_view arch) {
  std::vector<std::pair<std::string, std::string>> out = {
      {"kv.k", "not available from llama.cpp: the K cache slot is written by a SET_ROWS into the cache "
               "and read back only as part of the whole cache view, with no node of its own"},
      {"kv.v", "not available from llama.cpp: the V cache slot is written by a SET_ROWS into the cache "
               "and read back only as part of the whole cache view, with no node of its own"},
  };
  if (flash_attn)
    out.emplace_back("attn.probs",
                     "not available from llama.cpp with flash attention: the fused FLASH_ATTN_EXT kernel keeps "
                     "the softmax weights to itself (run without --llama-flash-attn to record them)");
  if (arch == "phi3")
    out.emplace_back("resid.attn", "not available from llama.cpp: its phi3 graph leaves the residual add after "
                                   "attention unnamed");
  return out;
}

}  // namespace tapdiff::adapters::llama_cpp
