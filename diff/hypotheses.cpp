#include "diff/hypotheses.hpp"

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <optional>

#include "model/half.hpp"
#include "diff/weight_variants.hpp"
#include "reference/ops.hpp"

namespace tapdiff::diff {
namespace {

using Row = std::vector<float>;
using Rows = std::vector<Row>;  // by position 0..p; empty rows where the trace has none

// One row of the actual trace, or empty.
Row actual_row(const TraceReader& r, const std::string& name, int layer, std::int64_t p) {
  const TapInfo* t = r.find(name, layer);
  if (!t) return {};
  const TapRows rows = r.read(*t, p, p);
  if (rows.size() != 1) return {};
  return Row(rows.row(0), rows.row(0) + rows.row_size);
}

// Rows 0..p of a tap in the actual trace (empty rows for positions it lacks).
Rows actual_rows_upto(const TraceReader& r, const std::string& name, int layer, std::int64_t p) {
  Rows out(static_cast<std::size_t>(p + 1));
  const TapInfo* t = r.find(name, layer);
  if (!t) return out;
  const TapRows rows = r.read(*t, 0, p);
  for (std::size_t i = 0; i < rows.size(); ++i)
    out[std::size_t(rows.positions[i])] = Row(rows.row(i), rows.row(i) + rows.row_size);
  return out;
}

std::string input_of(const std::string& name) {
  if (name == "attn_q" || name == "attn_k" || name == "attn_v") return "attn_norm";
  if (name == "attn_output") return "attn.out";
  if (name == "ffn_gate" || name == "ffn_up") return "ffn_norm";
  if (name == "ffn_down") return "ffn.act";
  return "output_norm";  // output
}

std::string weight_of(const std::string& name, int layer, const ModelConfig& c) {
  if (name == "output") return c.tied_output ? "token_embd.weight" : "output.weight";
  return fmt::format("blk.{}.{}.weight", layer, name);
}

Row matvec_row(const std::vector<float>& W, const Row& x, std::size_t n_out, bool transposed,
               const std::vector<float>* bias) {
  if (x.empty() || W.size() != x.size() * n_out) return {};
  std::vector<double> xd(x.begin(), x.end()), y(n_out);
  ref::matvec(W.data(), xd.data(), int(x.size()), int(n_out), y.data(), transposed);
  Row out(n_out);
  for (std::size_t i = 0; i < n_out; ++i) out[i] = float(y[i] + (bias && !bias->empty() ? (*bias)[i] : 0.0f));
  return out;
}

void projection_candidates(const std::string& name, int layer, ReplayInputs& in,
                           std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const std::string wname = weight_of(name, layer, c);
  const std::string x_name = input_of(name);
  const int x_layer = name == "output" ? -1 : layer;
  const bool has_bias = c.qkv_bias && (name == "attn_q" || name == "attn_k" || name == "attn_v");
  const std::string bname = fmt::format("blk.{}.{}.bias", layer, name);
  const std::vector<float>* W = &in.model.weight(wname);
  const std::vector<float>* B = has_bias ? &in.model.weight(bname) : nullptr;
  const GgufTensorInfo* wt = in.model.tensor(wname);
  if (!wt || W->empty()) return;
  const auto n_out = static_cast<std::size_t>(wt->ne.size() > 1 ? wt->ne[1] : 1);
  auto x = [&, x_name, x_layer](std::int64_t p) { return actual_row(in.actual, x_name, x_layer, p); };

  out.push_back({"W x" + std::string(has_bias ? " + b" : ""), "", true,
                 [=](std::int64_t p) { return matvec_row(*W, x(p), n_out, false, B); }});
  out.push_back({"W^T x: the weight read transposed (op flag / leading dimension)", "matmul-layout", false,
                 [=](std::int64_t p) { return matvec_row(*W, x(p), n_out, true, B); }});
  if (has_bias) {
    out.push_back({"W x without the bias", "bias", false,
                   [=](std::int64_t p) { return matvec_row(*W, x(p), n_out, false, nullptr); }});
    auto misread = std::make_shared<std::vector<float>>(*B);
    for (float& v : *misread) v = fp16_to_fp32(fp32_to_bf16(v));
    out.push_back({"W x + b with the bias bytes decoded as the wrong 16-bit type (bf16 read as f16)",
                   "bias", false, [=](std::int64_t p) { return matvec_row(*W, x(p), n_out, false, misread.get()); }});
  }
  if (wt->type == GgmlType::Q8_0) {
    auto wrong = std::make_shared<std::vector<float>>(q8_0_scale_as_bf16(*wt));
    out.push_back({"W dequantized with the Q8_0 block scale read as bf16 instead of f16", "dequantization",
                   false, [=](std::int64_t p) { return matvec_row(*wrong, x(p), n_out, false, B); }});
  }
}

void embedding_candidates(ReplayInputs& in, std::vector<Candidate>& out) {
  const GgufTensorInfo* wt = in.model.tensor("token_embd.weight");
  if (!wt) return;
  const auto E = static_cast<std::size_t>(wt->ne[0]);
  const auto& tokens = in.actual.metadata().tokens;
  auto row_of = [tokens, E](const std::vector<float>& W, std::int64_t p) {
    if (p >= std::int64_t(tokens.size())) return Row{};
    const auto t = static_cast<std::size_t>(tokens[std::size_t(p)]);
    if ((t + 1) * E > W.size()) return Row{};
    return Row(W.begin() + std::ptrdiff_t(t * E), W.begin() + std::ptrdiff_t((t + 1) * E));
  };
  const std::vector<float>* W = &in.model.weight("token_embd.weight");
  out.push_back({"the token's embedding row", "", true, [=](std::int64_t p) { return row_of(*W, p); }});
  if (wt->type == GgmlType::Q8_0) {
    auto wrong = std::make_shared<std::vector<float>>(q8_0_scale_as_bf16(*wt));
    out.push_back({"embedding row dequantized with the Q8_0 block scale read as bf16", "dequantization",
                   false, [=](std::int64_t p) { return row_of(*wrong, p); }});
  }
}

void norm_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  std::string x_name = "resid.attn", w_name = fmt::format("blk.{}.ffn_norm.weight", layer);
  int x_layer = layer;
  if (name == "attn_norm") {
    x_name = layer == 0 ? "token_embd" : "resid.ffn";
    x_layer = layer == 0 ? -1 : layer - 1;
    w_name = fmt::format("blk.{}.attn_norm.weight", layer);
  } else if (name == "output_norm") {
    x_name = "resid.ffn";
    x_layer = c.n_layer - 1;
    w_name = "output_norm.weight";
  }
  const std::vector<float>* w = &in.model.weight(w_name);
  const float eps = c.rms_eps;
  auto run = [&in, x_name, x_layer, eps](const float* weight, float e) {
    return [&in, x_name, x_layer, weight, e](std::int64_t p) {
      const Row x = actual_row(in.actual, x_name, x_layer, p);
      if (x.empty()) return Row{};
      std::vector<double> xd(x.begin(), x.end()), y(x.size());
      ref::rmsnorm(xd.data(), weight, int(x.size()), e, y.data());
      return Row(y.begin(), y.end());
    };
  };
  out.push_back({"rmsnorm(x) * w", "", true, run(w->data(), eps)});
  out.push_back({"rmsnorm(x) without the norm weight", "normalization", false, run(nullptr, eps)});
  (void)eps;
}

void rope_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const bool is_q = name == "attn_q.rope";
  const std::string src = is_q ? "attn_q" : "attn_k";
  const int heads = is_q ? c.n_head : c.n_head_kv;
  const ref::Pairing right = c.rope_pairing == RopePairing::norm ? ref::Pairing::norm : ref::Pairing::neox;
  const ref::Pairing wrong = right == ref::Pairing::norm ? ref::Pairing::neox : ref::Pairing::norm;
  auto rotate = [&in, src, layer, heads, c](std::function<std::int64_t(std::int64_t)> pos, float base,
                                             ref::Pairing pairing, bool apply = true) {
    return [&in, src, layer, heads, c, pos, base, pairing, apply](std::int64_t p) {
      const Row x = actual_row(in.actual, src, layer, p);
      if (x.empty() || !apply) return x;
      std::vector<double> xd(x.begin(), x.end());
      ref::rope(xd.data(), heads, c.head_dim, c.n_rot, pos(p), base, pairing);
      return Row(xd.begin(), xd.end());
    };
  };
  const auto at_p = [](std::int64_t p) { return p; };
  const float base = c.rope_freq_base;
  out.push_back({"rotated at position p", "", true, rotate(at_p, base, right)});
  out.push_back({fmt::format("pairs taken the other way ({} instead of {})",
                             wrong == ref::Pairing::norm ? "adjacent NORM" : "half-split NEOX",
                             right == ref::Pairing::norm ? "adjacent NORM" : "half-split NEOX"),
                 "rope", false, rotate(at_p, base, wrong)});
  out.push_back({"rotated at the start position 0 instead of p (positions not passed per token)", "rope",
                 false, rotate([](std::int64_t) { return std::int64_t(0); }, base, right)});
  out.push_back({"rotated at p - 1 (off by one)", "rope", false,
                 rotate([](std::int64_t p) { return p - 1; }, base, right)});
  out.push_back({"rotated at p + 1 (off by one)", "rope", false,
                 rotate([](std::int64_t p) { return p + 1; }, base, right)});
  out.push_back({"not rotated at all", "rope", false, rotate(at_p, base, right, false)});
  for (float other : {10000.0f, 500000.0f, 1000000.0f, 100000.0f})
    if (other != base)
      out.push_back({fmt::format("frequency base {:g} instead of the model's {:g}", other, base), "rope",
                     false, rotate(at_p, other, right)});
}

