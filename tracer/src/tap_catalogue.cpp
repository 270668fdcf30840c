#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/attn_summary.hpp"
#include "tapdiff/weight_taps.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "tapdiff/row_shape.hpp"

namespace tapdiff {
namespace {

using S = DimSymbol;
constexpr DimExpr one(S s) { return {s, std::nullopt}; }
constexpr DimExpr product(S a, S b) { return {a, b}; }
constexpr DimExpr kNone{S::n_embd, std::nullopt};

constexpr auto kEvery = PrefillRows::every_position;
constexpr auto kLast = PrefillRows::last_position;
constexpr auto kLayer = TapScope::layer;
constexpr auto kGlobal = TapScope::global;
constexpr auto kAlways = TapFeature::always;
constexpr auto kQkNorm = TapFeature::qk_norm;
constexpr auto kPostNorms = TapFeature::post_norms;
constexpr auto kDense = TapFeature::dense_ffn;
constexpr auto kExperts = TapFeature::experts;

// Row shapes are per position. q/k/v are flat (heads * head_dim, head-major). attn.probs is
// [n_head, n_ctx] over the trace's declared positions: entry j is the weight on position j,
// 0 beyond the visible context [0, p], so a missing causal mask shows up as nonzero future
// weights and a stuck KV length as weight missing from the past.
// clang-format off
const std::vector<TapSpec> kCatalogue = {
    {"token_embd", kGlobal, 0, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "embedding row of the input token (times sqrt(n_embd) for gemma2: what enters the stream)"},
    {"attn_norm", kLayer, 0, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "RMSNorm of the residual stream, weight applied"},
    {"attn_q", kLayer, 1, {product(S::n_head, S::head_dim), kNone}, 1, kEvery, kAlways,
     "Q projection + bias, before RoPE"},
    {"attn_k", kLayer, 2, {product(S::n_head_kv, S::head_dim), kNone}, 1, kEvery, kAlways,
     "K projection + bias, before RoPE"},
    {"attn_v", kLayer, 3, {product(S::n_head_kv, S::head_dim), kNone}, 1, kEvery, kAlways,
     "V projection + bias"},
    {"attn_q_norm", kLayer, 4, {product(S::n_head, S::head_dim), kNone}, 1, kEvery, kQkNorm,
     "Q after RMSNorm per head (weight attn_q_norm), before RoPE: qwen3"},
    {"attn_k_norm", kLayer, 5, {product(S::n_head_kv, S::head_dim), kNone}, 1, kEvery, kQkNorm,
     "K after RMSNorm per head (weight attn_k_norm), before RoPE: qwen3"},
    {"attn_q.rope", kLayer, 6, {product(S::n_head, S::head_dim), kNone}, 1, kEvery, kAlways,
     "Q after RoPE at this position"},
    {"attn_k.rope", kLayer, 7, {product(S::n_head_kv, S::head_dim), kNone}, 1, kEvery, kAlways,
     "K after RoPE at this position"},
    {"kv.k", kLayer, 8, {product(S::n_head_kv, S::head_dim), kNone}, 1, kEvery, kAlways,
     "K cache row of this position, read back from cache memory after the write (at the slot it was written to)"},
    {"kv.v", kLayer, 9, {product(S::n_head_kv, S::head_dim), kNone}, 1, kEvery, kAlways,
     "V cache row of this position, read back from cache memory after the write (at the slot it was written to)"},
    {"attn.probs", kLayer, 10, {one(S::n_head), one(S::n_ctx)}, 2, kEvery, kAlways,
     "softmax weights per head over positions 0..n_ctx-1; 0 outside the visible context (causal, and the window of a sliding layer)"},
    {"attn.probs.summary", kLayer, 11, {one(S::n_head), one(S::summary_fields)}, 2, kEvery, kAlways,
     "per head: 1 - sum, max, mean key / p and sum after p of the attn.probs row (derived by the trace writer)"},
    {"attn.out", kLayer, 12, {product(S::n_head, S::head_dim), kNone}, 1, kEvery, kAlways,
     "attention output per head, before the output projection"},
    {"attn_output", kLayer, 13, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "output projection of attn.out"},
    {"attn_post_norm", kLayer, 14, {one(S::n_embd), kNone}, 1, kEvery, kPostNorms,
     "RMSNorm of attn_output (weight post_attention_norm), added to the stream: gemma2"},
    {"resid.attn", kLayer, 15, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "residual stream after adding attn_output (gemma2: attn_post_norm)"},
    {"ffn_norm", kLayer, 16, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "RMSNorm of resid.attn, weight applied"},
    {"ffn_gate", kLayer, 17, {one(S::n_ff), kNone}, 1, kEvery, kDense, "gate projection"},
    {"ffn_up", kLayer, 18, {one(S::n_ff), kNone}, 1, kEvery, kDense, "up projection"},
    {"ffn.act", kLayer, 19, {one(S::n_ff), kNone}, 1, kEvery, kDense,
     "silu(ffn_gate) * ffn_up (gemma2: gelu_tanh(ffn_gate) * ffn_up)"},
    {"ffn_gate_inp", kLayer, 20, {one(S::n_expert), kNone}, 1, kEvery, kExperts,
     "router logits of ffn_norm, one per expert: qwen3moe"},
    {"ffn.routing", kLayer, 21, {one(S::n_expert), kNone}, 1, kEvery, kExperts,
     "each expert's weight: softmax of ffn_gate_inp, the n_expert_used largest renormalized to sum 1, 0 for the others"},
    {"ffn_gate_exps", kLayer, 22, {one(S::n_expert_used), one(S::n_ff)}, 2, kEvery, kExperts,
     "gate projection of each used expert, in ascending expert order"},
    {"ffn_up_exps", kLayer, 23, {one(S::n_expert_used), one(S::n_ff)}, 2, kEvery, kExperts,
     "up projection of each used expert, in ascending expert order"},
    {"ffn.act_exps", kLayer, 24, {one(S::n_expert_used), one(S::n_ff)}, 2, kEvery, kExperts,
     "silu(ffn_gate_exps) * ffn_up_exps"},
    {"ffn_down", kLayer, 25, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "down projection of ffn.act (a mixture of experts: the used experts' down projections of ffn.act_exps, weighted by ffn.routing and summed)"},
    {"ffn_post_norm", kLayer, 26, {one(S::n_embd), kNone}, 1, kEvery, kPostNorms,
     "RMSNorm of ffn_down (weight post_ffw_norm), added to the stream: gemma2"},
    {"resid.ffn", kLayer, 27, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "residual stream after adding ffn_down (gemma2: ffn_post_norm): the layer's output"},
    {"output_norm", kGlobal, 1, {one(S::n_embd), kNone}, 1, kEvery, kAlways,
     "final RMSNorm, weight applied"},
    {"output", kGlobal, 2, {one(S::n_vocab), kNone}, 1, kLast, kAlways, "logits (gemma2: soft-capped)"},
};
// clang-format on

constexpr int kLayerTaps = 28;
// token_embd, then n_layer blocks of kLayerTaps, then the tail taps.
constexpr std::int64_t kTailBase = std::numeric_limits<std::int64_t>::max() / 2;

}  // namespace

std::string_view dim_symbol_name(DimSymbol symbol) {
  switch (symbol) {
    case S::n_embd:
      return "n_embd";
    case S::n_head:
      return "n_head";
    case S::n_head_kv:
      return "n_head_kv";
    case S::head_dim:
      return "head_dim";
    case S::n_ff:
      return "n_ff";
    case S::n_vocab:
      return "n_vocab";
    case S::n_ctx:
      return "n_ctx";
    case S::n_expert:
      return "n_expert";
    case S::n_expert_used:
      return "n_expert_used";
    case S::summary_fields:
      return "4";
  }
  return "?";
}

std::int64_t dim_value(DimSymbol s, const TapDims& d) {
  switch (s) {
    case S::n_embd:
      return d.n_embd;
    case S::n_head:
      return d.n_head;
    case S::n_head_kv:
      return d.n_head_kv;
    case S::head_dim:
      return d.head_dim;
    case S::n_ff:
      return d.n_ff;
    case S::n_vocab:
      return d.n_vocab;
    case S::n_ctx:
      return d.n_ctx;
    case S::n_expert:
      return d.n_expert;
    case S::n_expert_used:
      return d.n_expert_used;
    case S::summary_fields:
      return kAttnSummaryFields;
  }
  return 0;
}

std::optional<DimSymbol> parse_dim_symbol(std::string_view name) {
  for (DimSymbol s : {S::n_embd, S::n_head, S::n_head_kv, S::head_dim, S::n_ff, S::n_vocab, S::n_ctx, S::n_expert,
                      S::n_expert_used})
    if (dim_symbol_name(s) == name) return s;
  return std::nullopt;
}

const std::vector<TapSpec>& tap_catalogue() { return kCatalogue; }

const TapSpec* find_tap_spec(std::string_view name) {
  for (const TapSpec& spec : kCatalogue) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

bool emitted_by(const TapSpec& spec, const TapModelFeatures& model) {
  switch (spec.feature) {
    case TapFeature::always:
      return true;
    case TapFeature::qk_norm:
      return model.qk_norm;
    case TapFeature::post_norms:
      return model.post_norms;
    case TapFeature::dense_ffn:
      return !model.experts;
    case TapFeature::experts:
      return model.experts;
  }
  return false;
}

std::vector<std::int64_t> catalogue_row_shape(const TapSpec& spec, const TapDims& dims) {
  std::vector<std::int64_t> shape;
  for (int i = 0; i < spec.row_rank; ++i) {
    const DimExpr& e = spec.row[static_cast<std::size_t>(i)];
    std::int64_t v = dim_value(e.first, dims);
    if (e.second) v *= dim_value(*e.second, dims);
    shape.push_back(v);
  }
  return shape;
}

std::string catalogue_row_shape_symbols(const TapSpec& spec) {
  std::string text = "[";
  for (int i = 0; i < spec.row_rank; ++i) {
    const DimExpr& e = spec.row[static_cast<std::size_t>(i)];
    if (i > 0) text += ", ";
    text += dim_symbol_name(e.first);
    if (e.second) text += std::string(" * ") + std::string(dim_symbol_name(*e.second));
  }
  return text + "]";
}

std::optional<std::int64_t> execution_order(std::string_view name, int layer) {
  const TapSpec* spec = find_tap_spec(name);
  if (spec == nullptr) return std::nullopt;
  if (spec->scope == TapScope::layer) {
    if (layer < 0) return std::nullopt;
    return 1 + static_cast<std::int64_t>(layer) * kLayerTaps + spec->order;
  }
  if (layer != -1) return std::nullopt;
  return spec->order == 0 ? 0 : kTailBase + spec->order;
}

std::string CatalogueReport::describe() const {
  std::string text;
  for (const std::string& m : missing) text += "missing: " + m + "\n";
  for (const std::string& e : extra) text += "not in the catalogue: " + e + "\n";
  for (const std::string& w : wrong_shape) text += "wrong shape: " + w + "\n";
  return text;
}

CatalogueReport check_catalogue(const std::vector<EmittedTap>& emitted, const TapDims& dims,
                                const TapFilter& filter) {
  CatalogueReport report;
  std::set<std::pair<std::string, int>> seen;
  for (const EmittedTap& tap : emitted) {
    if (!seen.emplace(tap.name, tap.layer).second) continue;
    if (is_weight_tap(tap.name)) continue;  // optional weight taps (tapdiff/weight_taps.hpp)
    const std::string full = full_tap_name(tap.name, tap.layer);
    const TapSpec* spec = find_tap_spec(tap.name);
    const bool fits = spec != nullptr && (spec->scope == TapScope::global
                                              ? tap.layer == -1
                                              : tap.layer >= 0 && tap.layer < dims.n_layer);
    if (!fits) {
      report.extra.push_back(full);
      continue;
    }
    const bool expert_dims = spec->feature != TapFeature::experts || (dims.n_expert > 0 && dims.n_expert_used > 0);
    if (dims.complete() && expert_dims) {
      const std::vector<std::int64_t> expected = catalogue_row_shape(*spec, dims);
      if (tap.row_shape != expected) {
        report.wrong_shape.push_back(full + ": row shape " + shape_string(tap.row_shape) +
                                     ", expected " + shape_string(expected) + " = " +
                                     catalogue_row_shape_symbols(*spec));
      }
    }
  }
  for (const TapSpec& spec : kCatalogue) {
    const int first = spec.scope == TapScope::global ? -1 : 0;
    const int last = spec.scope == TapScope::global ? -1 : static_cast<int>(dims.n_layer) - 1;
    for (int layer = first; layer <= last; ++layer) {
      if (!filter.tap_enabled(spec.name, layer)) continue;
      const bool required = spec.feature != TapFeature::qk_norm && spec.feature != TapFeature::post_norms &&
                            emitted_by(spec, TapModelFeatures{false, false, dims.n_expert > 0});
      if (required && seen.count({std::string(spec.name), layer}) == 0) {
        report.missing.push_back(full_tap_name(spec.name, layer));
      }
    }
  }
  return report;
}

}  // namespace tapdiff
