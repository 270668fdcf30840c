#include "diff/hypotheses.hpp"

#include "diff/fitted_constants.hpp"
#include "diff/hypothesis_families.hpp"
#include "diff/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <optional>

#include "model/half.hpp"
#include "diff/replay_rows.hpp"
#include "diff/tap_graph.hpp"
#include "diff/weight_variants.hpp"
#include "reference/ops.hpp"

namespace tapdiff::diff {

// The positions whose token_embd row is not their own token's row but, to the trace's rounding,
// another token's row of the table W (times scale): position -> that token. Empty when any such
// row is no row of the table (or more than 16 are off).
std::map<std::int64_t, std::int32_t> rows_of_other_tokens(ReplayInputs& in, const std::vector<float>& W, float scale) {
  const TapInfo* tap = in.observed.find("token_embd", -1);
  const auto& tokens = in.actual.metadata().tokens;
  std::map<std::int64_t, std::int32_t> found;
  if (!tap || tap->row_size <= 0 || W.size() % std::size_t(tap->row_size) != 0) return found;
  const auto E = std::size_t(tap->row_size), V = W.size() / E;
  const auto distance = [&](const Row& r, std::size_t t) {
    double d = 0, size = 0;
    for (std::size_t i = 0; i < E; ++i) {
      const double e = double(scale) * W[t * E + i];
      d += (r[i] - e) * (r[i] - e), size += e * e;
    }
    return size > 0 ? d / size : d > 0 ? HUGE_VAL : 0.0;
  };
  for (std::int64_t p : tap->positions()) {
    const Row r = trace_row(in.observed, "token_embd", -1, p);
    if (p >= std::int64_t(tokens.size()) || r.size() != E) continue;
    const auto own = std::size_t(tokens[std::size_t(p)]);
    if (own < V && distance(r, own) < 1e-4) continue;
    if (found.size() == 16) return {};
    std::size_t best = V;
    double nearest = 1e-4;
    for (std::size_t t = 0; t < V; ++t)
      if (const double d = t != own ? distance(r, t) : HUGE_VAL; d < nearest) std::tie(nearest, best) = std::pair{d, t};
    if (best == V) return {};
    found[p] = std::int32_t(best);
  }
  return found;
}

void embedding_candidates(ReplayInputs& in, std::vector<Candidate>& out) {
  const GgufTensorInfo* wt = in.model.tensor("token_embd.weight");
  if (!wt || wt->ne.size() < 2) return;
  const auto E = static_cast<std::size_t>(wt->ne[0]);
  const auto V = static_cast<std::size_t>(wt->ne[1]);
  const auto& tokens = in.actual.metadata().tokens;
  // The row of token id tokens[p] + shift, scaled; with a column stride, element i read at
  // token + i * stride instead (the table's layout misread).
  auto lookup = [tokens, E, V](const std::vector<float>* W, std::function<std::int64_t(std::int64_t)> token_at,
                               float scale = 1.0f, std::size_t column_stride = 0) {
    return [=](std::int64_t p) {
      const std::int64_t t = token_at(p);
      if (p >= std::int64_t(tokens.size()) || t < 0 || std::size_t(t) >= V || W->size() != E * V) return Row{};
      Row r(E);
      for (std::size_t i = 0; i < E; ++i)
        r[i] = scale * (column_stride == 0                         ? (*W)[std::size_t(t) * E + i]
                        : std::size_t(t) + i * column_stride < W->size() ? (*W)[std::size_t(t) + i * column_stride]
                                                                         : 0.0f);
      return r;
    };
  };
  auto token = [tokens](std::int64_t shift, std::int64_t from) {
    return [tokens, shift, from](std::int64_t p) -> std::int64_t {
      const std::int64_t at = p + from;
      return at < 0 || at >= std::int64_t(tokens.size()) ? -1 : std::int64_t(tokens[std::size_t(at)]) + shift;
    };
  };
  const std::vector<float>* W = &in.model.weight("token_embd.weight");
  // gemma2 scales the row by sqrt(n_embd), granite by its multiplier; every variant keeps the model's
  // scale but those that name it.
  const ModelConfig& config = in.model.config();
  const float scale = config.embedding_factor();
  const std::string scale_text = config.embed_scale ? fmt::format("sqrt(n_embd) = {:.4g}", scale)
                                               : fmt::format("the embedding multiplier {:.4g}", scale);
  auto lookup_scaled = [lookup, scale](const std::vector<float>* table,
                                       std::function<std::int64_t(std::int64_t)> token_at, float by = 1.0f,
                                       std::size_t column_stride = 0) {
    return lookup(table, std::move(token_at), by * scale, column_stride);
  };
  out.push_back({scale != 1.0f ? "the token's embedding row times " + scale_text : std::string("the token's embedding row"),
                 "", true, lookup_scaled(W, token(0, 0))});
  if (in.baseline_only) return;
  if (scale != 1.0f)
    out.push_back({"the token's embedding row, not scaled by " + scale_text, "embedding", false, lookup(W, token(0, 0))});
  // The scale applied to the batch's first row only (x[0] *= s for x *= s).
  if (scale != 1.0f && in.prompt_length > 1)
    out.push_back({"the embedding scaled on the prompt batch's first row only, its other rows not scaled", "embedding",
                   false, [scaled = lookup_scaled(W, token(0, 0)), raw = lookup(W, token(0, 0)),
                           prompt = in.prompt_length](std::int64_t p) { return p > 0 && p < prompt ? raw(p) : scaled(p); }});
  // Granite's multiplier mistaken for Gemma's scale (a port from a Gemma path), or applied twice.
  if (config.embedding_multiplier > 0) {
    const float root = std::sqrt(float(E));
    out.push_back({fmt::format("the token's embedding row times sqrt(n_embd) = {:.4g} (Gemma's scale) instead of the "
                               "embedding multiplier {:.4g}",
                               root, scale),
                   "embedding", false, lookup(W, token(0, 0), root)});
    out.push_back({fmt::format("the token's embedding row times the embedding multiplier twice ({:.4g})", scale * scale),
                   "embedding", false, lookup_scaled(W, token(0, 0), scale)});
  }
  out.push_back({"the row of token id + 1 (index off by one)", "embedding", false, lookup_scaled(W, token(1, 0))});
  out.push_back({"the row of token id - 1 (index off by one)", "embedding", false, lookup_scaled(W, token(-1, 0))});
  // Position 0 keeps the first token: a first token fed twice (a BOS added to a prompt that has one)
  // shifts every later token one place.
  out.push_back({"the tokens fed one place late: position p gets token p-1's row, position 0 the first token's "
                 "(the first token fed twice, as a BOS added to a prompt that already starts with one does; or a "
                 "decode step fed its own input again instead of the token it sampled)",
                 "token-sequence", false, lookup_scaled(W, [tokens](std::int64_t p) -> std::int64_t {
                   return p < std::int64_t(tokens.size()) ? tokens[std::size_t(std::max<std::int64_t>(p - 1, 0))]
                                                          : -1;
                 })});
  // A chunked prefill whose later chunks read the ids the first one uploaded.
  if (const std::int64_t chunk = in.prefill_chunk, prompt = in.prompt_length; chunk > 0 && chunk < prompt)
    out.push_back({fmt::format("each prefill chunk fed the first chunk's token ids: position p < {} gets the row of "
                               "the token at p mod {} (the ids uploaded for the first batch only)",
                               prompt, chunk),
                   "token-sequence", false, lookup_scaled(W, [tokens, chunk, prompt](std::int64_t p) -> std::int64_t {
                     if (p >= std::int64_t(tokens.size())) return -1;
                     return tokens[std::size_t(p < prompt ? p % chunk : p)];
                   })});
  for (const int bits : {8, 16})
    if (V > (std::size_t(1) << bits))
      out.push_back({fmt::format("the row of the token id truncated to {} bits (id mod {})", bits, 1 << bits),
                     "embedding", false, lookup_scaled(W, [tokens, bits](std::int64_t p) -> std::int64_t {
                       return p < std::int64_t(tokens.size()) ? std::int64_t(tokens[std::size_t(p)]) % (1 << bits) : -1;
                     })});
  if (V > (std::size_t(1) << 15))
    out.push_back({"the row of the token id wrapped as a signed 16-bit integer, the negative index counted from "
                   "the table's end (ids from 32768 on read id - 65536 + n_vocab)",
                   "embedding", false, lookup_scaled(W, [tokens, V](std::int64_t p) -> std::int64_t {
                     if (p >= std::int64_t(tokens.size())) return -1;
                     const auto wrapped = std::int64_t(std::int16_t(std::uint16_t(tokens[std::size_t(p)])));
                     return wrapped < 0 ? wrapped + std::int64_t(V) : wrapped;
                   })});
  for (const bool bf16 : {true, false})
    if (V > (bf16 ? 256u : 2048u))
      out.push_back({fmt::format("the row of the token id rounded to {} (the ids cast to the model's 16-bit dtype: exact "
                                 "up to {} only)",
                                 bf16 ? "bf16" : "f16", bf16 ? 256 : 2048),
                     "embedding", false, lookup_scaled(W, [tokens, bf16, V](std::int64_t p) -> std::int64_t {
                       if (p >= std::int64_t(tokens.size())) return -1;
                       const auto id = float(tokens[std::size_t(p)]);
                       const auto rounded = std::int64_t(rounded_16bit(id, bf16));
                       return rounded < std::int64_t(V) ? rounded : -1;
                     })});
  out.push_back({"the row of the position index instead of the token id", "embedding", false,
                 lookup_scaled(W, [](std::int64_t p) { return p; })});
  out.push_back({"the row of the first token of the prompt at every position", "embedding", false,
                 [=](std::int64_t p) { return lookup_scaled(W, token(0, -p))(p); }});
  if (scale == 1.0f)
    out.push_back({fmt::format("the row scaled by sqrt(n_embd) = {:.4g}", std::sqrt(double(E))), "embedding", false,
                   lookup(W, token(0, 0), float(std::sqrt(double(E))))});
  // A scale nobody listed (the square root taken in integers, a constant from another model):
  // fitted to the actual row at position 0.
  const auto named = [](double k, double c) { return std::abs(k / c - 1) < 1e-3; };
  if (const auto k = fit_scale(lookup(W, token(0, 0))(0), trace_row(in.observed, "token_embd", -1, 0));
      k && *k > 0 && !named(*k, scale) && !named(*k, std::sqrt(double(E))) && !named(*k, 1)) {
    const bool integer_root = std::abs(*k - std::floor(std::sqrt(double(E)))) < 1e-4 * *k;
    out.push_back({fmt::format("the row scaled by {:.6g} (fitted to the actual row){}", *k,
                               integer_root ? fmt::format(" = floor(sqrt(n_embd)) = floor(sqrt({})): the square root "
                                                          "taken in integers",
                                                          E)
                                            : std::string()),
                   "embedding", false, lookup(W, token(0, 0), float(*k))});
    out.back().fitted = true;
  }
  // The rows of one token id zeroed wherever it stands (a padding mask that takes a real token
  // for padding), read off the actual rows: every position holding that id all zero, no other.
  if (const TapInfo* tap = in.observed.find("token_embd", -1); tap && !tokens.empty()) {
    std::optional<std::int32_t> zeroed;
    bool one_id = true;
    for (std::int64_t p = 0; p < std::min<std::int64_t>(tap->last_position() + 1, std::int64_t(tokens.size())); ++p) {
      const Row r = trace_row(in.observed, "token_embd", -1, p);
      if (r.empty() || std::any_of(r.begin(), r.end(), [](float v) { return v != 0; })) continue;
      one_id = one_id && (!zeroed || *zeroed == tokens[std::size_t(p)]);
      zeroed = tokens[std::size_t(p)];
    }
    if (zeroed && one_id) {
      const GgufFile& f = in.model.file();
      std::string whose;
      for (const auto& [key, what] : {std::pair{"tokenizer.ggml.padding_token_id", "padding"},
                                      std::pair{"tokenizer.ggml.eos_token_id", "end-of-sequence"},
                                      std::pair{"tokenizer.ggml.bos_token_id", "beginning-of-sequence"}})
        if (whose.empty() && f.get_uint_opt(key) == std::uint64_t(*zeroed))
          whose = fmt::format(" (the model's {} token, {})", what, key);
      out.push_back({fmt::format("token {}'s rows zeroed wherever it stands{}: a padding mask that takes a real "
                                 "token for padding",
                                 *zeroed, whose),
                     "embedding", false, [row = lookup_scaled(W, token(0, 0)), tokens, id = *zeroed](std::int64_t p) {
                       Row r = row(p);
                       if (p < std::int64_t(tokens.size()) && tokens[std::size_t(p)] == id)
                         std::fill(r.begin(), r.end(), 0.0f);
                       return r;
                     }});
      out.back().explains_zeros = true;
      out.back().fitted = true;
    }
  }
  // A row pointer off by k elements (an offset added twice, a header not skipped): fitted to the
  // actual row at position 0, |k| under one row.
  if (const Row actual = trace_row(in.observed, "token_embd", -1, 0);
      !tokens.empty() && actual.size() == E && W->size() == E * V) {
    const auto t = std::int64_t(tokens[0]);
    float largest = 0;
    for (float v : actual) largest = std::max(largest, std::abs(v));
    const auto fits = [&](std::int64_t k) {
      const std::int64_t at = t * std::int64_t(E) + k;
      if (at < 0 || at + std::int64_t(E) > std::int64_t(W->size())) return false;
      for (std::size_t i = 0; i < E; ++i)
        if (std::abs(scale * (*W)[std::size_t(at) + i] - actual[i]) > 1e-5f * largest) return false;
      return true;
    };
    for (std::int64_t k = 1; k < std::int64_t(E); ++k)
      if (const std::int64_t shift = fits(k) ? k : fits(-k) ? -k : 0; shift != 0) {
        out.push_back({fmt::format("the row read {} element{} {} (fitted at position 0): element i taken at token * "
                                   "n_embd + i {} {}, a row pointer off by {}",
                                   std::abs(shift), std::abs(shift) == 1 ? "" : "s", shift > 0 ? "late" : "early",
                                   shift > 0 ? '+' : '-', std::abs(shift), shift),
                       "embedding", false, [=](std::int64_t p) {
                         const std::int64_t tok = token(0, 0)(p);
                         const std::int64_t at = tok * std::int64_t(E) + shift;
                         if (tok < 0 || at < 0 || at + std::int64_t(E) > std::int64_t(W->size())) return Row{};
                         Row r(E);
                         for (std::size_t i = 0; i < E; ++i) r[i] = scale * (*W)[std::size_t(at) + i];
                         return r;
                       }});
        out.back().fitted = true;
        break;
      }
  }
  // Rows of other tokens nobody listed: each row that is not its token's looked up in the table.
  if (auto found = rows_of_other_tokens(in, *W, scale); !found.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [p, t] : found)
      if (pairs.size() < 3)
        pairs.push_back(fmt::format("position {} holds token {}'s row for {}", p, t, tokens[std::size_t(p)]));
    out.push_back({fmt::format("rows of other tokens, each found in the table ({}{}): the ids the lookup used are "
                               "not the ids the trace records",
                               fmt::join(pairs, "; "), found.size() > pairs.size() ? "; ..." : ""),
                   "embedding", false, [row = lookup_scaled(W, token(0, 0)), other = lookup_scaled(W, [found](std::int64_t p) {
                                          const auto it = found.find(p);
                                          return it == found.end() ? std::int64_t(-1) : std::int64_t(it->second);
                                        })](std::int64_t p) {
                     const Row r = other(p);
                     return r.empty() ? row(p) : r;
                   }});
    out.back().fitted = true;
  }
  out.push_back({"the table read transposed: element i of the token's row taken at i * n_embd + token", "embedding", false,
                 lookup_scaled(W, token(0, 0), 1.0f, E)});
  out.push_back({"the table read as [n_embd][n_vocab]: element i of the token's row taken at i * n_vocab + token (a "
                 "column gathered)",
                 "embedding", false, lookup_scaled(W, token(0, 0), 1.0f, V)});
  // Another table of the same shape passed to the lookup (the head's, when it is untied).
  for (const GgufTensorInfo& other : in.model.file().tensors())
    if (other.name != wt->name && other.ne == wt->ne) {
      const std::vector<float>* O = &in.model.weight(other.name);
      out.push_back({fmt::format("the token's row of {} instead of token_embd.weight", other.name), "embedding",
                     false, lookup_scaled(O, token(0, 0))});
    }
  for (WeightVariant& v : weight_variants(*wt)) {
    if (v.baseline) continue;
    auto decoded = std::make_shared<std::vector<float>>(std::move(v.values));
    Candidate c{"the row of the table as loaded when " + v.variant, v.bug_class, false,
                [decoded, f = lookup_scaled(decoded.get(), token(0, 0))](std::int64_t p) { return f(p); }};
    c.explains_zeros = std::all_of(decoded->begin(), decoded->end(), [](float x) { return x == 0; });
    out.push_back(std::move(c));
  }
}