// How a buggy engine may have filled and sliced its KV cache, replayed from the actual
// trace's own per-position K/V rows (rows the engine computed before writing the cache).
enum class Cursor { row, element, stuck };     // where position q's row was written
enum class Visible { causal, one, capacity, prompt };  // which cache slots attention read

struct CacheReplay {
  Cursor cursor = Cursor::row;
  Visible visible = Visible::causal;
  bool own_row_written = true;
};

// The cache memory ([n_ctx][kv_dim]) as the engine left it after position p's write, given
// the prompt was written in one batch and each later position one at a time.
std::vector<double> simulate_cache(const Rows& rows, std::int64_t prompt, std::int64_t n_ctx,
                                   std::size_t kv_dim, const CacheReplay& how, std::int64_t p) {
  std::vector<double> cache(static_cast<std::size_t>(n_ctx) * kv_dim, 0.0);
  std::int64_t length = 0;
  auto write = [&](std::int64_t first, std::int64_t n) {
    const std::int64_t at = how.cursor == Cursor::element ? length
                            : how.cursor == Cursor::stuck ? 0
                                                          : length * std::int64_t(kv_dim);
    for (std::int64_t r = 0; r < n; ++r) {
      const Row& row = rows[std::size_t(first + r)];
      for (std::size_t i = 0; i < kv_dim && i < row.size(); ++i) {
        const auto dst = std::size_t(at) + std::size_t(r) * kv_dim + i;
        if (dst < cache.size()) cache[dst] = row[i];
      }
    }
    if (how.cursor != Cursor::stuck) length += n;
  };
  const std::int64_t batch = std::min(prompt, p + 1);
  write(0, batch);
  for (std::int64_t q = batch; q <= p; ++q)
    if (q < p || how.own_row_written) write(q, 1);
    else if (how.cursor != Cursor::stuck) ++length;
  return cache;
}

