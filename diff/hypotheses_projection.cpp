// The projections' variants (attn_q/k/v, attn_output, ffn_gate/up/down, the output head): W x
// replayed from the trace's own input rows with the weight, bias and cap as a buggy engine would
// have used them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diff/fitted_constants.hpp"
#include "diff/hypothesis_families.hpp"
#include "diff/metrics.hpp"
#include "diff/replay_rows.hpp"
#include "diff/tap_graph.hpp"
#include "diff/weight_variants.hpp"
#include "model/dequantize.hpp"
#include "model/ggml_type.hpp"
#include "model/fused_weights.hpp"
#include "reference/ops.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {

std::string weight_of(const std::string& name, int layer, const ModelConfig& c) {
  if (name == "output") return c.tied_output ? "token_embd.weight" : "output.weight";
  return fmt::format("blk.{}.{}.weight", layer, name);
}

namespace {

std::string input_of(const std::string& name) {
  if (name == "attn_q" || name == "attn_k" || name == "attn_v") return "attn_norm";
  if (name == "attn_output") return "attn.out";
  if (name == "ffn_gate" || name == "ffn_up" || name == "ffn_gate_inp") return "ffn_norm";
  if (name == "ffn_down") return "ffn.act";
  return "output_norm";  // output
}

Row matvec_row(const std::vector<float>& W, const Row& x, std::size_t n_out, bool transposed,
               const std::vector<float>* bias, float cap = 0, double scale = 1) {
  if (x.empty() || W.size() != x.size() * n_out) return {};
  std::vector<double> xd(x.begin(), x.end()), y(n_out);
  ref::matvec(W.data(), xd.data(), int(x.size()), int(n_out), y.data(), transposed);
  for (std::size_t i = 0; i < n_out; ++i) y[i] = (y[i] + (bias && !bias->empty() ? (*bias)[i] : 0.0f)) * scale;
  ref::softcap(y.data(), std::int64_t(n_out), cap);
  return Row(y.begin(), y.end());
}

// The k of y = b + sum over the columns j < k of W[i, j] x[j] that `actual` is (0 < k < the row's
// length: a product's loop stopped short), by the partial sums column by column; nothing when
// no k reproduces it to 1e-6 of its squared size.
std::optional<std::size_t> fit_column_bound(const std::vector<float>& W, const Row& x, std::size_t n_out,
                                            const std::vector<float>* bias, const Row& actual) {
  const std::size_t n_in = x.size();
  if (n_in < 2 || W.size() != n_in * n_out || actual.size() != n_out) return std::nullopt;
  std::vector<double> y(n_out, 0.0);
  if (bias && bias->size() == n_out) y.assign(bias->begin(), bias->end());
  double size = 0;
  for (float v : actual) size += double(v) * v;
  std::optional<std::size_t> best;
  double best_error = 1e-6 * size;
  for (std::size_t k = 1; k < n_in; ++k) {
    double error = 0;
    for (std::size_t i = 0; i < n_out; ++i) {
      y[i] += double(W[i * n_in + k - 1]) * x[k - 1];
      error += (y[i] - actual[i]) * (y[i] - actual[i]);
    }
    if (error < best_error) best = k, best_error = error;
  }
  return best;
}

}  // namespace

