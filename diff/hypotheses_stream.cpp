// The element-wise ops of the residual stream and the FFN (the residual adds, the gated
// activation) and the generic buffer variants every tap can have.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diff/cache_replay.hpp"
#include "diff/fitted_constants.hpp"
#include "diff/hypothesis_families.hpp"
#include "diff/replay_rows.hpp"
#include "diff/tap_graph.hpp"
#include "model/half.hpp"
#include "reference/ops.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {
namespace {

// out[i] = f(x[i], y[i]) over two rows of one length; empty when either is missing.
template <typename F>
Row elementwise(const Row& x, const Row& y, F f) {
  if (x.empty() || x.size() != y.size()) return {};
  Row out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = float(f(double(x[i]), double(y[i])));
  return out;
}

constexpr double kGeluK = 0.7978845608028654, kGeluC = 0.044715;
double gelu(double x) { return 0.5 * x * (1 + std::tanh(kGeluK * (x + kGeluC * x * x * x))); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
// The activation looked up in a table indexed by x's f16 bits that holds f16 values (ggml's GELU
// and SiLU tables).
double f16(double x) { return double(fp16_to_fp32(fp32_to_fp16(float(x)))); }
double gelu_f16_table(double x) { return f16(gelu(f16(x))); }
double silu_f16_table(double x) { return f16(ref::silu(f16(x))); }

// The position whose row the same buffer slot held one step before position q's step (a step:
// one prefill batch or chunk, or one decode position); -1 before the first step.
std::int64_t previous_step_row(std::int64_t q, const ReplayInputs& in) {
  const std::int64_t start = step_start(q, in.prompt_length, in.prefill_chunk);
  if (start == 0) return -1;
  const std::int64_t row = step_start(start - 1, in.prompt_length, in.prefill_chunk) + (q - start);
  return row < start ? row : -1;
}

// The elements of `actual` ten times nearer `held` (the slot's previous contents) than `correct`:
// the elements a step left unwritten, when some are and some others are clearly written (the
// replay's judge then says whether the rest is the precision's rounding).
std::optional<std::vector<bool>> stale_elements(const Row& actual, const Row& correct, const Row& held) {
  if (actual.empty() || actual.size() != correct.size() || actual.size() != held.size()) return std::nullopt;
  std::vector<bool> stale(actual.size(), false);
  bool any_written = false, any_stale = false;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double to_correct = std::abs(actual[i] - correct[i]), to_held = std::abs(actual[i] - held[i]);
    stale[i] = 10 * to_held < to_correct;
    any_stale = any_stale || stale[i];
    any_written = any_written || 10 * to_correct < to_held;
  }
  if (!any_stale || !any_written) return std::nullopt;
  return stale;
}

// An output written with += onto what its buffer held (a GEMM run with beta = 1, a buffer not
// cleared): fitted where the tap ends, the difference from the correct values matched against
// every row of the same shape there and in the same slot one step before (that step's last
// writer of the buffer).
std::optional<Candidate> accumulated_onto(const TapInfo& self, const std::function<Row(std::int64_t)>& correct,
                                          ReplayInputs& in) {
  const std::int64_t p = self.last_position();
  const Row actual = trace_row(in.observed, self.name, self.layer, p), expected = correct(p);
  if (actual.empty() || actual.size() != expected.size()) return std::nullopt;
  Row d(actual.size());
  double dd = 0, aa = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    d[i] = actual[i] - expected[i];
    dd += double(d[i]) * d[i], aa += double(actual[i]) * actual[i];
  }
  if (!(dd > 1e-8 * aa)) return std::nullopt;
  const TapInfo* best = nullptr;
  bool best_earlier = false;
  double best_err = 1e-6;  // of |d|²: the rounding of one more add
  for (const TapInfo& t : in.actual.taps()) {
    if (t.row_shape != self.row_shape || is_weight_tap(t.name)) continue;
    for (const bool earlier : {false, true}) {
      const std::int64_t at = earlier ? previous_step_row(p, in) : p;
      if (at < 0 || (!earlier && t.name == self.name && t.layer == self.layer)) continue;
      const Row src = trace_row(in.actual, t.name, t.layer, at);
      if (src.size() != d.size()) continue;
      double err = 0;
      for (std::size_t i = 0; i < d.size(); ++i) err += (double(d[i]) - src[i]) * (double(d[i]) - src[i]);
      if (err < best_err * dd) best = &t, best_earlier = earlier, best_err = err / dd;
    }
  }
  if (!best) return std::nullopt;
  Candidate c{fmt::format("the correct values added onto {}{}: the output written with += onto what its buffer "
                          "held (a GEMM with beta = 1, a buffer not cleared)",
                          best->full_name, best_earlier ? "'s row from the step before (the same buffer slot)" : ""),
              "buffer", false, [correct, &in, n = best->name, l = best->layer, earlier = best_earlier](std::int64_t q) {
                Row r = correct(q);
                const std::int64_t at = earlier ? previous_step_row(q, in) : q;
                const Row src = at < 0 ? Row(r.size(), 0.0f) : trace_row(in.actual, n, l, at);
                if (src.size() != r.size()) return Row{};
                for (std::size_t i = 0; i < r.size(); ++i) r[i] += src[i];
                return r;
              }};
  c.fitted = true;
  return c;
}

}  // namespace