std::int64_t visible_keys(const CacheReplay& how, std::int64_t prompt, std::int64_t n_ctx, std::int64_t p) {
  switch (how.visible) {
    case Visible::causal: return p + 1;
    case Visible::one: return 1;
    case Visible::capacity: return n_ctx;
    case Visible::prompt: return std::max(prompt, p + 1);
  }
  return p + 1;
}

void attention_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const bool probs = name == "attn.probs";
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  const float right_scale = 1.0f / std::sqrt(float(c.head_dim));
  struct Setup {
    CacheReplay cache;
    float scale;
    ref::GqaMap map;
  };
  auto replay = [&in, layer, probs, kv_dim, c](Setup s) {
    return [&in, layer, probs, kv_dim, c, s](std::int64_t p) {
      const Row q = actual_row(in.actual, "attn_q.rope", layer, p);
      const Rows ks = actual_rows_upto(in.actual, "attn_k.rope", layer, p);
      const Rows vs = actual_rows_upto(in.actual, "attn_v", layer, p);
      if (q.empty()) return Row{};
      // In prefill every prompt row exists before attention runs: the mask-off variant sees them.
      const std::int64_t upto = s.cache.visible == Visible::prompt ? std::max(in.prompt_length - 1, p) : p;
      const Rows k_all = upto > p ? actual_rows_upto(in.actual, "attn_k.rope", layer, upto) : ks;
      const Rows v_all = upto > p ? actual_rows_upto(in.actual, "attn_v", layer, upto) : vs;
      for (std::int64_t t = 0; t <= upto; ++t)
        if (k_all[std::size_t(t)].empty() || v_all[std::size_t(t)].empty()) return Row{};
      const auto K = simulate_cache(k_all, in.prompt_length, in.n_ctx, kv_dim, s.cache, upto);
      const auto V = simulate_cache(v_all, in.prompt_length, in.n_ctx, kv_dim, s.cache, upto);
      const std::int64_t n_keys = std::min(visible_keys(s.cache, in.prompt_length, in.n_ctx, p), in.n_ctx);
      std::vector<double> qd(q.begin(), q.end()), o(q.size()), pr(std::size_t(c.n_head) * std::size_t(in.n_ctx), 0.0);
      ref::attention(qd.data(), K.data(), V.data(), 0, n_keys, ref::AttentionShape{c.n_head, c.n_head_kv, c.head_dim},
                     s.scale, s.map, o.data(), pr.data(), in.n_ctx);
      return probs ? Row(pr.begin(), pr.end()) : Row(o.begin(), o.end());
    };
  };
  const Setup right{{}, right_scale, ref::GqaMap::grouped};
  out.push_back({"softmax(q·K[0..p] / sqrt(d)) over the causal keys", "", true, replay(right)});
  Setup s = right;
  s.cache.visible = Visible::one;
  s.cache.cursor = Cursor::stuck;
  out.push_back({"one visible key, slot 0 overwritten by each decode step: the cache length never advances",
                 "kv-cache", false, replay(s)});
  s = right;
  s.cache.cursor = Cursor::element;
  out.push_back({"cache rows written at element offset = length instead of length * kv_dim",
                 "kv-cache", false, replay(s)});
  s = right;
  s.cache.visible = Visible::capacity;
  out.push_back({"keys over the whole cache capacity, unwritten slots included (not sliced to the valid length)",
                 "kv-cache", false, replay(s)});
  s = right;
  s.cache.own_row_written = false;
  out.push_back({"the current position's K/V never appended to the cache", "kv-cache", false, replay(s)});
  s = right;
  s.cache.visible = Visible::prompt;
  out.push_back({"every prompt position visible: no causal mask in the batched prefill", "attention-mask",
                 false, replay(s)});
  s = right;
  s.scale = 1.0f / float(c.head_dim);
  out.push_back({"scores scaled by 1/d instead of 1/sqrt(d)", "attention-scale", false, replay(s)});
  s = right;
  s.scale = 1.0f;
  out.push_back({"scores not scaled", "attention-scale", false, replay(s)});
  if (c.n_head_kv > 1 && c.n_head_kv < c.n_head) {
    s = right;
    s.map = ref::GqaMap::modulo;
    out.push_back({"query head h reads kv head h % n_head_kv instead of h / (n_head / n_head_kv)",
                   "gqa-mapping", false, replay(s)});
  }
}

