// Which llama.cpp graph node holds which catalogue tap. One table for every architecture
// llama.cpp builds with the shared graph helpers (llama, qwen2, ...); docs/taps.md carries it
// as the "llama.cpp node" column.
//
// A node is matched by llama.cpp's own name ("attn_norm-3": the name given by the graph's cb()
// with the layer appended) or, where the architectures do not name it the same way, by the
// GGUF weight it multiplies or adds ("the MUL_MAT of blk.3.attn_q.weight"). The inputs of the
// output and down projections are taps too (attn.out, ffn.act): taken as the projection's
// input, they are what the projection really multiplied, whatever llama.cpp did before it
// (a quantized cache's Hadamard rotation is undone only after the node it names kqv_out).
// Several nodes may match one tap in one step (the projection, then its bias add): the last
// one in graph order holds the tap's value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapdiff::adapters::llama_cpp {

enum class NodeOp { mul_mat, add, rope, reshape, get_rows, other };

// What the callback sees of a graph node: its name, its op and the names of its first two
// sources (weights carry their GGUF names).
struct GraphNode {
  std::string_view name;
  NodeOp op = NodeOp::other;
  std::string_view src0;
  std::string_view src1;
  // The layer of the last node before this one whose name carries one: llama.cpp names a few
  // per-layer nodes without a layer (gemma2's ffn_post_norm), so their layer is where they sit.
  int layer_hint = -1;
};

// The layer suffix of a node name ("ffn_out-3" -> 3), -1 without one.
int node_layer(std::string_view name);

// How a node's elements map onto the catalogue's rows.
enum class NodeLayout {
  rows,        // ne = [row..., n_tokens]: element order is already (position, row)
  kq_softmax,  // ne = [n_kv, n_tokens, n_head]: permuted to (position, head, key), keys padded to n_ctx
  fused_qkv,   // the MUL_MAT of phi3's attn_qkv: each row is [q | k | v], split into three taps
  // A mixture of experts, in each token's top-k order (its ffn_moe_topk ids): ne = [n_ff, n_used,
  // n_tokens] put in ascending expert order; ne = [n_used, n_tokens] weights scattered to [n_expert].
  expert_rows,
  expert_weights,
};

struct TapTarget {
  std::string tap;  // catalogue short name
  int layer = -1;
  NodeLayout layout = NodeLayout::rows;
};

// The catalogue tap a node holds, or nothing.
std::optional<TapTarget> tap_for_node(const GraphNode& node);
// The layer whose experts a node chose (`ffn_moe_topk-{l}`: each token's expert ids in top-k
// order), or -1: the expert taps' layouts read them.
int expert_ids_layer(const GraphNode& node);
// The catalogue tap a node's second source (src1, the activation a MUL_MAT multiplies) holds.
std::optional<TapTarget> tap_for_input(const GraphNode& node);

// One row of the documented table.
struct NodeMapRow {
  std::string_view tap;
  std::string_view node;  // how the node is found
};
const std::vector<NodeMapRow>& node_map_table();
// The table as docs/taps.md carries it ("## llama.cpp"; a test checks they agree).
std::string node_map_markdown();

// Catalogue taps llama.cpp has no node for, with the reason the trace records.
// flash_attn: the fused kernel keeps the softmax weights to itself; arch: general.architecture.
std::vector<std::pair<std::string, std::string>> unavailable_taps(bool flash_attn, std::string_view arch = "llama");

}  // namespace tapdiff::adapters::llama_cpp