ScaledStream scaled_stream(const std::string& x_name, int x_layer, double c, const ModelConfig& config) {
  const std::string x = x_name + (x_layer >= 0 ? fmt::format("[{}]", x_layer) : "");
  const double root_n_embd = std::sqrt(double(config.n_embd)), own = config.embedding_factor();
  if (x_name == "token_embd" && own != 1 && std::abs(c / own - 1) < 1e-2)
    return {fmt::format("the embeddings scaled by {:.4g} after the {} tap: the model's embedding scale applied twice", c, x),
            "embedding"};
  if (x_name == "token_embd" && std::abs(c / root_n_embd - 1) < 1e-2)
    return {fmt::format("the embeddings scaled by {:.4g} = sqrt(n_embd) after the {} tap: an embedding scale (Gemma's) "
                        "the model does not have",
                        c, x),
            "embedding"};
  // Granite's multipliers put on the stream: the logit scale before the final norm (which cancels it
  // but for its epsilon, so the logits go unscaled), the residual multiplier after a block.
  const double logit = config.logit_factor(), residual = config.residual_factor();
  if (logit != 1 && x_name == "resid.ffn" && x_layer == config.n_layer - 1 && std::abs(c / logit - 1) < 1e-2)
    return {fmt::format("the stream {} divided by the logit scale {:g} before output_norm, which cancels it but for its "
                        "epsilon: the logit scale applied to the stream instead of the logits",
                        x, config.logit_scale),
            "logit-scale"};
  if (residual != 1 && std::abs(c / residual - 1) < 1e-2)
    return {fmt::format("the stream {} times the residual multiplier {:.4g} between its tap and the ops that read it", x,
                        residual),
            "residual"};
  return {fmt::format("the stream {} scaled by {:.4g} between its tap and the ops that read it", x, c), "residual"};
}

Row stream_added_by(const std::string& resid, int layer, ReplayInputs& in, std::int64_t p) {
  // (the block's post-norm, the block's output, the stream)
  const auto inputs = tap_inputs(resid, layer, in.model.config().n_layer);
  const std::string o_name = inputs[in.model.config().post_norms ? 0 : 1].name;
  const double r_o = in.model.config().residual_factor();
  return elementwise(trace_row(in.observed, resid, layer, p), trace_row(in.actual, o_name, layer, p),
                     [r_o](double r, double o) { return r - r_o * o; });
}