std::string elements_text(const std::vector<bool>& mask, const ModelConfig& c) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [first, end)
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i] && (i == 0 || !mask[i - 1])) runs.push_back({i, i + 1});
    else if (mask[i]) runs.back().second = i + 1;
  std::size_t on = 0;
  for (const auto& [first, end] : runs) on += end - first;
  if (runs.size() != 1) return fmt::format("{} of its {} elements only, in {} runs", on, mask.size(), runs.size());
  const auto [first, end] = runs.front();
  const std::size_t d = std::size_t(c.head_dim);
  std::string why;
  if (first == 0 && on == std::size_t(c.kv_dim()) && on != mask.size()) why = ": the k/v width";
  else if (d > 0 && first % d == 0 && on % d == 0)
    why = on == d ? fmt::format(": head {} only", first / d) : fmt::format(": heads {}..{}", first / d, end / d - 1);
  return fmt::format("elements {}..{} only ({} of {}{})", first, end - 1, on, mask.size(), why);
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
  auto x = [&, x_name, x_layer](std::int64_t p) { return trace_row(in.actual, x_name, x_layer, p); };
  // The logits' soft-cap (gemma2) and scale (granite) belong to the head: every variant keeps them
  // but those that name them.
  const float cap = name == "output" ? c.final_softcap : 0.0f;
  const double lf = name == "output" ? c.logit_factor() : 1.0;
  // keep: owns a weight or bias made here for one variant.
  auto with = [=](const std::vector<float>* weight, const std::vector<float>* bias, bool transposed = false,
                  std::shared_ptr<const void> keep = {}, float capped = -1) {
    return [=](std::int64_t p) {
      (void)keep;
      return matvec_row(*weight, x(p), n_out, transposed, bias, capped < 0 ? cap : capped, lf);
    };
  };

  out.push_back({"W x" + std::string(has_bias ? " + b" : "") + (lf != 1 ? fmt::format(" / {:g}", c.logit_scale) : "") +
                     (cap > 0 ? fmt::format(", soft-capped at {:g}", cap) : ""),
                 "", true, with(W, B)});
  if (in.baseline_only) return;
  if (lf != 1) {
    const auto times = [=](double k) {
      return [=](std::int64_t p) { return matvec_row(*W, x(p), n_out, false, B, cap, k); };
    };
    out.push_back({fmt::format("W x: the logits not divided by the logit scale {:g}", c.logit_scale), "logit-scale",
                   false, times(1)});
    out.push_back({fmt::format("W x * {:g}: the logits multiplied by the logit scale instead of divided", c.logit_scale),
                   "logit-scale", false, times(c.logit_scale)});
    out.push_back({fmt::format("W x / {:g}: the logits divided by the logit scale twice", c.logit_scale * c.logit_scale),
                   "logit-scale", false, times(double(lf) * lf)});
    // The divisor read from another of Granite's keys.
    for (const auto& [key, value] : {std::pair{"embedding_scale", c.embedding_multiplier},
                                     std::pair{"residual_scale", c.residual_multiplier},
                                     std::pair{"attention.scale", c.attention_multiplier}})
      if (value > 0 && value != c.logit_scale)
        out.push_back({fmt::format("W x / {:.4g}: the logits divided by {} instead of the logit scale {:g} (the key "
                                   "read wrong)",
                                   value, key, c.logit_scale),
                       "logit-scale", false, times(1.0 / value)});
  }
  if (cap > 0)
    out.push_back({"W x: the logits not soft-capped", "softcap", false, with(W, B, false, {}, 0.0f)});
  if (cap > 0 && cap != 1)  // at 1 the two forms agree
    out.push_back({fmt::format("the logits soft-capped as {0:g}·tanh(x) instead of {0:g}·tanh(x / {0:g}): the division by "
                               "the cap left out", cap),
                   "softcap", false, [=](std::int64_t p) {
                     Row y = matvec_row(*W, x(p), n_out, false, B, 0, lf);
                     for (float& v : y) v = float(cap * std::tanh(double(v)));
                     return y;
                   }});
  if (cap > 0 && c.attn_softcap > 0 && c.attn_softcap != cap)
    out.push_back({fmt::format("the logits soft-capped at the attention's cap {:g} instead of the final cap {:g}",
                               c.attn_softcap, cap),
                   "softcap", false, with(W, B, false, {}, c.attn_softcap)});
  if (const std::int64_t last = in.prompt_length - 1; name == "output" && last > 0)
    out.push_back({"the prompt's logits from the hidden state of the position before its last (the head read the "
                   "batch's row before the last)",
                   "buffer", false,
                   [=](std::int64_t p) { return matvec_row(*W, x(p == last ? p - 1 : p), n_out, false, B, cap, lf); }});
  // A head written for one-token steps reads row 0 of a prompt's batch.
  if (const std::int64_t last = in.prompt_length - 1, step = in.prefill_chunk > 0 ? in.prefill_chunk : last + 1,
      first = last / step * step;
      name == "output" && last - first > 1)
    out.push_back({"the prompt's logits from the hidden state of its batch's first row (the head read row 0 of the "
                   "batch, not its last)",
                   "buffer", false,
                   [=](std::int64_t p) { return matvec_row(*W, x(p == last ? first : p), n_out, false, B, cap, lf); }});
  // ... or another row of the prompt (a stale staging row, an index from another loop): the row
  // whose logits the last position's are, searched over the prompt's last 64.
  if (const std::int64_t last = in.prompt_length - 1; name == "output" && last > 1) {
    const Row y = trace_row(in.observed, name, layer, last);
    std::int64_t found = -1;
    double best = 1e-6;
    for (std::int64_t j = std::max<std::int64_t>(0, last - 64); j < last && !y.empty(); ++j) {
      const Row r = matvec_row(*W, x(j), n_out, false, B, cap, lf);
      if (r.size() != y.size()) continue;
      if (const double e = row_metrics(r.data(), y.data(), std::int64_t(y.size())).nmse; e < best)
        std::tie(best, found) = std::pair{e, j};
    }
    if (found >= 0) {
      out.push_back({fmt::format("the prompt's logits from the hidden state of position {} (fitted: the head read "
                                 "another row of the batch than its last, a stale row of a staging buffer)",
                                 found),
                     "buffer", false,
                     [=](std::int64_t p) { return matvec_row(*W, x(p == last ? found : p), n_out, false, B, cap, lf); }});
      out.back().fitted = true;
    }
  }
  // ... or shifts each position's logits by one number (their max, or their log-sum-exp, subtracted
  // in place): the shift read off each actual row, which must move every logit alike.
  if (name == "output") {
    const auto shift_at = [=, &in](std::int64_t p) -> std::optional<double> {
      const Row right = with(W, B)(p), y = trace_row(in.observed, name, layer, p);
      if (right.empty() || right.size() != y.size()) return std::nullopt;
      std::vector<double> d(y.size());
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = double(y[i]) - right[i];
      std::nth_element(d.begin(), d.begin() + std::ptrdiff_t(d.size() / 2), d.end());
      return d[d.size() / 2];
    };
    const std::int64_t last = std::max<std::int64_t>(in.prompt_length - 1, 0);
    if (const auto shift = shift_at(last); shift && std::abs(*shift) > 0) {
      const Row right = with(W, B)(last);
      double max = -INFINITY, sum = 0;
      for (float v : right) max = std::max(max, double(v));
      for (float v : right) sum += std::exp(double(v) - max);
      const double lse = max + std::log(sum);
      const char* what = std::abs(-*shift - max) <= 1e-3 * std::max(1.0, std::abs(max)) ? ": their max subtracted"
                         : std::abs(-*shift - lse) <= 1e-3 * std::max(1.0, std::abs(lse))
                             ? ": their log-sum-exp subtracted (log-softmax)"
                             : "";
      out.push_back({fmt::format("every logit of a position shifted by one number of its own{} (fitted per position): a "
                                 "sampler normalizing the logits buffer in place before it is recorded",
                                 what),
                     "sampling", false, [=](std::int64_t p) {
                       Row r = with(W, B)(p);
                       if (const auto k = shift_at(p))
                         for (float& v : r) v = float(v + *k);
                       return r;
                     }});
      out.back().fitted = true;
    }
    // ... or replaces them by their softmax, exp((z - max) / T) / sum: T read off the slope of
    // log(actual) over the logits where the prompt ends.
    const Row right = with(W, B)(last), y = trace_row(in.observed, name, layer, last);
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
    for (std::size_t i = 0; i < y.size() && y.size() == right.size(); ++i)
      if (y[i] > 1e-30f && std::isfinite(y[i])) {
        const double z = right[i], l = std::log(double(y[i]));
        sx += z, sy += l, sxx += z * z, sxy += z * l, n += 1;
      }
    if (const double slope = n > 1 ? (sxy - sx * sy / n) / (sxx - sx * sx / n) : 0; slope > 0 && std::isfinite(slope)) {
      const double T = std::abs(slope - 1) < 1e-3 ? 1.0 : 1 / slope;
      out.push_back({fmt::format("the logits replaced by their softmax{} (a sampler's softmax computed in place in the "
                                 "logits buffer before it is recorded)",
                                 T == 1.0 ? std::string() : fmt::format(" at temperature {:.4g} (fitted)", T)),
                     "sampling", false, [=](std::int64_t p) {
                       Row r = with(W, B)(p);
                       double max = -INFINITY, sum = 0;
                       for (float v : r) max = std::max(max, double(v));
                       for (float v : r) sum += std::exp((double(v) - max) / T);
                       for (float& v : r) v = float(std::exp((double(v) - max) / T) / sum);
                       return r;
                     }});
      out.back().fitted = T != 1.0;
    }
  }
  // Every logit times one factor, fitted: a sampler's temperature applied in place before they are
  // recorded, or the head scaled (its weight as loaded, a logit scale in the forward pass). The
  // logits alone cannot tell them apart: both are offered, and tie (the weights separate them).
  if (const std::int64_t last = std::max<std::int64_t>(in.prompt_length - 1, 0); name == "output")
    if (const auto k = fit_scale(with(W, B)(last), trace_row(in.observed, name, layer, last));
        k && *k > 0 && std::abs(*k - 1) > 1e-3) {
      const auto scaled = [=, k = float(*k)](std::int64_t p) {
        Row r = with(W, B)(p);
        for (float& v : r) v *= k;
        return r;
      };
      const std::string factor = fmt::format("the logits times {:.4g} = 1 / {:.4g} (fitted where the prompt ends)", *k,
                                             1 / *k);
      out.push_back({factor + ": a sampling temperature applied to the logits buffer in place", "sampling", false,
                     scaled});
      out.back().fitted = true;
      out.push_back({fmt::format("{}: the head scaled, its weight {} as loaded or its output in the forward pass (a "
                                 "logit scale)",
                                 factor, wname),
                     "weight-loading", false, scaled});
      out.back().fitted = true;
    }
  // Logits soft-capped where the model has no cap (gemma2's code path, a cap read from another key):
  // c fitted on the logit of largest magnitude where the prompt ends, c·tanh(x / c) = y.
  if (const std::int64_t last = std::max<std::int64_t>(in.prompt_length - 1, 0); name == "output" && cap == 0) {
    const Row right = with(W, B)(last), y = trace_row(in.observed, name, layer, last);
    std::size_t at = 0;
    for (std::size_t i = 0; i < right.size() && right.size() == y.size(); ++i)
      if (std::abs(right[i]) > std::abs(right[at])) at = i;
    const double x0 = at < right.size() && right.size() == y.size() ? std::abs(double(right[at])) : 0;
    const double y0 = x0 > 0 ? std::abs(double(y[at])) : 0;
    if (x0 > 0 && y0 > 0 && y0 < x0 * (1 - 1e-4) && (y[at] > 0) == (right[at] > 0)) {
      double lo = y0, hi = 1e6 * x0;  // c·tanh(x0 / c) rises with c: below y0 at c = y0, towards x0 as c grows
      for (int i = 0; i < 200; ++i) {
        const double mid = std::sqrt(lo * hi);
        (mid * std::tanh(x0 / mid) < y0 ? lo : hi) = mid;
      }
      out.push_back({fmt::format("the logits soft-capped at {:.4g} (fitted where the prompt ends), c·tanh(x / c), "
                                 "though the model declares no cap",
                                 lo),
                     "softcap", false, with(W, B, false, {}, float(lo))});
      out.back().fitted = true;
    }
  }
  // A projection times one factor, fitted where the prompt ends: its weight scaled as loaded (a
  // block scale decoded wrong by a power of two, a factor folded in at load). The bias, if any, stays.
  if (const std::int64_t last = std::max<std::int64_t>(in.prompt_length - 1, 0); name != "output" && !B)
    if (const auto k = fit_scale(with(W, B)(last), trace_row(in.observed, name, layer, last));
        k && *k > 0 && std::abs(*k - 1) > 1e-3) {
      const bool quantized = ggml_type_traits(wt->type).block_elems > 1;
      out.push_back({fmt::format("W times {:.4g} (fitted where the prompt ends): {} {}", *k, wname,
                                 quantized ? fmt::format("decoded with its {} block scales off by that factor",
                                                         ggml_type_traits(wt->type).name)
                                           : "scaled by that factor as loaded (a factor folded in at load)"),
                     quantized ? "dequantization" : "weight-loading", false, [=, k = float(*k)](std::int64_t p) {
                       Row r = with(W, B)(p);
                       for (float& v : r) v *= k;
                       return r;
                     }});
      out.back().fitted = true;
    }
  // ... or its penalties on the tokens seen so far (positions 0..p), fitted where the trace ends:
  // a repetition penalty r (positive logits divided by r, negative ones times r), a presence
  // penalty (a constant subtracted), a frequency penalty (a constant per occurrence).
  if (const TapInfo* tap = name == "output" ? in.observed.find(name, layer) : nullptr; tap && tap->n_rows > 0) {
    const std::vector<std::int32_t>& tokens = in.actual.metadata().tokens;
    const auto occurrences = [tokens, n_out](std::int64_t p) {
      std::vector<int> count(n_out, 0);
      for (std::int64_t t = 0; t <= p && t < std::int64_t(tokens.size()); ++t)
        if (tokens[std::size_t(t)] >= 0 && std::size_t(tokens[std::size_t(t)]) < n_out) ++count[std::size_t(tokens[std::size_t(t)])];
      return count;
    };
    const std::int64_t last = tap->last_position();
    const Row right = with(W, B)(last), y = trace_row(in.observed, name, layer, last);
    std::vector<double> ratios, offsets, per_occurrence;
    if (right.size() == n_out && y.size() == n_out) {
      const std::vector<int> count = occurrences(last);
      for (std::size_t i = 0; i < n_out; ++i)
        if (count[i] > 0 && right[i] != 0 && y[i] != 0) {
          ratios.push_back(right[i] > 0 ? double(right[i]) / y[i] : double(y[i]) / right[i]);
          offsets.push_back(double(right[i]) - y[i]);
          per_occurrence.push_back(offsets.back() / count[i]);
        }
    }
    const auto median = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    const auto penalized = [=](auto edit) {
      return [=](std::int64_t p) {
        Row r = with(W, B)(p);
        const std::vector<int> count = occurrences(p);
        for (std::size_t i = 0; i < r.size() && i < count.size(); ++i)
          if (count[i] > 0) r[i] = edit(r[i], count[i]);
        return r;
      };
    };
    const std::string edited = fmt::format("of the tokens seen so far, in place (fitted at position {}): the sampler's "
                                           "edit recorded as the logits",
                                           last);
    if (!ratios.empty())
      if (const double r = median(ratios); r > 0 && std::abs(r - 1) > 1e-3) {
        out.push_back({fmt::format("a repetition penalty of {:.4g} on the logits {}", r, edited), "sampling", false,
                       penalized([r](float v, int) { return float(v > 0 ? v / r : v * r); })});
        out.back().fitted = true;
      }
    if (!offsets.empty())
      for (const bool per_count : {false, true})
        if (const double a = median(per_count ? per_occurrence : offsets); std::abs(a) > 1e-6) {
          out.push_back({fmt::format("a {} penalty of {:.4g} subtracted from the logits {}",
                                     per_count ? "frequency" : "presence", a, edited),
                         "sampling", false,
                         penalized([a, per_count](float v, int n) { return float(v - a * (per_count ? n : 1)); })});
          out.back().fitted = true;
        }
  }
  // A product's loop stopped short of the row (a tail left out, a bound from another width): k
  // fitted on the last row the tap holds that the full product does not give; in decode steps
  // only when the prompt's last row is right (decode runs its own matrix-vector kernel).
  if (const TapInfo* tap = name == "output" ? nullptr : in.observed.find(name, layer); tap && tap->n_rows > 0) {
    const std::int64_t last = tap->n_rows - 1, prompt_end = std::min(in.prompt_length, tap->n_rows) - 1;
    const auto off = [&](std::int64_t p) {
      const Row y = trace_row(in.observed, name, layer, p), full = with(W, B)(p);
      return !y.empty() && y.size() == full.size() &&
             row_metrics(full.data(), y.data(), std::int64_t(y.size())).nmse > 1e-8;
    };
    const bool decode_only = last > prompt_end && prompt_end >= 0 && !off(prompt_end);
    if (off(last))
      if (const auto k = fit_column_bound(*W, x(last), n_out, B, trace_row(in.observed, name, layer, last))) {
        const std::int64_t from = decode_only ? prompt_end + 1 : 0;
        out.push_back({fmt::format("W x{} summed over columns 0..{} only ({} of {}: the product's loop stopped short"
                                   "{}, fitted at position {})",
                                   has_bias ? " + b" : "", *k - 1, *k, x(last).size(),
                                   decode_only ? " in decode steps, the prefill's GEMM right" : "", last),
                       "matmul-layout", false, [=](std::int64_t p) {
                         const Row xs = x(p);
                         if (p < from || xs.size() <= *k) return with(W, B)(p);
                         Row cut = xs;
                         std::fill(cut.begin() + std::ptrdiff_t(*k), cut.end(), 0.0f);
                         return matvec_row(*W, cut, n_out, false, B, cap, lf);
                       }});
        out.back().fitted = true;
      }
  }
  // A split-K product whose second half of the reduction reads the first half's columns (the
  // panel's weight offset not advanced): W[:, j] for column j + n_in / 2 as well.
  if (const std::size_t n_in = n_out > 0 ? W->size() / n_out : 0; in.matrix_variants && n_in >= 2 && n_in % 2 == 0) {
    auto first_half_twice = std::make_shared<std::vector<float>>(*W);
    for (std::size_t i = 0; i < n_out; ++i)
      std::copy_n(W->begin() + std::ptrdiff_t(i * n_in), n_in / 2,
                  first_half_twice->begin() + std::ptrdiff_t(i * n_in + n_in / 2));
    out.push_back({"W x with the reduction split in two halves, the second multiplied by the first half's columns (a "
                   "split-K panel's weight offset not advanced)",
                   "matmul-layout", false, with(first_half_twice.get(), B, false, first_half_twice)});
  }
  // A loader that stored W transposed gives the same values: weight taps (--weights) tell them
  // apart, and once the run recorded them (and they agreed) the GEMM is left.
  const bool weights_seen = in.actual.find(std::string(kWeightTapPrefix) + wname, -1) ||
                            in.actual.find(std::string(kWeightStatsTapPrefix) + wname, -1);
  out.push_back({std::string("W^T x: the weight read transposed (op flag / leading dimension") +
                     (weights_seen ? ")" : "; or stored transposed by the loader: record --weights to rule it out)"),
                 "matmul-layout", false, with(W, B, true)});
  if (has_bias) {
    out.push_back({"W x without the bias", "bias", false, with(W, nullptr)});
    // The add walking n_out elements of the flat (n_rows, n_out) output: each step's first row
    // only (a decode step's one row right).
    out.push_back({"W x + b on the first row of each batch only, the batch's other rows without the bias (the add "
                   "walked n_out elements of the flat (rows, n_out) output, not every row)",
                   "bias", false, [with_b = with(W, B), without = with(W, nullptr), prompt = in.prompt_length,
                                   chunk = in.prefill_chunk](std::int64_t p) {
                     const bool first = p >= prompt || p % (chunk > 0 ? chunk : prompt) == 0;
                     return first ? with_b(p) : without(p);
                   }});
    if (const GgufTensorInfo* bt = in.model.tensor(bname))
      for (WeightVariant& v : weight_variants(*bt)) {
        if (v.baseline || v.bug_class == "weight-loading") continue;  // a zero bias is "without the bias"
        auto decoded = std::make_shared<std::vector<float>>(std::move(v.values));
        out.push_back({"W x + b with b as loaded when " + v.variant, v.bug_class, false,
                       with(W, decoded.get(), false, decoded)});
      }
    auto doubled = std::make_shared<std::vector<float>>(*B), negated = std::make_shared<std::vector<float>>(*B);
    for (float& v : *doubled) v *= 2;
    for (float& v : *negated) v = -v;
    out.push_back({"W x + 2b: the bias added twice", "bias", false, with(W, doubled.get(), false, doubled)});
    out.push_back({"W x - b: the bias subtracted", "bias", false, with(W, negated.get(), false, negated)});
    if (const std::int64_t p = std::max<std::int64_t>(in.prompt_length - 1, 0); !x(p).empty())
      if (const auto mask = fit_bias_mask(matvec_row(*W, x(p), n_out, false, nullptr), trace_row(in.observed, name, layer, p), *B)) {
        auto partial = std::make_shared<std::vector<float>>(*B);
        for (std::size_t i = 0; i < partial->size(); ++i) (*partial)[i] *= (*mask)[i] ? 1.0f : 0.0f;
        out.push_back({"W x + b with the bias added to " + elements_text(*mask, c) + " (fitted where the prompt ends)",
                       "bias", false, with(W, partial.get(), false, partial)});
        out.back().fitted = true;
      }
  }
  // W as a wrong loader or decoder would have left it (diff/weight_variants.hpp).
  for (WeightVariant& v : in.matrix_variants ? weight_variants(*wt) : std::vector<WeightVariant>{}) {
    if (v.baseline) continue;
    const bool zero = std::all_of(v.values.begin(), v.values.end(), [](float w) { return w == 0; });
    auto decoded = std::make_shared<std::vector<float>>(std::move(v.values));
    Candidate loaded{"W as loaded when " + v.variant, v.bug_class, false, with(decoded.get(), B, false, decoded)};
    loaded.explains_zeros = zero && !B;
    out.push_back(std::move(loaded));
  }
  // The GEMM fed from the norm's input instead of its output (a buffer mixed up).
  if (tap_class(x_name) == "norm") {
    const ResolvedInput raw = tap_inputs(x_name, x_layer, c.n_layer).front();
    out.push_back({fmt::format("W applied to {} (the un-normalized input) instead of {}", raw.name, x_name), "buffer",
                   false, [=, &in](std::int64_t p) {
                     return matvec_row(*W, trace_row(in.actual, raw.name, raw.layer, p), n_out, false, B, cap, lf);
                   }});
  }
  // The down projection fed one of the activation's operands (an in-place activation assumed).
  if (name == "ffn_down")
    for (const char* operand : {"ffn_gate", "ffn_up"})
      out.push_back({fmt::format("W applied to {} instead of ffn.act (the activation assumed in place)", operand),
                     "buffer", false, [=, &in](std::int64_t p) {
                       return matvec_row(*W, trace_row(in.actual, operand, layer, p), n_out, false, B, cap, lf);
                     }});
  // Another tensor of the same shape wired in: another layer's, or a sibling projection's.
  std::vector<std::string> others;
  if (name == "output") {
    others.push_back(c.tied_output ? "output.weight" : "token_embd.weight");
  } else {
    for (int l : {layer - 1, layer + 1})
      if (l >= 0 && l < c.n_layer) others.push_back(fmt::format("blk.{}.{}.weight", l, name));
    // Any projection of the layer of the same shape (a square attn_q where attn_output belongs).
    for (const char* sibling : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
      if (sibling != name) others.push_back(fmt::format("blk.{}.{}.weight", layer, sibling));
  }
  for (const auto& other : others) {
    const GgufTensorInfo* ot = in.model.tensor(other);
    if (!ot || ot->ne != wt->ne) continue;
    const std::vector<float>* O = &in.model.weight(other);
    out.push_back({fmt::format("x multiplied by {} instead of {}", other, wname), "weight-loading", false,
                   with(O, B)});
    // Another layer's weight and bias together: that layer's tensors wired in (its pointers).
    const std::string other_bias = other.substr(0, other.size() - std::string_view("weight").size()) + "bias";
    const GgufTensorInfo* obt = has_bias && other.find(fmt::format(".{}.", name)) != std::string::npos
                                    ? in.model.tensor(other_bias)
                                    : nullptr;
    if (obt && obt->ne == in.model.tensor(bname)->ne)
      out.push_back({fmt::format("x multiplied by {} plus {}: another layer's weight and bias", other, other_bias),
                     "weight-loading", false, with(O, &in.model.weight(other_bias))});
  }
  // Any other layer's weight (a closure or pointer bound to the last layer the loader saw, a
  // layer index from another loop): fitted at the tap's last row, in every step or in decode steps
  // only (a decode path that binds its own weights).
  if (const TapInfo* tap = name == "output" ? nullptr : in.observed.find(name, layer); tap && tap->n_rows > 0) {
    const std::int64_t last = tap->last_position();
    const Row y = trace_row(in.observed, name, layer, last), right = with(W, B)(last);
    const auto nmse = [&](const Row& r) {
      return r.size() == y.size() && !y.empty() ? row_metrics(r.data(), y.data(), std::int64_t(y.size())).nmse
                                                : double(INFINITY);
    };
    const double off = nmse(right);  // the last row against the correct one
    // Each layer screened on a few of its rows, decoded from the file alone (a 7B model's 32 copies
    // of a projection are not all decoded for one search); the closest one then checked whole.
    const Row xl = x(last);
    const std::size_t n_in = xl.size(), step = std::max<std::size_t>(1, n_out / 16);
    const auto screened = [&](const GgufTensorInfo& t) {
      std::vector<float> w(n_in);
      Row got, want;
      for (std::size_t r = 0; r < n_out; r += step) {
        dequantize_row(t.type, t.data + r * (t.n_bytes / n_out), w.data(), std::int64_t(n_in));
        double sum = B ? double((*B)[r]) : 0.0;
        for (std::size_t j = 0; j < n_in; ++j) sum += double(w[j]) * double(xl[j]);
        got.push_back(float(sum));
        want.push_back(y[r]);
      }
      return got.empty() ? double(INFINITY) : row_metrics(got.data(), want.data(), std::int64_t(got.size())).nmse;
    };
    double closest = off / 100;
    int found = -1;
    const bool searchable = wt->ne.size() == 2 && n_in == std::size_t(wt->ne[0]) && y.size() == n_out;
    for (int l = 0; l < c.n_layer && searchable; ++l) {
      const GgufTensorInfo* ot = std::abs(l - layer) > 1 ? in.model.tensor(fmt::format("blk.{}.{}.weight", l, name)) : nullptr;
      if (!ot || ot->ne != wt->ne) continue;
      if (const double e = screened(*ot); e < closest) std::tie(closest, found) = std::pair{e, l};
    }
    if (found >= 0 && !(nmse(with(&in.model.weight(fmt::format("blk.{}.{}.weight", found, name)), B)(last)) < off / 100))
      found = -1;
    if (found >= 0) {
      const std::string other = fmt::format("blk.{}.{}.weight", found, name);
      const auto from_other = with(&in.model.weight(other), B), own = with(W, B);
      const std::int64_t prompt = in.prompt_length;
      const Row prompt_row = trace_row(in.observed, name, layer, prompt - 1);
      const Row prompt_right = own(prompt - 1);
      const bool prompt_right_here = last >= prompt && !prompt_row.empty() && prompt_row.size() == prompt_right.size() &&
                                     row_metrics(prompt_right.data(), prompt_row.data(),
                                                 std::int64_t(prompt_row.size())).nmse < off / 100;
      if (prompt_right_here)
        out.push_back({fmt::format("x multiplied by {} instead of {} in decode steps only (fitted at position {}: the "
                                   "decode path's weights bound to the wrong layer, the prompt's right)",
                                   other, wname, last),
                       "weight-loading", false,
                       [=](std::int64_t p) { return p >= prompt ? from_other(p) : own(p); }});
      else
        out.push_back({fmt::format("x multiplied by {} instead of {} (fitted at position {}: another layer's weight, "
                                   "a pointer or closure bound to the wrong layer)",
                                   other, wname, last),
                       "weight-loading", false, from_other});
      out.back().fitted = true;
    }
  }
  // phi3's fused gate/up split row by row (gate the even rows, up the odd) instead of in halves.
  if (const auto part = fused_part(c, wname); part && (name == "ffn_gate" || name == "ffn_up")) {
    const GgufTensorInfo* fused = in.model.file().find_tensor(part->fused);
    if (fused && fused->ne.size() == 2 && fused->ne[1] == 2 * std::int64_t(n_out)) {
      const auto all = dequantize_tensor(*fused);
      const auto cols = std::size_t(fused->ne[0]);
      auto alternate = std::make_shared<std::vector<float>>(n_out * cols);
      for (std::size_t r = 0; r < n_out; ++r)
        std::copy_n(all.begin() + std::ptrdiff_t((2 * r + (name == "ffn_up" ? 1 : 0)) * cols), cols,
                    alternate->begin() + std::ptrdiff_t(r * cols));
      out.push_back({fmt::format("{} split from {} row by row ({} the {} rows) instead of in halves", wname,
                                 part->fused, name, name == "ffn_up" ? "odd" : "even"),
                     "weight-loading", false, with(alternate.get(), B, false, alternate)});
    }
  }
  // A sibling projection's bias added instead (a copy-pasted add): its first n_out elements.
  if (has_bias)
    for (const char* sibling : {"attn_q", "attn_k", "attn_v"}) {
      const std::string other = fmt::format("blk.{}.{}.bias", layer, sibling);
      const std::vector<float>* O = sibling != name ? &in.model.weight(other) : nullptr;
      if (!O || O->size() < n_out) continue;
      auto head = std::make_shared<std::vector<float>>(O->begin(), O->begin() + std::ptrdiff_t(n_out));
      out.push_back({fmt::format("W x + {}{} instead of {}", other,
                                 O->size() > n_out ? fmt::format(" (its first {} elements)", n_out) : "", bname),
                     "bias", false, with(W, head.get(), false, head)});
    }
  // A tied head reading a table that the embedding's scale (Gemma's sqrt(n_embd), Granite's
  // multiplier) scaled in place at load (meant for the lookups only).
  if (name == "output" && c.tied_output) {
    const float root = c.embedding_multiplier > 0 ? c.embedding_factor() : std::sqrt(float(c.n_embd));
    out.push_back({fmt::format("the logits times {} (before any soft-cap): the tied table scaled in place for the "
                               "embedding lookups",
                               c.embedding_multiplier > 0 ? fmt::format("the embedding multiplier {:g}", root)
                                                          : std::string("sqrt(n_embd)")),
                   "embedding", false, [=](std::int64_t q) {
                     Row r = matvec_row(*W, x(q), n_out, false, B, 0, lf);
                     for (float& v : r) v *= root;
                     ref::softcap(r.data(), std::int64_t(r.size()), cap);
                     return r;
                   }});
  }
}

}  // namespace tapdiff::diff