// The norms' variants: each constant replaced (epsilon), the definition changed (mean removed as
// in LayerNorm, (1 + w) as in Gemma or Gemma's offset taken off again, no normalization at all),
// another norm's weight wired in.
// The q/k norms (qwen3) normalize each head on its own: the same variants, per head.
void norm_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const ResolvedInput input = tap_inputs(name, layer, c.n_layer).front();
  const std::string x_name = input.name;
  const int x_layer = input.layer;
  const bool per_head = name == "attn_q_norm" || name == "attn_k_norm";
  const std::string w_name = name == "output_norm"      ? "output_norm.weight"
                             : name == "attn_post_norm" ? fmt::format("blk.{}.post_attention_norm.weight", layer)
                             : name == "ffn_post_norm"  ? fmt::format("blk.{}.post_ffw_norm.weight", layer)
                                                        : fmt::format("blk.{}.{}.weight", layer, name);
  // Another norm's weight wired in (names swapped where the weights are bound): any other norm of
  // the layer the shapes allow; the output norm's neighbour, the last layer's FFN norm.
  std::vector<std::string> others;
  if (name == "output_norm")
    others.push_back(fmt::format("blk.{}.ffn_norm.weight", c.n_layer - 1));
  else
    for (const char* norm : {"attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm", "attn_q_norm",
                             "attn_k_norm"})
      if (const std::string other = fmt::format("blk.{}.{}.weight", layer, norm); other != w_name)
        others.push_back(other);
  const std::size_t own_layer = others.size();
  enum class Form {
    rms, mean_removed, one_plus_w, minus_one, weight_squared, unnormalized, over_n_minus_1, eps_outside_sqrt,
    weighted_first, after_rope, squares_in_f16
  };
  auto run = [&in, x_name, x_layer, per_head, layer, head_dim = c.head_dim](const std::vector<float>* weight, float eps,
                                                                            Form form = Form::rms, double x_scale = 1) {
    return [&in, x_name, x_layer, weight, eps, form, per_head, layer, head_dim, x_scale](std::int64_t p) {
      Row x = trace_row(in.actual, x_name, x_layer, p);
      if (x_scale != 1)
        for (float& v : x) v = float(v * x_scale);
      if (form == Form::after_rope && !x.empty()) x = rotated_as_model(in, layer, x, p);  // q/k rotated, then normed
      const std::size_t group = per_head ? std::size_t(head_dim) : x.size();
      if (x.empty() || group == 0 || x.size() % group != 0 || (weight && weight->size() != group)) return Row{};
      std::vector<float> w1;
      const float* w = weight ? weight->data() : nullptr;
      if ((form == Form::one_plus_w || form == Form::minus_one || form == Form::weight_squared) && weight) {
        w1 = *weight;
        for (float& v : w1) v = form == Form::weight_squared ? v * v : v + (form == Form::one_plus_w ? 1.0f : -1.0f);
        w = w1.data();
      }
      Row y(x.size());
      for (std::size_t at = 0; at < x.size(); at += group) {
        std::vector<double> xd(x.begin() + std::ptrdiff_t(at), x.begin() + std::ptrdiff_t(at + group)), yd(group);
        if (form == Form::mean_removed) {
          double mean = 0;
          for (double v : xd) mean += v;
          mean /= double(group);
          for (double& v : xd) v -= mean;
        }
        if (form == Form::weighted_first) {
          for (std::size_t i = 0; i < group; ++i) xd[i] *= w ? w[i] : 1.0f;
          ref::rmsnorm(xd.data(), nullptr, int(group), eps, yd.data());
        } else if (form == Form::unnormalized) {
          for (std::size_t i = 0; i < group; ++i) yd[i] = xd[i] * (w ? w[i] : 1.0f);
        } else if (form == Form::squares_in_f16) {
          // Each square and their sum rounded to f16: a sum past 65504 is inf, and x / sqrt(inf) is 0.
          const auto f16 = [](double v) { return double(fp16_to_fp32(fp32_to_fp16(float(v)))); };
          double squares = 0;
          for (double v : xd) squares += f16(f16(v) * f16(v));
          const double mean = f16(f16(squares) / double(group));
          for (std::size_t i = 0; i < group; ++i) yd[i] = xd[i] / std::sqrt(mean + eps) * (w ? w[i] : 1.0f);
        } else if (form == Form::over_n_minus_1 || form == Form::eps_outside_sqrt) {
          double squares = 0;
          for (double v : xd) squares += v * v;
          const double inv = form == Form::eps_outside_sqrt ? 1 / (std::sqrt(squares / double(group)) + eps)
                             : group > 1                    ? 1 / std::sqrt(squares / double(group - 1) + eps)
                                                            : 0;
          for (std::size_t i = 0; i < group; ++i) yd[i] = xd[i] * inv * (w ? w[i] : 1.0f);
        } else {
          ref::rmsnorm(xd.data(), w, int(group), eps, yd.data());
        }
        std::copy(yd.begin(), yd.end(), y.begin() + std::ptrdiff_t(at));
      }
      return y;
    };
  };
  const std::vector<float>* w = &in.model.weight(w_name);
  const float eps = c.rms_eps;
  out.push_back({"rmsnorm(x) * w", "", true, run(w, eps)});
  if (in.baseline_only) return;
  out.push_back({"rmsnorm(x) without the norm weight", "normalization", false, run(nullptr, eps)});
  // A decode step's norm over its input's previous row (the input buffer's row not updated for the
  // step: a stale copy, a pointer to last step's row).
  if (!per_head)
    out.push_back({"in decode steps, the norm of its input's previous position (a stale input row)", "buffer", false,
                   [normed = run(w, eps), prompt = in.prompt_length](std::int64_t p) {
                     return normed(p >= prompt ? p - 1 : p);
                   }});
  if (name == "output_norm" || (name == "attn_norm" && x_layer >= 0)) {
    // The stream as an earlier layer left it: the layers before this norm absent from the actual
    // trace, every tap of them (the layer loop stopped short, a pipeline stage skipped a layer), or
    // present and their output dropped (the stream read one layer early).
    int last = x_layer;
    const auto ran = [&](int l) {
      const auto& taps = in.actual.taps();
      return std::any_of(taps.begin(), taps.end(), [l](const TapInfo& t) { return t.layer == l; });
    };
    while (last >= 0 && !ran(last)) --last;
    const bool never_ran = last < x_layer;
    if (!never_ran) --last;
    const std::string skipped =
        last + 1 == x_layer ? fmt::format("layer {}", x_layer) : fmt::format("layers {}..{}", last + 1, x_layer);
    const std::string reader = name == "output_norm" ? "the head" : fmt::format("layer {}", layer);
    const std::string from_name = last >= 0 ? x_name : "token_embd";
    const std::string from = last >= 0 ? fmt::format("blk.{}.{}", last, x_name) : from_name;
    const std::string left = last >= 0 ? fmt::format("as layer {} left it", last) : "as the embedding left it";
    if (in.actual.find(from_name, last))
      out.push_back({never_ran ? fmt::format("rmsnorm({}) * w: {} never ran (the actual trace holds none of {} "
                                             "taps), the stream normed {}",
                                             from, skipped, last + 1 == x_layer ? "its" : "their", left)
                               : fmt::format("rmsnorm({}) * w: the stream normed {}, {}'s output dropped ({} read "
                                             "the hidden states one layer early)",
                                             from, left, skipped, reader),
                     "layer-loop", false, [&in, from_name, last, w, eps](std::int64_t p) {
                       const Row x = trace_row(in.actual, from_name, last, p);
                       if (x.empty() || x.size() != w->size()) return Row{};
                       std::vector<double> xd(x.begin(), x.end()), yd(x.size());
                       ref::rmsnorm(xd.data(), w->data(), int(x.size()), eps, yd.data());
                       return Row(yd.begin(), yd.end());
                     }});
  }
  if (per_head) {
    // Run with another row width: the mean square over groups of `width` elements (every head at
    // once, the head size taken as n_embd / n_head, ...), the weight repeated every `period`
    // (each head's, or the first `width` of it where the kernel was given rows of that width);
    // the elements from `normed` on passed through as they came.
    const auto over_width = [&in, x_name, x_layer, w, eps](std::size_t width, std::size_t period,
                                                           std::size_t normed = SIZE_MAX) {
      return [&in, x_name, x_layer, w, eps, width, period, normed](std::int64_t p) {
        const Row x = trace_row(in.actual, x_name, x_layer, p);
        if (x.empty() || x.size() % width != 0 || period > w->size()) return Row{};
        Row y = x;
        for (std::size_t at = 0; at < std::min(x.size(), normed); at += width) {
          double squares = 0;
          for (std::size_t i = at; i < at + width; ++i) squares += double(x[i]) * x[i];
          const double inv = 1 / std::sqrt(squares / double(width) + eps);
          for (std::size_t i = at; i < at + width; ++i) y[i] = float(x[i] * inv * (*w)[i % period]);
        }
        return y;
      };
    };
    const auto head = std::size_t(c.head_dim);
    const std::size_t row = std::size_t(name == "attn_q_norm" ? c.n_head : c.n_head_kv) * head;
    for (std::size_t width = 2; width <= row; ++width) {
      if (row % width != 0 || width == head) continue;
      const std::string elements =
          c.n_head > 0 && width == std::size_t(c.n_embd / c.n_head)
              ? fmt::format("{} = n_embd / n_head elements (the head size computed from n_embd)", width)
              : fmt::format("{} elements", width);
      out.push_back({fmt::format("the mean square taken over {} instead of each head's {}",
                                 width == row ? std::string("the whole row (every head)") : "groups of " + elements, head),
                     "normalization", false, over_width(width, head)});
      if (width < head)
        out.push_back({fmt::format("the norm run on rows of {} instead of each head's {}: the weight's first {} "
                                   "elements applied to each",
                                   elements, head, width),
                       "normalization", false, over_width(width, width)});
    }
    if (name == "attn_q_norm" && c.n_head_kv > 0 && c.n_head_kv < c.n_head)
      out.push_back({fmt::format("the q norm run over n_head_kv = {} heads (K's head count): heads {}..{} left as "
                                 "{} had them",
                                 c.n_head_kv, c.n_head_kv, c.n_head - 1, x_name),
                     "normalization", false, over_width(head, head, std::size_t(c.n_head_kv) * head)});
    out.push_back({fmt::format("rmsnorm(rope({})) * w: the norm applied after RoPE instead of before it", x_name),
                   "normalization", false, run(w, eps, Form::after_rope)});
  }
  if (!per_head && in.prompt_length > 1) {
    // The mean square taken over the whole batch (every prompt row's elements), not per row.
    const std::int64_t prompt = in.prompt_length, step = in.prefill_chunk > 0 ? in.prefill_chunk : prompt;
    out.push_back({"the mean square taken over every row of the prefill batch instead of each row's", "normalization",
                   false, [&in, x_name, x_layer, w, eps, prompt, step](std::int64_t p) {
                     const std::int64_t first = p < prompt ? p / step * step : p;
                     const std::int64_t end = p < prompt ? std::min(prompt, first + step) : p + 1;
                     double squares = 0, count = 0;
                     for (std::int64_t q = first; q < end; ++q)
                       for (float v : trace_row(in.actual, x_name, x_layer, q)) squares += double(v) * v, ++count;
                     const Row x = trace_row(in.actual, x_name, x_layer, p);
                     if (x.empty() || w->size() != x.size()) return Row{};
                     const double inv = 1 / std::sqrt(squares / count + eps);
                     Row y(x.size());
                     for (std::size_t i = 0; i < x.size(); ++i) y[i] = float(x[i] * inv * (*w)[i]);
                     return y;
                   }});
  }
  if (name == "ffn_norm") {
    // A parallel block's wiring (GPT-J, Falcon): the FFN norm reads the block's input, not resid.attn.
    const ResolvedInput block_in = tap_inputs("attn_norm", layer, c.n_layer).front();
    out.push_back({fmt::format("rmsnorm({}) * w: the FFN fed the block's input, as a parallel attention/FFN block "
                               "is, instead of {}",
                               full_tap_name(block_in.name, block_in.layer), x_name),
                   "buffer", false, [&in, block_in, w, eps](std::int64_t p) {
                     const Row x = trace_row(in.actual, block_in.name, block_in.layer, p);
                     if (x.empty() || w->size() != x.size()) return Row{};
                     std::vector<double> xd(x.begin(), x.end()), y(x.size());
                     ref::rmsnorm(xd.data(), w->data(), int(x.size()), eps, y.data());
                     return Row(y.begin(), y.end());
                   }});
  }
  if (name == "attn_post_norm" || name == "ffn_post_norm") {
    // A pre-norm block's post-norm placed as a post-LN transformer's: rmsnorm(stream + o) · w.
    const ResolvedInput stream = tap_inputs(name == "attn_post_norm" ? "resid.attn" : "resid.ffn", layer, c.n_layer).back();
    out.push_back({fmt::format("rmsnorm({} + {}) * w: the post-norm applied after the residual add", stream.name, x_name),
                   "normalization", false, [&in, stream, x_name, x_layer, w, eps](std::int64_t p) {
                     const Row x = trace_row(in.actual, x_name, x_layer, p);
                     const Row r = trace_row(in.actual, stream.name, stream.layer, p);
                     if (x.empty() || r.size() != x.size() || w->size() != x.size()) return Row{};
                     std::vector<double> sum(x.size()), y(x.size());
                     for (std::size_t i = 0; i < x.size(); ++i) sum[i] = double(r[i]) + double(x[i]);
                     ref::rmsnorm(sum.data(), w->data(), int(x.size()), eps, y.data());
                     return Row(y.begin(), y.end());
                   }});
  }
  // An epsilon nobody listed (a misread GGUF key): fitted to the actual row at position 0. As
  // rmsnorm(c·x, eps) is rmsnorm(x, eps / c²), it fits as well an input scaled by c after its
  // tap; the residual add that reads the same stream (when the trace holds it) says which: a
  // stream it reads as c·x rules out every epsilon variant (each normalizes x itself).
  const Row x0 = trace_row(in.actual, x_name, x_layer, 0), y0 = trace_row(in.observed, name, layer, 0);
  const auto fitted = !x0.empty() && w->size() == x0.size() ? fit_rms_eps(x0, y0, w->data()) : std::nullopt;
  const double scale = fitted && *fitted > 0 && std::abs(*fitted / eps - 1) > 1e-2 ? std::sqrt(double(eps) / *fitted) : 0;
  const bool block_norm = name == "attn_norm" || name == "ffn_norm";
  const bool reads_the_stream = block_norm || name == "output_norm";
  const Row read = scale > 0 && block_norm
                       ? stream_added_by(name == "attn_norm" ? "resid.attn" : "resid.ffn", layer, in, 0)
                       : Row{};
  const auto off_by = [&](double k) {  // nmse of the stream the residual added against k·x
    Row kx(x0.size());
    std::transform(x0.begin(), x0.end(), kx.begin(), [k](float v) { return float(k * v); });
    return row_metrics(kx.data(), read.data(), std::int64_t(kx.size())).nmse;
  };
  const bool seen = read.size() == x0.size() && scale > 0;
  const bool scaled = seen && off_by(scale) < 1e-4 && off_by(1) > 1e-2;
  const bool unscaled = seen && off_by(1) < 1e-4 && off_by(scale) > 1e-2;
  if (!scaled) {
    for (float other : {1e-5f, 1e-6f, 1e-12f, 0.0f, 1.0f})
      if (other != eps)
        out.push_back({fmt::format("epsilon {:g} instead of the model's {:g}", other, eps), "normalization", false,
                       run(w, other)});
    if (scale > 0) {
      out.push_back({fmt::format("epsilon {:.4g} instead of the model's {:g} (fitted to the actual values)", *fitted,
                                 eps),
                     "normalization", false, run(w, float(*fitted))});
      out.back().fitted = true;
    }
  }
  if (scale > 0 && !unscaled && reads_the_stream) {
    const ScaledStream s = scaled_stream(x_name, x_layer, scale, c);
    out.push_back({s.variant, s.bug_class, false, run(w, eps, Form::rms, scale)});
  }
  out.push_back({"the mean subtracted before the RMS (LayerNorm instead of RMSNorm)", "normalization", false,
                 run(w, eps, Form::mean_removed)});
  out.push_back({"the mean square taken over n - 1 instead of n elements", "normalization", false,
                 run(w, eps, Form::over_n_minus_1)});
  out.push_back({"x / (sqrt(mean(x²)) + eps): epsilon added outside the square root", "normalization", false,
                 run(w, eps, Form::eps_outside_sqrt)});
  Candidate squares_in_f16{"the sum of squares accumulated in f16: past 65504 it overflows to inf, and the row "
                           "divided by sqrt(inf) comes out all zero",
                           "normalization", false, run(w, eps, Form::squares_in_f16)};
  squares_in_f16.explains_zeros = true;
  out.push_back(std::move(squares_in_f16));
  out.push_back({"rmsnorm(x) * (1 + w): the weight stored as an offset from one", "normalization", false,
                 run(w, eps, Form::one_plus_w)});
  // Gemma's converter stores 1 + w; code written for HF's weights computes x * (1 + w) on them, code
  // that takes the one off again (or, on HF's weights, forgets it) multiplies by w - 1.
  out.push_back({"rmsnorm(x) * (w - 1): a weight the GGUF stores as 1 + w (Gemma's) taken as the offset itself, "
                 "the one dropped",
                 "normalization", false, run(w, eps, Form::minus_one)});
  out.push_back({"rmsnorm(x) * w * w: the weight applied twice", "normalization", false,
                 run(w, eps, Form::weight_squared)});
  out.push_back({"rmsnorm(x * w): the weight multiplied in before the mean square instead of after", "normalization",
                 false, run(w, eps, Form::weighted_first)});
  out.push_back({"x * w: the weight applied, the normalization skipped", "normalization", false,
                 run(w, eps, Form::unnormalized)});
  Candidate skipped{fmt::format("{} passed through: the norm not applied", x_name), "normalization", false,
                    run(nullptr, eps, Form::unnormalized)};
  skipped.takes = full_tap_name(x_name, x_layer);
  out.push_back(std::move(skipped));
  const std::string prefix = fmt::format("blk.{}.", layer);
  // The same norm of another layer: the one before or after (an index off by one), or any (a name
  // matched by its prefix, "blk.1." finding "blk.19.").
  if (name != "output_norm" && w_name.rfind(prefix, 0) == 0)
    for (int l = 0; l < c.n_layer; ++l)
      if (l != layer) others.push_back(fmt::format("blk.{}.{}", l, w_name.substr(prefix.size())));
  for (std::size_t i = 0; i < others.size(); ++i) {
    const std::string& other = others[i];
    const int l = i < own_layer ? layer : std::stoi(other.substr(4));
    if (const std::vector<float>* o = &in.model.weight(other); !o->empty() && o->size() == w->size())
      out.push_back({fmt::format("rmsnorm(x) * {} ({})", other,
                                 i < own_layer ? "another norm's weight wired in"
                                 : std::abs(l - layer) == 1
                                     ? "another layer's weight: a layer index off by one, where the weights are bound "
                                       "or where the layer loop reads them"
                                     : "another layer's weight: the weight found by another layer's index or name (a "
                                       "name matched by its prefix, blk.1 finding blk.19)"),
                     "weight-loading", false, run(o, eps)});
  }
}