// resid = x + r·o, x the stream entering the block, o the block's output projection (gemma2: its
// post-norm), r the model's residual multiplier (granite's; 1 elsewhere).
void residual_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const bool attn = name == "resid.attn";
  const ModelConfig& config = in.model.config();
  // (the block's post-norm, the block's output, the stream)
  const auto inputs = tap_inputs(name, layer, config.n_layer);
  const std::string o_name = inputs[config.post_norms ? 0 : 1].name, x_name = inputs[2].name;
  const int x_layer = inputs[2].layer;
  const double r = config.residual_factor();
  auto add = [&in, x_name, x_layer, o_name, layer, r](double wx, double wo) {
    return [&in, x_name, x_layer, o_name, layer, wx, wo = wo * r](std::int64_t p) {
      return elementwise(trace_row(in.actual, x_name, x_layer, p), trace_row(in.actual, o_name, layer, p),
                         [wx, wo](double x, double o) { return wx * x + wo * o; });
    };
  };
  const std::string x = x_name + (x_layer >= 0 ? fmt::format("[{}]", x_layer) : "");
  const std::string o = r == 1 ? o_name : fmt::format("{:.4g} * {}", r, o_name);  // o times the multiplier
  out.push_back({fmt::format("{} + {}", x, o), "", true, add(1, 1)});
  if (in.baseline_only) return;
  Candidate x_alone{fmt::format("{} alone: {} never added", x, o_name), "residual", false, add(1, 0)};
  x_alone.takes = full_tap_name(x_name, x_layer);
  out.push_back(std::move(x_alone));
  Candidate o_alone{fmt::format("{} alone: the residual connection dropped", o), "residual", false, add(0, 1)};
  o_alone.takes = full_tap_name(o_name, layer);
  out.push_back(std::move(o_alone));
  out.push_back({fmt::format("{} + 2 * {}: the block's output added twice", x, o), "residual", false, add(1, 2)});
  out.push_back({fmt::format("2 * {} + {}: the stream added twice", x, o), "residual", false, add(2, 1)});
  out.push_back({fmt::format("{} - {}: subtracted instead of added", x, o), "residual", false, add(1, -1)});
  if (r != 1) {
    out.push_back({fmt::format("{:.4g} * {} + {}: the residual multiplier applied to the stream instead of the block's "
                               "output",
                               r, x, o_name),
                   "residual", false, add(r, 1 / r)});
    // The decode path's add written apart from the prompt's, without the multiplier.
    out.push_back({fmt::format("{} + {} in decode steps: the residual multiplier {:.4g} not applied there, the prompt's "
                               "adds right",
                               x, o_name, r),
                   "residual", false, [unscaled = add(1, 1 / r), scaled = add(1, 1), prompt = in.prompt_length](std::int64_t p) {
                     return p >= prompt ? unscaled(p) : scaled(p);
                   }});
  }
  // The stream scaled by an op between its tap and the add: the scale fitted at position 0.
  const auto c = fit_scale(trace_row(in.actual, x_name, x_layer, 0), stream_added_by(name, layer, in, 0));
  if (c && std::isfinite(*c) && std::abs(*c - 1) > 1e-2 && std::abs(*c - 2) > 1e-2 && std::abs(*c) > 1e-2) {
    const ScaledStream s = scaled_stream(x_name, x_layer, *c, config);
    out.push_back({fmt::format("{:.4g} * {} + {}: {}", *c, x, o, s.variant), s.bug_class, false, add(*c, 1)});
    out.back().fitted = true;
  }
  // The block's output times another factor than the model's (its residual multiplier left out, or
  // one where the model has none, or applied twice): that factor fitted at position 0.
  const Row x0 = trace_row(in.actual, x_name, x_layer, 0), o0 = trace_row(in.actual, o_name, layer, 0);
  if (const auto k = fit_scale(o0, elementwise(trace_row(in.observed, name, layer, 0), x0,
                                               [](double y, double s) { return y - s; }));
      k && std::isfinite(*k) && std::abs(*k / r - 1) > 1e-2 && std::abs(*k) > 1e-2 &&
      std::abs(*k / r - 2) > 1e-2 && std::abs(*k / r + 1) > 1e-2) {
    const std::string why = r != 1 && std::abs(*k - 1) < 1e-3
                                ? fmt::format("the residual multiplier {:.4g} not applied", r)
                            : r != 1 && std::abs(*k / (r * r) - 1) < 1e-2
                                ? fmt::format("the residual multiplier {:.4g} applied twice", r)
                            : r != 1 ? fmt::format("the block's output scaled by {:.4g} (fitted) instead of the residual "
                                                   "multiplier {:.4g}",
                                                   *k, r)
                                     : fmt::format("the block's output scaled by {:.4g} (fitted), though the model has no "
                                                   "residual multiplier",
                                                   *k);
    out.push_back({fmt::format("{} + {:.4g} * {}: {}", x, *k, o_name, why), "residual", false,
                   add(1, *k / r)});
    out.back().fitted = std::abs(*k - 1) >= 1e-3 && std::abs(*k / (r * r) - 1) >= 1e-2;
  }
  if (config.post_norms) {
    // The post-norm computed and left unused: the add reads the block's output before it.
    const std::string raw = inputs[1].name;
    out.push_back({fmt::format("{} + {}: the add reads {} before its post-norm; {} computed and left unused", x, raw,
                               raw, o_name),
                   "residual", false, [&in, x_name, x_layer, raw, layer, r](std::int64_t p) {
                     return elementwise(trace_row(in.actual, x_name, x_layer, p), trace_row(in.actual, raw, layer, p),
                                        [r](double a, double b) { return a + r * b; });
                   }});
  }
  if (!attn) {
    // The stream entering the layer, read where the FFN's add should read the attention's sum.
    const auto layer_in = tap_inputs("resid.attn", layer, config.n_layer)[2];
    const std::string y = layer_in.name + (layer_in.layer >= 0 ? fmt::format("[{}]", layer_in.layer) : "");
    out.push_back({fmt::format("{} + {}: the add reads the stream entering the layer, not {}: the attention "
                               "block's output dropped from the stream",
                               y, o, x),
                   "residual", false, [&in, layer_in, o_name, layer, r](std::int64_t p) {
                     return elementwise(trace_row(in.actual, layer_in.name, layer_in.layer, p),
                                        trace_row(in.actual, o_name, layer, p), [r](double a, double b) { return a + r * b; });
                   }});
  }
  // The block's output read before its projection (attn.out, ffn.act) where their widths agree.
  const std::string unprojected = attn ? "attn.out" : "ffn.act";
  out.push_back({fmt::format("{} + {}: the add reads {} (before the output projection) instead of {}", x,
                             r == 1 ? unprojected : fmt::format("{:.4g} * {}", r, unprojected), unprojected, o_name),
                 "residual", false, [&in, x_name, x_layer, unprojected, layer, r](std::int64_t p) {
                   return elementwise(trace_row(in.actual, x_name, x_layer, p), trace_row(in.actual, unprojected, layer, p),
                                      [r](double a, double b) { return a + r * b; });
                 }});
  // The stream operand read from the block's norm output, which has its shape.
  const std::string norm = attn ? "attn_norm" : "ffn_norm";
  out.push_back({fmt::format("{} + {}: the stream read from the norm's output instead of {}", norm, o, x),
                 "residual", false, [&in, norm, o_name, layer, r](std::int64_t p) {
                   return elementwise(trace_row(in.actual, norm, layer, p), trace_row(in.actual, o_name, layer, p),
                                      [r](double a, double b) { return a + r * b; });
                 }});
}