void cache_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const std::string src = name == "kv.k" ? "attn_k.rope" : "attn_v";
  out.push_back({"the row computed for this position", "", true,
                 [&in, src, layer](std::int64_t p) { return actual_row(in.actual, src, layer, p); }});
  out.push_back({"zeros: the row was never written", "kv-cache", false, [&in, src, layer](std::int64_t p) {
                   Row r = actual_row(in.actual, src, layer, p);
                   std::fill(r.begin(), r.end(), 0.0f);
                   return r;
                 }});
  out.push_back({"the previous position's row (the write cursor did not advance)", "kv-cache", false,
                 [&in, src, layer](std::int64_t p) { return p > 0 ? actual_row(in.actual, src, layer, p - 1) : Row{}; }});
}

}  // namespace

std::vector<Candidate> candidates_for(const std::string& name, int layer, ReplayInputs& in) {
  std::vector<Candidate> out;
  if (name == "attn_q" || name == "attn_k" || name == "attn_v" || name == "attn_output" ||
      name == "ffn_gate" || name == "ffn_up" || name == "ffn_down" || name == "output")
    projection_candidates(name, layer, in, out);
  else if (name == "token_embd")
    embedding_candidates(in, out);
  else if (name == "attn_norm" || name == "ffn_norm" || name == "output_norm")
    norm_candidates(name, layer, in, out);
  else if (name == "attn_q.rope" || name == "attn_k.rope")
    rope_candidates(name, layer, in, out);
  else if (name == "attn.probs" || name == "attn.out")
    attention_candidates(name, layer, in, out);
  else if (name == "kv.k" || name == "kv.v")
    cache_candidates(name, layer, in, out);
  return out;
}

}  // namespace tapdiff::diff
