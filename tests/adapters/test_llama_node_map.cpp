// Which llama.cpp graph node is which catalogue tap: the names and ops llama.cpp's graph
// builders give (src/llama-graph.cpp, src/models/*.cpp of the pinned version).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "adapters/llama_cpp/node_map.hpp"
#include "tapdiff/tap_catalogue.hpp"

namespace tapdiff::adapters::llama_cpp {
namespace {

std::string tap_of(std::string_view name, NodeOp op = NodeOp::other, std::string_view src0 = {},
                   std::string_view src1 = {}) {
  const auto t = tap_for_node({name, op, src0, src1});
  return t ? t->tap + "@" + std::to_string(t->layer) : "-";
}

TEST(LlamaNodeMap, NamedNodesCarryTheirLayer) {
  EXPECT_EQ(tap_of("attn_norm-0", NodeOp::other), "attn_norm@0");
  EXPECT_EQ(tap_of("ffn_inp-11"), "resid.attn@11");
  EXPECT_EQ(tap_of("ffn_norm-3"), "ffn_norm@3");
  EXPECT_EQ(tap_of("l_out-29"), "resid.ffn@29");
  EXPECT_EQ(tap_of("result_norm"), "output_norm@-1");
  // The embedding as the stream takes it: granite's multiplier is a SCALE named "embd" (elsewhere
  // that name is the GET_ROWS's own), gemma's sqrt(n_embd) "inp_scaled".
  EXPECT_EQ(tap_of("embd"), "token_embd@-1");
  EXPECT_EQ(tap_of("inp_scaled"), "token_embd@-1");
  EXPECT_EQ(tap_of("result_output", NodeOp::mul_mat, "output.weight"), "output@-1");
  const auto probs = tap_for_node({"kq_soft_max-7", NodeOp::other, "kq-7", "KQ_mask"});
  ASSERT_TRUE(probs);
  EXPECT_EQ(probs->layout, NodeLayout::kq_softmax);
}

TEST(LlamaNodeMap, ProjectionsAreFoundByTheirWeight) {
  // qwen2 names no "attn_out" node and llama names "ffn_out" twice: the weight decides.
  EXPECT_EQ(tap_of("Qcur-0", NodeOp::mul_mat, "blk.0.attn_q.weight"), "attn_q@0");
  EXPECT_EQ(tap_of("Qcur-0", NodeOp::add, "Qcur-0", "blk.0.attn_q.bias"), "attn_q@0");
  EXPECT_EQ(tap_of("Vcur-5", NodeOp::mul_mat, "blk.5.attn_v.weight"), "attn_v@5");
  EXPECT_EQ(tap_of("node_80", NodeOp::mul_mat, "blk.1.attn_output.weight"), "attn_output@1");
  EXPECT_EQ(tap_of("ffn_out-2", NodeOp::mul_mat, "blk.2.ffn_down.weight"), "ffn_down@2");
  EXPECT_EQ(tap_of("ffn_gate-2", NodeOp::mul_mat, "blk.2.ffn_gate.weight"), "ffn_gate@2");
  EXPECT_EQ(tap_of("ffn_up-2", NodeOp::mul_mat, "blk.2.ffn_up.weight"), "ffn_up@2");
  EXPECT_EQ(tap_of("inp_embd_rows", NodeOp::get_rows, "token_embd.weight", "inp_tokens"), "token_embd@-1");
}

TEST(LlamaNodeMap, ProjectionInputsAreTheAttentionOutputAndTheActivation) {
  const auto input = [](std::string_view src0) {
    const auto t = tap_for_input({"x", NodeOp::mul_mat, src0, "kqv_out-1"});
    return t ? t->tap + "@" + std::to_string(t->layer) : "-";
  };
  EXPECT_EQ(input("blk.1.attn_output.weight"), "attn.out@1");
  EXPECT_EQ(input("blk.4.ffn_down.weight"), "ffn.act@4");
  EXPECT_EQ(input("blk.1.attn_q.weight"), "-");
  EXPECT_EQ(input("output.weight"), "-");
  EXPECT_FALSE(tap_for_input({"x", NodeOp::add, "blk.1.attn_output.weight", "y"}));
  // kqv_out names the attention before a quantized cache's rotation is undone: not a tap.
  EXPECT_EQ(tap_of("kqv_out-4"), "-");
}

TEST(LlamaNodeMap, LookalikesAreNotTaps) {
  EXPECT_EQ(tap_of("Qcur-0", NodeOp::other, "Qcur-0"), "-");  // the reshape view of the projection
  EXPECT_EQ(tap_of("ffn_out-2", NodeOp::add, "ffn_out-2", "ffn_inp-2"), "-");  // llama's residual add
  EXPECT_EQ(tap_of("kq-0", NodeOp::mul_mat, "cache_k_l0 (view) (permuted)"), "-");
  EXPECT_EQ(tap_of("norm-0", NodeOp::other), "-");
  EXPECT_EQ(tap_of("attn_norm"), "-");                                 // a layer tap needs its layer
  EXPECT_EQ(tap_of("result_norm-3"), "-");                             // a global tap has none
  EXPECT_EQ(tap_of("x", NodeOp::mul_mat, "blk.0.attn_q.bias"), "-");   // a bias is added, not multiplied
  EXPECT_EQ(tap_of("x", NodeOp::add, "x", "blk.0.attn_q.weight"), "-");
  EXPECT_EQ(tap_of("x", NodeOp::get_rows, "blk.0.attn_q.weight"), "-");
}

TEST(LlamaNodeMap, RopeOutputsOnly) {
  EXPECT_EQ(tap_of("Qcur-3", NodeOp::rope, "Qcur-3"), "attn_q.rope@3");
  EXPECT_EQ(tap_of("Kcur-3", NodeOp::rope, "Kcur-3"), "attn_k.rope@3");
  EXPECT_EQ(tap_of("Vcur-3", NodeOp::rope, "Vcur-3"), "-");
  // The RESHAPE of the projection into heads, named Qcur too: the ROPE after it replaces it, but a
  // layer without RoPE (smollm3's NoPE layers) hands attention this node.
  EXPECT_EQ(tap_of("Qcur-3", NodeOp::reshape, "Qcur-3"), "attn_q.rope@3");
  EXPECT_EQ(tap_of("Kcur-3", NodeOp::reshape, "Kcur-3"), "attn_k.rope@3");
  EXPECT_EQ(tap_of("Vcur-3", NodeOp::reshape, "Vcur-3"), "-");
  EXPECT_EQ(tap_of("Qcur", NodeOp::reshape, "Qcur"), "-");
}

TEST(LlamaNodeMap, TheTableCoversTheCatalogueAndNamesOnlyItsTaps) {
  std::set<std::string> documented;
  for (const NodeMapRow& row : node_map_table()) {
    EXPECT_NE(find_tap_spec(row.tap), nullptr) << row.tap;
    documented.insert(std::string(row.tap));
  }
  for (const TapSpec& spec : tap_catalogue()) EXPECT_EQ(documented.count(std::string(spec.name)), 1u) << spec.name;
}

TEST(LlamaNodeMap, DocsCarryTheTable) {
  std::ifstream in(std::string(TAPDIFF_SOURCE_DIR) + "/docs/taps.md");
  std::stringstream docs;
  docs << in.rdbuf();
  EXPECT_NE(docs.str().find(node_map_markdown()), std::string::npos)
      << "docs/taps.md's llama.cpp table differs from node_map_table(); it should read:\n" << node_map_markdown();
}

TEST(LlamaNodeMap, UnavailableTapsSayWhy) {
  std::set<std::string> plain, flash;
  for (const auto& [tap, why] : unavailable_taps(false)) {
    plain.insert(tap);
    EXPECT_NE(why.find("not available from llama.cpp"), std::string::npos);
  }
  for (const auto& [tap, why] : unavailable_taps(true)) flash.insert(tap);
  EXPECT_EQ(plain, (std::set<std::string>{"kv.k", "kv.v"}));
  EXPECT_EQ(flash, (std::set<std::string>{"kv.k", "kv.v", "attn.probs"}));
}

}  // namespace
}  // namespace tapdiff::adapters::llama_cpp