// ffn.act = silu(gate) * up (gemma2: gelu), and the ways a gated activation gets written wrong.
void activation_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const bool geglu = in.model.config().activation == Activation::gelu;
  auto gated = [&in, layer](bool swapped, double (*act)(double), bool times_up = true) {
    return [&in, layer, swapped, act, times_up](std::int64_t p) {
      Row g = trace_row(in.actual, "ffn_gate", layer, p), u = trace_row(in.actual, "ffn_up", layer, p);
      if (swapped) std::swap(g, u);
      return elementwise(g, u, [act, times_up](double a, double b) { return act(a) * (times_up ? b : 1.0); });
    };
  };
  const auto silu = [](double x) { return ref::silu(x); };
  const auto identity = [](double x) { return x; };
  const auto relu = [](double x) { return x > 0 ? x : 0.0; };
  if (in.baseline_only) {
    out.push_back({geglu ? "gelu(ffn_gate) * ffn_up" : "silu(ffn_gate) * ffn_up", "", true,
                   gated(false, geglu ? gelu : silu)});
    return;
  }
  if (geglu) {
    out.push_back({"gelu(ffn_gate) * ffn_up", "", true, gated(false, gelu)});
    out.push_back({"gelu(ffn_up) * ffn_gate: gate and up exchanged", "activation", false, gated(true, gelu)});
    out.push_back({"silu(ffn_gate) * ffn_up: SiLU instead of GELU", "activation", false, gated(false, silu)});
    out.push_back({"the exact (erf) GELU instead of the model's tanh approximation", "activation", false,
                   gated(false, gelu_erf)});
    // A constant of the tanh approximation mistyped: both fitted at position 0.
    const auto fit = fit_gelu_constants(trace_row(in.actual, "ffn_gate", layer, 0),
                                        trace_row(in.actual, "ffn_up", layer, 0), trace_row(in.observed, "ffn.act", layer, 0));
    const bool k_differs = fit && std::abs(fit->k / kGeluK - 1) > 1e-2, c_differs = fit && std::abs(fit->c / kGeluC - 1) > 1e-2;
    if (k_differs || c_differs) {
      const GeluConstants f = *fit;
      std::vector<std::string> typos;
      if (k_differs) typos.push_back(fmt::format("{:.4g} for sqrt(2/pi) = {:.4g}", f.k, kGeluK));
      if (c_differs) typos.push_back(fmt::format("{:.4g} for {}", f.c, kGeluC));
      out.push_back({fmt::format("the tanh GELU's constants mistyped: {}", fmt::join(typos, " and ")),
                     "activation", false, [&in, layer, f](std::int64_t p) {
                       return elementwise(trace_row(in.actual, "ffn_gate", layer, p),
                                          trace_row(in.actual, "ffn_up", layer, p), [f](double g, double u) {
                                            return 0.5 * g * (1 + std::tanh(f.k * (g + f.c * g * g * g))) * u;
                                          });
                     }});
      out.back().fitted = true;
    }
  } else {
    out.push_back({"silu(ffn_gate) * ffn_up", "", true, gated(false, silu)});
    out.push_back({"silu(ffn_up) * ffn_gate: gate and up exchanged", "activation", false, gated(true, silu)});
    out.push_back({"gelu(ffn_gate) * ffn_up: GELU instead of SiLU", "activation", false, gated(false, gelu)});
  }
  out.push_back({fmt::format("{}(ffn_gate) read from a float16 table (as ggml's GELU and SiLU tables): the gate "
                             "rounded to f16, the value stored in f16, then times ffn_up",
                             geglu ? "gelu" : "silu"),
                 "activation", false, gated(false, geglu ? gelu_f16_table : silu_f16_table)});
  out.push_back({"ffn_gate * sigmoid(-ffn_gate) * ffn_up: the sign in the SiLU's exponent flipped", "activation", false,
                 gated(false, [](double x) { return x * sigmoid(-x); })});
  out.push_back({"sigmoid(ffn_gate) * ffn_up: the x of x * sigmoid(x) left out", "activation", false,
                 gated(false, sigmoid)});
  out.push_back({"ffn_gate * 0.5 * (1 + tanh(ffn_gate)) * ffn_up: the sigmoid written through tanh without halving "
                 "its argument (sigmoid(x) = 0.5 * (1 + tanh(x / 2)))",
                 "activation", false, gated(false, [](double x) { return x * 0.5 * (1 + std::tanh(x)); })});
  out.push_back({"relu(ffn_gate) * ffn_up: ReLU instead of SiLU", "activation", false, gated(false, relu)});
  out.push_back({"ffn_gate * ffn_up: no activation", "activation", false, gated(false, identity)});
  out.push_back({fmt::format("{0}(ffn_gate * ffn_up): the activation applied to the product", geglu ? "gelu" : "silu"),
                 "activation", false, [&in, layer, geglu](std::int64_t p) {
                   const Row g = trace_row(in.actual, "ffn_gate", layer, p), u = trace_row(in.actual, "ffn_up", layer, p);
                   return elementwise(g, u, [geglu](double a, double b) { return geglu ? gelu(a * b) : ref::silu(a * b); });
                 }});
  out.push_back({"silu(ffn_gate): the up projection never multiplied in", "activation", false,
                 gated(false, silu, false)});
  out.push_back({fmt::format("{0}(ffn_gate) * {0}(ffn_up): the activation applied to both projections",
                             geglu ? "gelu" : "silu"),
                 "activation", false, [&in, layer, geglu](std::int64_t p) {
                   const Row g = trace_row(in.actual, "ffn_gate", layer, p), u = trace_row(in.actual, "ffn_up", layer, p);
                   return elementwise(g, u, [geglu](double a, double b) {
                     return geglu ? gelu(a) * gelu(b) : ref::silu(a) * ref::silu(b);
                   });
                 }});
  out.push_back({fmt::format("ffn_gate * sigmoid(1.702 ffn_gate) * ffn_up: the quick GELU (GPT-2's, CLIP's) instead of "
                             "the model's {}",
                             geglu ? "tanh GELU" : "SiLU"),
                 "activation", false, gated(false, [](double x) { return x * sigmoid(1.702 * x); })});
  // Both projections written to one scratch row: the later one's values read as both operands.
  for (const auto& [kept, lost] : {std::pair{"ffn_up", "gate"}, std::pair{"ffn_gate", "up projection"}})
    out.push_back({fmt::format("silu({0}) * {0}: the {1}'s buffer overwritten by {0} (both written to one scratch row)",
                               kept, lost),
                   "buffer", false, [&in, layer, tap = std::string(kept)](std::int64_t p) {
                     const Row v = trace_row(in.actual, tap, layer, p);
                     return elementwise(v, v, [](double a, double b) { return ref::silu(a) * b; });
                   }});
  // A SwiGLU limit (gpt-oss's swiglu_limit) where the model has none: c fitted at the first row
  // it changes.
  if (const TapInfo* act = geglu ? nullptr : in.observed.find("ffn.act", layer))
    for (std::int64_t p : act->positions()) {
      const auto c = fit_swiglu_limit(trace_row(in.actual, "ffn_gate", layer, p), trace_row(in.actual, "ffn_up", layer, p),
                                      trace_row(in.observed, "ffn.act", layer, p));
      if (!c) continue;
      out.push_back({fmt::format("silu(min(ffn_gate, c)) * clamp(ffn_up, -c, c) with c = {:.4g} (fitted at position "
                                 "{}): a SwiGLU limit (gpt-oss's swiglu_limit) the model does not have",
                                 *c, p),
                     "activation", false, [&in, layer, c = *c](std::int64_t q) {
                       return elementwise(trace_row(in.actual, "ffn_gate", layer, q),
                                          trace_row(in.actual, "ffn_up", layer, q),
                                          [c](double g, double u) { return swiglu_clamped(g, u, c); });
                     }});
      out.back().fitted = true;
      break;
    }
  for (const char* alone : {"ffn_up", "ffn_gate"}) {
    Candidate c{fmt::format("{} alone: the gated activation skipped", alone), "activation", false,
                gated(alone == std::string("ffn_up"), identity, false)};
    c.takes = full_tap_name(alone, layer);
    out.push_back(std::move(c));
  }
}