CacheFormat cache_format_of(const TraceMetadata& m) {
  CacheFormat c;
  if (m.precision == "f16" || m.precision == "bf16") c.type = m.precision;
  const auto setting = [&](const char* key) {
    const auto it = m.settings.find(key);
    return it == m.settings.end() ? nullptr : &it->second;
  };
  const auto* kv_type = setting("kv_type");
  const auto* type = kv_type ? std::get_if<std::string>(kv_type) : nullptr;
  if (!type) return c;
  c.type = *type;
  if (*type == "f32" || *type == "f16" || *type == "bf16") return c;
  c.type = "f32";  // until the settings below say how it was stored
  // A quantized cache. llama.cpp says whether it stored K and V rotated: a trace that does not
  // say (recorded before tapdiff read it) cannot be replayed as stored.
  const auto rotated = [&](const char* key) -> std::optional<bool> {
    const auto* v = setting(key);
    const auto* on = v ? std::get_if<std::int64_t>(v) : nullptr;
    return on ? std::optional<bool>(*on != 0) : std::nullopt;
  };
  const std::optional<bool> k = rotated("attn_rot_k"), v = rotated("attn_rot_v");
  c.modeled = cache_type_modeled(*type) && k && v;
  if (!c.modeled) return c;
  c.type = *type;
  c.rotated_k = *k;
  c.rotated_v = *v;
  return c;
}

