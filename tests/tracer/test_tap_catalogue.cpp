// The tap catalogue: its table, shapes in model symbols, execution order, the producer check,
// and docs/taps.md carrying exactly the generated table.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "tapdiff/tap_catalogue.hpp"

namespace tapdiff {
namespace {

TapDims tiny_dims() {
  TapDims d;
  d.n_layer = 2;
  d.n_embd = 8;
  d.n_head = 4;
  d.n_head_kv = 2;
  d.head_dim = 2;
  d.n_ff = 12;
  d.n_vocab = 32;
  d.n_ctx = 6;
  return d;
}

std::vector<EmittedTap> everything(const TapDims& dims) {
  std::vector<EmittedTap> taps;
  for (const TapSpec& spec : tap_catalogue()) {
    if (spec.scope == TapScope::global) {
      taps.push_back({std::string(spec.name), -1, catalogue_row_shape(spec, dims)});
    } else {
      for (int l = 0; l < dims.n_layer; ++l) {
        taps.push_back({std::string(spec.name), l, catalogue_row_shape(spec, dims)});
      }
    }
  }
  return taps;
}

TEST(TapCatalogue, HasTheDesignedTaps) {
  const std::vector<std::string> layer_taps = {
      "attn_norm",  "attn_q",      "attn_k",         "attn_v",     "attn_q_norm", "attn_k_norm",
      "attn_q.rope", "attn_k.rope", "kv.k",          "kv.v",       "attn.probs",  "attn.probs.summary",
      "attn.out",   "attn_output", "attn_post_norm", "resid.attn", "ffn_norm",   "ffn_gate",
      "ffn_up",     "ffn.act",     "ffn_gate_inp", "ffn.routing", "ffn_gate_exps", "ffn_up_exps",
      "ffn.act_exps", "ffn_down",  "ffn_post_norm", "resid.ffn"};
  const std::vector<std::string> global_taps = {"token_embd", "output_norm", "output"};
  std::vector<std::string> layer;
  std::vector<std::string> global;
  for (const TapSpec& spec : tap_catalogue()) {
    (spec.scope == TapScope::layer ? layer : global).emplace_back(spec.name);
  }
  EXPECT_EQ(layer, layer_taps);
  EXPECT_EQ(global, global_taps);
  // qwen3's per-head q/k norms and gemma2's post-norms are not every model's: check_catalogue()
  // does not require them. A mixture of experts has the router's and experts' taps for the dense
  // FFN's gate, up and activation (ffn_down is both's output).
  const std::set<std::string_view> dense = {"ffn_gate", "ffn_up", "ffn.act"};
  const std::set<std::string_view> experts = {"ffn_gate_inp", "ffn.routing", "ffn_gate_exps", "ffn_up_exps",
                                              "ffn.act_exps"};
  for (const TapSpec& spec : tap_catalogue()) {
    const bool qk = spec.name == "attn_q_norm" || spec.name == "attn_k_norm";
    const bool post = spec.name == "attn_post_norm" || spec.name == "ffn_post_norm";
    const TapFeature expected = qk ? TapFeature::qk_norm
                                : post ? TapFeature::post_norms
                                : dense.count(spec.name) ? TapFeature::dense_ffn
                                : experts.count(spec.name) ? TapFeature::experts
                                                           : TapFeature::always;
    EXPECT_EQ(spec.feature, expected) << spec.name;
  }
}

TEST(TapCatalogue, RowShapesFollowTheModelSymbols) {
  const TapDims d = tiny_dims();
  struct Case {
    const char* name;
    std::vector<std::int64_t> shape;
    const char* symbols;
  };
  const Case cases[] = {
      {"token_embd", {8}, "[n_embd]"},
      {"attn_q", {8}, "[n_head * head_dim]"},
      {"attn_k", {4}, "[n_head_kv * head_dim]"},
      {"kv.v", {4}, "[n_head_kv * head_dim]"},
      {"attn.probs", {4, 6}, "[n_head, n_ctx]"},
      {"ffn.act", {12}, "[n_ff]"},
      {"output", {32}, "[n_vocab]"},
  };
  for (const Case& c : cases) {
    const TapSpec* spec = find_tap_spec(c.name);
    ASSERT_NE(spec, nullptr) << c.name;
    EXPECT_EQ(catalogue_row_shape(*spec, d), c.shape) << c.name;
    EXPECT_EQ(catalogue_row_shape_symbols(*spec), c.symbols) << c.name;
  }
  EXPECT_EQ(find_tap_spec("attn_qq"), nullptr);
}

TEST(TapCatalogue, ExecutionOrderRunsThroughTheModel) {
  const std::vector<std::pair<std::string, int>> in_order = {
      {"token_embd", -1}, {"attn_norm", 0},    {"attn_q", 0},   {"attn.probs", 0},
      {"resid.ffn", 0},   {"attn_norm", 1},    {"ffn_down", 1}, {"resid.ffn", 1},
      {"attn_norm", 40},  {"output_norm", -1}, {"output", -1}};
  for (std::size_t i = 0; i + 1 < in_order.size(); ++i) {
    const auto a = execution_order(in_order[i].first, in_order[i].second);
    const auto b = execution_order(in_order[i + 1].first, in_order[i + 1].second);
    ASSERT_TRUE(a && b);
    EXPECT_LT(*a, *b) << in_order[i].first << " before " << in_order[i + 1].first;
  }
  EXPECT_FALSE(execution_order("attn_q", -1));  // a layer tap needs a layer
  EXPECT_FALSE(execution_order("output", 0));   // a global tap has none
  EXPECT_FALSE(execution_order("my_tap", 0));
}

TEST(CheckCatalogue, AFullProducerPasses) {
  const TapDims d = tiny_dims();
  const CatalogueReport report = check_catalogue(everything(d), d);
  EXPECT_TRUE(report.ok()) << report.describe();
}

TEST(CheckCatalogue, ReportsMissingExtraAndWrongShapes) {
  const TapDims d = tiny_dims();
  std::vector<EmittedTap> taps = everything(d);
  taps.erase(std::remove_if(taps.begin(), taps.end(),
                            [](const EmittedTap& t) { return t.name == "kv.v" && t.layer == 1; }),
             taps.end());
  taps.push_back({"my_debug_tap", 0, {8}});
  taps.push_back({"attn_q", 2, {8}});   // layer past n_layer
  taps.push_back({"output", 0, {32}});  // a global tap with a layer
  for (EmittedTap& t : taps) {
    if (t.name == "attn.probs" && t.layer == 0) t.row_shape = {4, 5};
  }
  const CatalogueReport report = check_catalogue(taps, d);
  EXPECT_EQ(report.missing, std::vector<std::string>{"blk.1.kv.v"});
  EXPECT_EQ(report.extra,
            (std::vector<std::string>{"blk.0.my_debug_tap", "blk.2.attn_q", "blk.0.output"}));
  ASSERT_EQ(report.wrong_shape.size(), 1u);
  EXPECT_NE(report.wrong_shape[0].find("blk.0.attn.probs: row shape [4, 5], expected [4, 6]"),
            std::string::npos)
      << report.wrong_shape[0];
  EXPECT_FALSE(report.ok());
  EXPECT_NE(report.describe().find("missing: blk.1.kv.v"), std::string::npos);
}

TEST(CheckCatalogue, FilteredTapsAreNotExpected) {
  const TapDims d = tiny_dims();
  std::vector<EmittedTap> only_attn_q;
  for (int l = 0; l < d.n_layer; ++l) {
    only_attn_q.push_back({"attn_q", l, {8}});
    only_attn_q.push_back({"attn_q.rope", l, {8}});
  }
  const CatalogueReport ok = check_catalogue(only_attn_q, d, TapFilter::parse("blk.*.attn_q*"));
  EXPECT_TRUE(ok.ok()) << ok.describe();
  const CatalogueReport layer0 =
      check_catalogue(only_attn_q, d, TapFilter::parse("blk.*.attn_q*", "0"));
  EXPECT_TRUE(layer0.missing.empty());
}

// A mixture of experts emits the router's and the experts' taps where a dense model emits its
// FFN's, each shaped by the expert counts.
TEST(CheckCatalogue, AMixtureOfExpertsEmitsTheExpertsTaps) {
  TapDims d = tiny_dims();
  d.n_expert = 8;
  d.n_expert_used = 2;
  std::vector<EmittedTap> taps;
  for (EmittedTap& t : everything(d)) {
    const TapSpec& spec = *find_tap_spec(t.name);
    if (emitted_by(spec, TapModelFeatures{false, false, true})) taps.push_back(t);
  }
  EXPECT_TRUE(check_catalogue(taps, d).ok()) << check_catalogue(taps, d).describe();
  for (EmittedTap& t : taps)
    if (t.name == "ffn_gate_exps" && t.layer == 0) t.row_shape = {12};
  const CatalogueReport report = check_catalogue(taps, d);
  ASSERT_EQ(report.wrong_shape.size(), 1u);
  EXPECT_NE(report.wrong_shape[0].find("expected [2, 12] = [n_expert_used, n_ff]"), std::string::npos)
      << report.wrong_shape[0];
  // The dense FFN's taps are what a model without experts must emit.
  d.n_expert = 0;
  const CatalogueReport dense = check_catalogue(taps, d);
  EXPECT_EQ(std::count_if(dense.missing.begin(), dense.missing.end(),
                          [](const std::string& name) { return name.find("ffn_gate") != std::string::npos; }),
            2);
}

TEST(CheckCatalogue, ShapesAreCheckedOnlyWithCompleteDims) {
  TapDims d = tiny_dims();
  std::vector<EmittedTap> taps = everything(d);
  for (EmittedTap& t : taps) t.row_shape = {1};
  d.n_vocab = 0;
  EXPECT_TRUE(check_catalogue(taps, d).wrong_shape.empty());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// docs/taps.md is the authority for humans; this table is the authority for code. They must
// say the same: regenerate with `tapdiff_tap_docs --update docs/taps.md`.
TEST(TapCatalogue, DocsCarryTheGeneratedTable) {
  const std::string doc = read_file(std::string(TAPDIFF_SOURCE_DIR) + "/docs/taps.md");
  ASSERT_FALSE(doc.empty()) << "docs/taps.md is missing";
  const std::size_t begin = doc.find(kCatalogueBeginMarker);
  const std::size_t end = doc.find(kCatalogueEndMarker);
  ASSERT_NE(begin, std::string::npos) << "docs/taps.md lacks the BEGIN marker";
  ASSERT_NE(end, std::string::npos) << "docs/taps.md lacks the END marker";
  const std::size_t end_line = doc.find('\n', end);
  const std::string block = doc.substr(begin, end_line + 1 - begin);
  EXPECT_EQ(block, catalogue_markdown())
      << "docs/taps.md is out of date: run tapdiff_tap_docs --update docs/taps.md";
}

}  // namespace
}  // namespace tapdiff