Candidate never_written(const std::string& variant, const std::string& bug_class, ReplayInputs& in,
                        const std::string& name, int layer) {
  Candidate zeros{variant, bug_class, false, [&in, name, layer](std::int64_t p) {
                    Row r = trace_row(in.actual, name, layer, p);
                    std::fill(r.begin(), r.end(), 0.0f);
                    return r;
                  }};
  zeros.explains_zeros = true;
  zeros.takes = "zeros";
  return zeros;
}

void storage_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const auto baseline = std::find_if(out.begin(), out.end(), [](const Candidate& c) { return c.baseline; });
  if (baseline == out.end() || name == "attn.probs.summary") return;
  const auto correct = baseline->replay;
  // A trace holding 16-bit values in every other tap is its producer's precision mislabelled (a
  // signature says so), not one buffer of the wrong type.
  const auto whole_trace_in = [&](bool bf16) {
    for (const TapInfo& t : in.observed.taps()) {
      if (is_weight_tap(t.name) || (t.name == name && t.layer == layer) || t.n_rows == 0) continue;
      for (float v : trace_row(in.observed, t.name, t.layer, t.first_position()))
        if (std::isfinite(v) && rounded_16bit(v, bf16) != v) return false;
    }
    return true;
  };
  std::vector<Candidate> stored;
  if (in.cache.type == "f32" && name != "kv.k" && name != "kv.v")  // the cache's own are kv-cache variants
    for (const bool bf16 : {false, true})
      if (!whole_trace_in(bf16))
        stored.push_back({fmt::format("the values rounded to {}: the output kept in a 16-bit buffer in an f32 run",
                                      bf16 ? "bf16" : "f16"),
                          "buffer", false, [correct, bf16](std::int64_t p) {
                            Row r = correct(p);
                            for (float& v : r) v = rounded_16bit(v, bf16);
                            return r;
                          }});
  if (in.cache.type == "f32" && name != "kv.k" && name != "kv.v" && !whole_trace_in(true))
    stored.push_back({"the values truncated to bf16 (the low 16 bits dropped, not rounded): the output kept in a "
                      "bf16 buffer in an f32 run",
                      "buffer", false, [correct](std::int64_t p) {
                        Row r = correct(p);
                        for (float& v : r) v = bits_float(float_bits(v) & 0xffff0000u);
                        return r;
                      }});
  // A write that stopped short: the zeros at the end of the actual row where the trace ends.
  // (attn.probs rows end in zeros by design: the keys not yet visible.)
  const TapInfo* self = in.observed.find(name, layer);
  if (self && self->n_rows > 0 && name != "attn.probs") {
    const Row last = trace_row(in.observed, name, layer, self->last_position());
    const auto written = std::size_t(
        std::find_if(last.rbegin(), last.rend(), [](float v) { return v != 0; }).base() - last.begin());
    if (written > 0 && written < last.size()) {
      std::string why;
      for (const std::size_t m : {256, 128, 64, 32, 16, 8})
        if (written % m == 0 && last.size() / m * m == written) {
          why = fmt::format(" ({} rounded down to a multiple of {})", last.size(), m);
          break;
        }
      Candidate prefix{fmt::format("only the first {} of {} elements written, the rest left zero{}", written,
                                   last.size(), why),
                       "buffer", false, [correct, written](std::int64_t p) {
                         Row r = correct(p);
                         if (r.size() > written) std::fill(r.begin() + std::ptrdiff_t(written), r.end(), 0.0f);
                         return r;
                       }};
      prefix.fitted = true;
      stored.push_back(std::move(prefix));
    }
  }
  // Part of the row not written in a step (a head's or a tile's write skipped): those elements hold
  // what the same buffer slot held one step before; which ones, fitted where the tap ends.
  if (self && self->n_rows > 1) {
    const std::int64_t p = self->last_position(), before = previous_step_row(p, in);
    if (const auto kept = before >= 0 ? stale_elements(trace_row(in.observed, name, layer, p), correct(p),
                                                       trace_row(in.actual, name, layer, before))
                                      : std::nullopt) {
      std::vector<bool> unwritten = *kept;
      Candidate partly{fmt::format("{} not written in the step: they hold what the buffer held one step before "
                                   "(fitted at position {}, whose slot held position {}'s row)",
                                   elements_text(unwritten, in.model.config()), p, before),
                       "buffer", false, [&in, correct, name, layer, unwritten](std::int64_t q) {
                         Row r = correct(q);
                         const std::int64_t prior = previous_step_row(q, in);
                         const Row held = prior >= 0 ? trace_row(in.actual, name, layer, prior) : Row{};
                         if (held.size() != r.size()) return r;
                         for (std::size_t i = 0; i < r.size(); ++i)
                           if (unwritten[i]) r[i] = held[i];
                         return r;
                       }};
      partly.fitted = true;
      stored.push_back(std::move(partly));
    }
  }
  // A GEMM's output: where beta = 1 is one flag away (a stream's add has variants of its own).
  if (self && self->n_rows > 0 && tap_class(name) == "projection") {
    if (auto added = accumulated_onto(*self, correct, in)) stored.push_back(std::move(*added));
  }
  for (auto& c : stored) out.push_back(std::move(c));
}