std::int64_t prefill_chunk_of(const TraceMetadata& m) {
  if (const auto it = m.settings.find("prefill_chunk"); it != m.settings.end())
    if (const auto* chunk = std::get_if<std::int64_t>(&it->second)) return std::max<std::int64_t>(0, *chunk);
  return 0;
}

ReplayInputs replay_inputs(const TraceReader& inputs, const TraceReader& observed, ReplayModel& model,
                           std::int64_t prompt_length) {
  const TraceMetadata& m = observed.metadata();
  return {inputs, observed, model, prompt_length, m.dims ? m.dims->n_ctx : std::int64_t(m.tokens.size()),
          cache_format_of(m), prefill_chunk_of(m)};
}

std::string weight_read_by(const std::string& name, int layer, const ModelConfig& c) {
  if (name == "token_embd") return "token_embd.weight";
  for (const char* projection :
       {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output"})
    if (name == projection) return weight_of(name, layer, c);
  return "";
}

std::vector<Candidate> candidates_for(const std::string& name, int layer, ReplayInputs& in) {
  std::vector<Candidate> out;
  if (name == "ffn_down" && in.model.config().moe())
    experts_down_candidates(layer, in, out);
  else if (name == "attn_q" || name == "attn_k" || name == "attn_v" || name == "attn_output" ||
           name == "ffn_gate" || name == "ffn_up" || name == "ffn_down" || name == "output" || name == "ffn_gate_inp")
    projection_candidates(name, layer, in, out);
  else if (name == "ffn.routing")
    routing_candidates(layer, in, out);
  else if (name == "ffn_gate_exps" || name == "ffn_up_exps")
    experts_projection_candidates(name, layer, in, out);
  else if (name == "ffn.act_exps")
    experts_activation_candidates(layer, in, out);
  else if (name == "token_embd")
    embedding_candidates(in, out);
  else if (name == "attn_norm" || name == "ffn_norm" || name == "output_norm" || name == "attn_q_norm" ||
           name == "attn_k_norm" || name == "attn_post_norm" || name == "ffn_post_norm")
    norm_candidates(name, layer, in, out);
  else if (name == "attn_q.rope" || name == "attn_k.rope")
    rope_candidates(name, layer, in, out);
  else if (name == "attn.probs" || name == "attn.probs.summary" || name == "attn.out")
    attention_candidates(name, layer, in, out);
  else if (name == "kv.k" || name == "kv.v")
    cache_candidates(name, layer, in, out);
  else if (name == "resid.attn" || name == "resid.ffn")
    residual_candidates(name, layer, in, out);
  else if (name == "ffn.act")
    activation_candidates(layer, in, out);
  // Generic variants last: where one predicts what a named variant does, the named one stays.
  if (!out.empty() && !in.baseline_only) {
    storage_candidates(name, layer, in, out);
    buffer_candidates(name, layer, in, out);
  }
  return out;
}

}  // namespace tapdiff::diff