void buffer_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const TapInfo* self = in.actual.find(name, layer);
  if (!self) return;
  // The op's own inputs are left out: "the op skipped" is a named variant of each op.
  const auto inputs = tap_inputs(name, layer, in.model.config().n_layer);
  auto is_input = [&](const TapInfo& t) {
    return std::any_of(inputs.begin(), inputs.end(), [&](const ResolvedInput& i) {
      return i.name == t.name && i.layer == t.layer;
    });
  };
  // Nor are the taps computed from this one, or from those: a cache read back holds its K row by
  // design, and holds q/k's normed row where RoPE ran before the norm (a value passed on, not an
  // aliased buffer).
  const int n_layer = in.model.config().n_layer;
  auto consumes_self = [&](const TapInfo& t) {
    const auto reads_self = [&](const std::string& tap, int at) {
      const auto theirs = tap_inputs(tap, at, n_layer);
      return std::any_of(theirs.begin(), theirs.end(),
                         [&](const ResolvedInput& i) { return i.name == name && i.layer == layer; });
    };
    const auto theirs = tap_inputs(t.name, t.layer, n_layer);
    return reads_self(t.name, t.layer) ||
           std::any_of(theirs.begin(), theirs.end(), [&](const ResolvedInput& i) { return reads_self(i.name, i.layer); });
  };
  // A cache slot holding another layer's K (or V) is the cache's layer index, not an aliased buffer.
  auto kv_family = [](const std::string& tap) -> int {
    if (tap == "attn_k" || tap == "attn_k.rope" || tap == "kv.k") return 1;
    if (tap == "attn_v" || tap == "kv.v") return 2;
    return 0;
  };
  const bool cache_slot = name == "kv.k" || name == "kv.v";
  std::vector<Candidate> generic;
  for (const TapInfo& other : in.actual.taps()) {
    if (&other == self || other.row_shape != self->row_shape || is_weight_tap(other.name) || is_input(other) ||
        consumes_self(other))
      continue;
    const bool other_layers_cache = cache_slot && other.layer >= 0 && other.layer != layer &&
                                    kv_family(other.name) == kv_family(name);
    const std::string variant =
        other_layers_cache
            ? fmt::format("the values of {}: layer {}'s {} in layer {}'s cache (the cache written or read with "
                          "another layer's index)",
                          other.full_name, other.layer, name == "kv.k" ? "K" : "V", layer)
            : fmt::format("the values of {}: the output buffer holds another tap's data (aliased, or never written "
                          "and left from that op)",
                          other.full_name);
    Candidate copy{variant, other_layers_cache ? "kv-cache" : "buffer", false,
                   [&in, n = other.name, l = other.layer](std::int64_t p) { return trace_row(in.actual, n, l, p); }};
    copy.takes = other.full_name;
    generic.push_back(std::move(copy));
  }
  Candidate previous{"the previous position's values: the output not recomputed for this position", "buffer", false,
                     [&in, name, layer](std::int64_t p) { return trace_row(in.actual, name, layer, p - 1); }};
  previous.takes = "previous position";
  generic.push_back(std::move(previous));
  generic.push_back(never_written("zeros: the output buffer never written", "buffer", in, name, layer));
  for (auto& g : generic) {
    g.generic = true;
    const bool named = std::any_of(out.begin(), out.end(), [&](const Candidate& c) { return c.takes == g.takes; });
    if (!named) out.push_back(std::move(g));
  }
}

}  // namespace tapdiff::diff
