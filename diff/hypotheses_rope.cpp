// RoPE's replays (rope_candidates): the rotation of attn_q / attn_k under the variants an engine
// gets wrong, the positions, pairing, base, frequencies and factors, and the model's RoPE scaling.
#include "diff/fitted_constants.hpp"
#include "diff/hypotheses.hpp"
#include "diff/hypothesis_families.hpp"
#include "diff/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>
#include <memory>
#include <optional>

#include "diff/replay_rows.hpp"
#include "model/half.hpp"
#include "reference/ops.hpp"

namespace tapdiff::diff {
namespace {

std::string rope_scaling_text(const RopeScaling& s) {
  return fmt::format("{} x{:g}", rope_scaling_name(s.type), s.factor);
}

// What the scaling variants replay: the layer's rotation, with its factors (Llama 3.1's, or the
// LongRoPE set the run's context picks).
struct RopeReplay {
  const ModelConfig& c;
  int layer;
  const std::string& name;
  ReplayInputs& in;
  const char* factors_tensor;
  const std::vector<float>* factors;
  float base;
};
// The rotation with another scaling, base, positions or factors (use_factors false: none).
using Rotated = std::function<std::function<Row(std::int64_t)>(
    const RopeScaling&, float base, std::function<std::int64_t(std::int64_t)> pos, const std::vector<float>* factors,
    bool use_factors)>;

// The RoPE scaling misread: ignored, the factor multiplied in or applied to integer positions, YaRN
// taken for linear, over the wrong original context or with another magnitude, LongRoPE's other
// set of factors or none of it, Gemma 3's global-layer scaling on a sliding layer or a layer
// rotated as the other kind.
void rope_scaling_candidates(const RopeReplay& r, const Rotated& rotated, std::vector<Candidate>& out) {
  const ModelConfig& c = r.c;
  const RopeScaling s = c.rope_scaling_of(r.layer);
  const auto at_p = [](std::int64_t p) { return p; };
  const auto add = [&](std::string variant, const RopeScaling& other, float base = 0,
                       std::function<std::int64_t(std::int64_t)> pos = {}, const std::vector<float>* factors = nullptr,
                       bool use_factors = true) {
    out.push_back({std::move(variant), "rope", false,
                   rotated(other, base > 0 ? base : r.base, pos ? pos : at_p, factors, use_factors)});
  };
  // A layer rotated as the other kind (gemma3 4B+: its sliding layers at base 1e4 unscaled, the
  // global ones at the GGUF's base and scaling): a layer-kind test off by one, or inverted. (The
  // kinds' bases alone: the other kind's base variant in rope_candidates.)
  if (c.sliding_window > 0 && !c.rope_scaling_swa && c.rope_scaling.scales()) {
    const int other = c.sliding(r.layer) ? c.swa_period - 1 : 0;
    const auto how = [&](int l) {
      const RopeScaling o = c.rope_scaling_of(l);
      return fmt::format("base {:g}, {}", c.rope_base(l), o.scales() ? rope_scaling_text(o) : "unscaled");
    };
    if (c.sliding(other) != c.sliding(r.layer))
      add(fmt::format("rotated as a {} layer ({}) instead of this {} layer's ({}): the layer-kind test wrong",
                      c.sliding(r.layer) ? "global" : "sliding", how(other), c.sliding(r.layer) ? "sliding" : "global",
                      how(r.layer)),
          c.rope_scaling_of(other), c.rope_base(other));
  }
  if (!s.scales()) {
    if (c.rope_scaling.scales() && c.sliding(r.layer))
      add(fmt::format("the global layers' RoPE scaling ({}) applied to this sliding layer, which is not scaled",
                      rope_scaling_text(c.rope_scaling)),
          c.rope_scaling);
    return;
  }
  // cos and sin scaled by another magnitude than the scaling's (YaRN's applied twice, computed
  // with another logarithm): the factor fitted to the actual rows at the last prompt position.
  if (const double m = ref::rope_magnitude(s); m != 1.0) {
    const std::int64_t at = std::max<std::int64_t>(r.in.prompt_length - 1, 0);
    const Row correct = rotated(s, r.base, at_p, nullptr, true)(at);
    if (const auto k = fit_scale(correct, trace_row(r.in.observed, r.name, r.layer, at));
        k && std::isfinite(*k) && *k > 0 && std::abs(*k - 1) > 1e-4 && std::abs(m * *k - 1) > 1e-4) {
      const double fitted = m * *k;
      RopeScaling other = s;
      other.attn_factor = float(s.attn_factor * *k);
      add(fmt::format("cos and sin times {:.6g} instead of the scaling's {:.6g} (fitted){}", fitted, m,
                      std::abs(fitted / (m * m) - 1) < 1e-4 ? ": the magnitude applied twice" : ""),
          other);
      out.back().fitted = true;
    }
  }
  if (s.type == RopeScalingType::longrope) {  // its factors are the frequency factors
    if (!r.factors) return;
    const bool long_run = std::string(r.factors_tensor) == "rope_factors_long.weight";
    const char* other = long_run ? "rope_factors_short.weight" : "rope_factors_long.weight";
    if (const std::vector<float>* o = &r.in.model.weight(other); o->size() == r.factors->size())
      add(fmt::format("LongRoPE's {} factors instead of the {} ones (the run's {} positions are {} the original "
                      "context {})",
                      long_run ? "short" : "long", long_run ? "long" : "short", r.in.n_ctx, long_run ? "past" : "within",
                      s.n_ctx_orig),
          s, 0, {}, o);
    add(fmt::format("LongRoPE not applied: neither its factors nor its magnitude x{:g}", s.attn_factor), RopeScaling{},
        0, {}, nullptr, false);
    add(fmt::format("LongRoPE's factors without its magnitude factor x{:g} on cos and sin", s.attn_factor),
        RopeScaling{});
    return;
  }
  const std::string what = rope_scaling_text(s);
  add(fmt::format("the model's RoPE scaling ({}) not applied: the angles of the trained context", what), RopeScaling{});
  RopeScaling inverted = s;
  inverted.factor = 1.0f / s.factor;
  add(fmt::format("the RoPE scaling's factor {:g} multiplied into the angles instead of dividing them ({})", s.factor,
                  what),
      inverted);
  // Linear scaling as integer positions divided by a whole factor: p / 8 rounded down.
  if (const auto k = std::int64_t(s.factor); s.type == RopeScalingType::linear && float(k) == s.factor)
    add(fmt::format("positions divided by the scaling factor in integer arithmetic (p / {} rounded down) instead of "
                    "the angles",
                    k),
        RopeScaling{}, 0, [k](std::int64_t p) { return p / k; });
  if (s.type != RopeScalingType::yarn) return;
  RopeScaling linear = s;
  linear.type = RopeScalingType::linear;
  add(fmt::format("YaRN x{:g} run as linear scaling: every angle divided by {:g}, no ramp, no magnitude factor",
                  s.factor, s.factor),
      linear);
  if (s.n_ctx_orig != c.n_ctx_train) {
    RopeScaling trained = s;
    trained.n_ctx_orig = c.n_ctx_train;
    add(fmt::format("YaRN's original context taken as context_length {} instead of original_context_length {} "
                    "(the ramp's correction dims moved)",
                    c.n_ctx_train, s.n_ctx_orig),
        trained);
  }
  RopeScaling unscaled_magnitude = s;
  unscaled_magnitude.attn_factor = float(1 / ref::rope_magnitude(RopeScaling{s.type, s.factor}));
  add(fmt::format("YaRN's angles without its magnitude factor on cos and sin (x{:.4g})", ref::rope_magnitude(s)),
      unscaled_magnitude);
}

}  // namespace

Row rotated_as_model(ReplayInputs& in, int layer, const Row& row, std::int64_t position) {
  const ModelConfig& c = in.model.config();
  if (row.empty() || row.size() % std::size_t(c.head_dim) != 0) return {};
  const char* tensor = c.rope_factors_tensor(int(in.n_ctx));
  const std::vector<float>* factors = tensor ? &in.model.weight(tensor) : nullptr;
  std::vector<double> x(row.begin(), row.end());
  ref::rope(x.data(), int(row.size()) / c.head_dim, c.head_dim, c.n_rot, position, c.rope_base(layer),
            c.rope_pairing == RopePairing::norm ? ref::Pairing::norm : ref::Pairing::neox,
            factors && factors->size() == std::size_t(c.n_rot / 2) ? factors->data() : nullptr, c.rope_scaling_of(layer));
  return Row(x.begin(), x.end());
}

void rope_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const bool is_q = name == "attn_q.rope";
  const std::string src = c.qk_norm ? (is_q ? "attn_q_norm" : "attn_k_norm") : (is_q ? "attn_q" : "attn_k");
  const int heads = is_q ? c.n_head : c.n_head_kv;
  const ref::Pairing right = c.rope_pairing == RopePairing::norm ? ref::Pairing::norm : ref::Pairing::neox;
  const ref::Pairing wrong = right == ref::Pairing::norm ? ref::Pairing::neox : ref::Pairing::norm;
  // The frequency factors, where the model has them (Llama 3.1's; LongRoPE's long or short ones, as
  // the run's context picks): every variant keeps them but the factors' own.
  const char* factors_tensor = c.rope_factors_tensor(int(in.n_ctx));
  const std::vector<float>* factors = factors_tensor ? &in.model.weight(factors_tensor) : nullptr;
  if (factors && factors->size() != std::size_t(c.n_rot / 2)) factors = nullptr;
  // The layer's RoPE scaling (linear, yarn), which every variant keeps but the scaling's own.
  const RopeScaling scaling = c.rope_scaling_of(layer);
  auto rotate = [&in, src, layer, heads, c, factors, scaling](
                    std::function<std::int64_t(std::int64_t)> pos, float base, ref::Pairing pairing, bool apply = true,
                    int n_rot = 0, const std::vector<float>* f = nullptr, bool use_factors = true,
                    std::optional<RopeScaling> other_scaling = std::nullopt) {
    const std::vector<float>* used = !use_factors ? nullptr : f ? f : factors;
    return [&in, src, layer, heads, c, pos, base, pairing, apply, n_rot, used,
            s = other_scaling.value_or(scaling)](std::int64_t p) {
      const Row x = trace_row(in.actual, src, layer, p);
      if (x.empty() || !apply) return x;
      std::vector<double> xd(x.begin(), x.end());
      const int rot = n_rot > 0 ? n_rot : c.n_rot;
      ref::rope(xd.data(), heads, c.head_dim, rot, pos(p), base, pairing,
                used && used->size() == std::size_t(rot / 2) ? used->data() : nullptr, s);
      return Row(xd.begin(), xd.end());
    };
  };
  const auto at_p = [](std::int64_t p) { return p; };
  const float base = c.rope_base(layer);
  const std::int64_t prompt = in.prompt_length;
  // q or k times a factor after the rotation (a temperature, a pre-scale of another model's), fitted
  // at the last prompt position; a factor the named pre-scale gives is left to it. In a rotated
  // layer the same numbers are cos and sin times that factor, a RoPE magnitude (YaRN's attn_factor):
  // the two tie. (In a layer whose scaling has a magnitude, its fitted misreading below stands for both.)
  const auto scaled_after = [&](const std::function<Row(std::int64_t)>& correct, bool rotated) {
    const std::int64_t at = std::max<std::int64_t>(prompt - 1, 0);
    const auto k = fit_scale(correct(at), trace_row(in.observed, name, layer, at));
    const bool magnitude = ref::rope_magnitude(c.rope_scaling_of(layer)) != 1.0;
    if (!k || !std::isfinite(*k) || std::abs(*k - 1) < 1e-3 || (is_q && std::abs(*k / c.attn_scale() - 1) < 1e-3) ||
        (rotated && magnitude))
      return;
    const auto times_k = [correct, k = *k](std::int64_t p) {
      Row y = correct(p);
      for (float& v : y) v = float(v * k);
      return y;
    };
    out.push_back({fmt::format("{} times {:.4g} (fitted at position {}), {}: a scale applied to {} before attention "
                               "(a temperature, another model's pre-scale)",
                               is_q ? "q" : "k", *k, at, rotated ? "rotated at p" : "not rotated",
                               is_q ? "the queries" : "the keys"),
                   "attention-scale", false, times_k});
    out.back().fitted = true;
    if (rotated) {
      out.push_back({fmt::format("cos and sin times {:.4g} (fitted at position {}): a RoPE magnitude factor (YaRN's "
                                 "attn_factor) the model does not declare",
                                 *k, at),
                     "rope", false, times_k});
      out.back().fitted = true;
    }
  };
  // A NoPE layer (SmolLM3's every fourth) passes q and k through; rotating it is the bug to name.
  if (!c.rotates(layer)) {
    out.push_back({"not rotated (a layer without positional encoding)", "", true, rotate(at_p, base, right, false)});
    if (in.baseline_only) return;
    out.push_back({fmt::format("rotated at p, though layer {} has no positional encoding (NoPE: layer l rotates "
                               "unless (l + 1) % {} == 0): every layer rotated, or the NoPE test wrong",
                               layer, c.nope_period),
                   "rope", false, rotate(at_p, base, right)});
    scaled_after(rotate(at_p, base, right, false), false);
    return;
  }
  out.push_back({"rotated at position p", "", true, rotate(at_p, base, right)});
  if (in.baseline_only) return;
  scaled_after(rotate(at_p, base, right), true);
  // A linear RoPE scaling the model does not declare for any layer (positions p / f: another model's
  // config, a context-extension flag left on).
  if (!c.rope_scaling.scales())
    for (const float f : {2.0f, 4.0f, 8.0f})
      out.push_back({fmt::format("rotated at p / {:g}: a linear RoPE scaling by {:g} the model does not declare", f, f),
                     "rope", false, rotate(at_p, base, right, true, 0, nullptr, true, RopeScaling{RopeScalingType::linear, f})});
  // Plain RoPE (no factors, no scaling) computed from a wrong angle table: pair i turned by cos of
  // cos_angle(i, p) and sin of sin_angle(i, p).
  if (!factors && !scaling.scales()) {
    const auto table = [&in, src, layer, heads, c, base, right](std::function<double(int, std::int64_t)> cos_angle,
                                                                std::function<double(int, std::int64_t)> sin_angle) {
      return [=, &in](std::int64_t p) {
        Row x = trace_row(in.actual, src, layer, p);
        const int d = c.head_dim, half = c.n_rot / 2;
        if (x.size() != std::size_t(heads) * std::size_t(d)) return Row{};
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < half; ++i) {
            float* head = x.data() + std::size_t(h) * std::size_t(d);
            const int a = right == ref::Pairing::norm ? 2 * i : i, b = right == ref::Pairing::norm ? 2 * i + 1 : i + half;
            const double x0 = head[a], x1 = head[b], cs = std::cos(cos_angle(i, p)), sn = std::sin(sin_angle(i, p));
            head[a] = float(x0 * cs - x1 * sn);
            head[b] = float(x0 * sn + x1 * cs);
          }
        return x;
      };
    };
    const auto theta = [base, n_rot = c.n_rot](int i, std::int64_t p) {
      return double(p) * std::pow(double(base), -2.0 * i / n_rot);
    };
    const auto theta_f16 = [theta](int i, std::int64_t p) { return double(rounded_16bit(float(theta(i, p)), false)); };
    out.push_back({"the angles p * base^(-2i/n_rot) rounded to f16 before cos and sin (an angle table in half "
                   "precision)",
                   "rope", false, table(theta_f16, theta_f16)});
    out.push_back({"sin taken at the next pair's angle (cos of angle i, sin of angle i + 1: the sin table one "
                   "frequency off)",
                   "rope", false, table(theta, [theta](int i, std::int64_t p) { return theta(i + 1, p); })});
  }
  // A q/k norm the model does not have (qwen3's), weight 1, before the rotation.
  if (!c.qk_norm)
    out.push_back({fmt::format("{} RMS-normalized per head (weight 1) before RoPE, though the model has no q/k norm",
                               is_q ? "q" : "k"),
                   "normalization", false, [&in, src, layer, heads, c, base, right, factors, scaling](std::int64_t p) {
                     const Row x = trace_row(in.actual, src, layer, p);
                     const auto d = std::size_t(c.head_dim);
                     if (x.size() != std::size_t(heads) * d) return x;
                     std::vector<double> xd(x.begin(), x.end());
                     for (std::size_t h = 0; h < std::size_t(heads); ++h) {
                       double ms = 0;
                       for (std::size_t i = 0; i < d; ++i) ms += xd[h * d + i] * xd[h * d + i];
                       const double inv = 1 / std::sqrt(ms / double(d) + double(c.rms_eps));
                       for (std::size_t i = 0; i < d; ++i) xd[h * d + i] *= inv;
                     }
                     ref::rope(xd.data(), heads, c.head_dim, c.n_rot, p, base, right, factors ? factors->data() : nullptr,
                               scaling);
                     return Row(xd.begin(), xd.end());
                   }});
  // A position counter that stops advancing: every position from k on rotated at k, k fitted at
  // the tap's last position (0 is "rotated at the start position 0" below).
  if (const TapInfo* tap = in.observed.find(name, layer); tap && tap->last_position() > 1) {
    const std::int64_t last = tap->last_position();
    const Row y = trace_row(in.observed, name, layer, last);
    std::int64_t stuck = -1;
    double best = INFINITY;
    for (std::int64_t k = 1; k < last && !y.empty(); ++k) {
      const Row r = rotate([k](std::int64_t) { return k; }, base, right)(last);
      if (r.size() != y.size()) break;
      if (const double e = row_metrics(r.data(), y.data(), std::int64_t(y.size())).nmse; e < best) best = e, stuck = k;
    }
    if (stuck > 0 && best < 1e-6) {
      out.push_back({fmt::format("every position from {0} on rotated at {0} (fitted at position {1}): the position "
                                 "counter stops advancing at {0}{2}",
                                 stuck, last, stuck == prompt ? ", the prompt's length: decode steps never advance it" : ""),
                     "rope", false, rotate([stuck](std::int64_t p) { return std::min(p, stuck); }, base, right)});
      out.back().fitted = true;
    }
  }
  const auto push_unrotated = [&](std::string variant) {
    Candidate unrotated{std::move(variant), "rope", false, rotate(at_p, base, right, false)};
    unrotated.takes = full_tap_name(src, layer);
    out.push_back(std::move(unrotated));
  };
  // In a model with NoPE layers, a rotating layer passed through is first the NoPE test's doing: it
  // ties with "rotated at position 0" below, the same numbers, and names the likelier code.
  if (c.nope_period > 0)
    push_unrotated(fmt::format("not rotated at all, as the NoPE layers are: layer {} rotates ((l + 1) % {} != 0), "
                               "the NoPE test wrong",
                               layer, c.nope_period));
  if (is_q)
    out.push_back({"the rotated q times the attention scale: q pre-scaled as a fused attention kernel expects, by "
                   "an engine whose attention scales the scores again",
                   "attention-scale", false, [rotated = rotate(at_p, base, right), c](std::int64_t p) {
                     Row y = rotated(p);
                     for (float& v : y) v *= c.attn_scale();
                     return y;
                   }});
  // q's RoPE given K's head count: it reads the batch as rows of n_head_kv heads, so head slot j
  // of the batch is rotated at the position of row j / n_head_kv, and slots past n_head_kv times
  // the batch's rows are left unrotated.
  if (is_q && c.n_head_kv < c.n_head)
    out.push_back({"q's RoPE given K's head count: the batch read as rows of n_head_kv heads, each head rotated at "
                   "the position of the row it falls in, the heads past n_head_kv x the batch's rows unrotated",
                   "rope", false, [&in, src, layer, c, base, right, factors, prompt](std::int64_t p) {
                     const Row x = trace_row(in.actual, src, layer, p);
                     if (x.size() != std::size_t(c.q_dim())) return Row{};
                     const std::int64_t step = in.prefill_chunk > 0 ? in.prefill_chunk : prompt;
                     const std::int64_t start = p < prompt ? p / step * step : p;
                     const std::int64_t rows = p < prompt ? std::min(step, prompt - start) : 1;
                     const auto d = std::size_t(c.head_dim);
                     std::vector<double> y(x.begin(), x.end());
                     for (int h = 0; h < c.n_head; ++h) {
                       const std::int64_t row = ((p - start) * c.n_head + h) / c.n_head_kv;
                       if (row < rows)
                         ref::rope(y.data() + std::size_t(h) * d, 1, c.head_dim, c.n_rot, start + row, base, right,
                                   factors ? factors->data() : nullptr, c.rope_scaling_of(layer));
                     }
                     return Row(y.begin(), y.end());
                   }});
  out.push_back({fmt::format("pairs taken the other way ({} instead of {})",
                             wrong == ref::Pairing::norm ? "adjacent NORM" : "half-split NEOX",
                             right == ref::Pairing::norm ? "adjacent NORM" : "half-split NEOX"),
                 "rope", false, rotate(at_p, base, wrong)});
  out.push_back({"rotated at the start position 0 instead of p (positions not passed per token)", "rope",
                 false, rotate([](std::int64_t) { return std::int64_t(0); }, base, right)});
  // The prompt's batch rotated at its start, decode steps right: the variant above but where the
  // decode steps' rows are judged too (replayed through a trace that does not record RoPE).
  out.push_back({"the prompt's rows rotated at the batch's start position, decode steps at p (prefill positions not "
                 "passed per token)",
                 "rope", false, rotate([prompt, chunk = in.prefill_chunk](std::int64_t p) {
                   return p >= prompt ? p : chunk > 0 ? p / chunk * chunk : 0;
                 }, base, right)});
  out.push_back({"rotated at p - 1 (off by one)", "rope", false,
                 rotate([](std::int64_t p) { return p - 1; }, base, right)});
  out.push_back({"rotated at p + 1 (off by one)", "rope", false,
                 rotate([](std::int64_t p) { return p + 1; }, base, right)});
  // A position table (cos/sin cache) of m entries indexed modulo its size: position m is rotated
  // as 0, so its row is the unrotated one; m read off the first such row past 1.
  if (const TapInfo* tap = in.observed.find(name, layer); tap && tap->n_rows > 2) {
    std::int64_t m = 0;
    const auto correct = rotate(at_p, base, right);
    for (std::int64_t p : tap->positions()) {
      const Row y = trace_row(in.observed, name, layer, p), x = trace_row(in.actual, src, layer, p), r = correct(p);
      const auto off = [&](const Row& z) { return row_metrics(z.data(), y.data(), std::int64_t(y.size())).nmse; };
      if (p > 1 && !y.empty() && y.size() == x.size() && y.size() == r.size() && off(x) * 100 < off(r)) {
        m = p;
        break;
      }
    }
    if (m > 0) {
      out.push_back({fmt::format("rotated at p mod {} (fitted: a cos/sin table of {} positions indexed modulo its "
                                 "size; position {} rotated as 0)",
                                 m, m, m),
                     "rope", false, rotate([m](std::int64_t p) { return p % m; }, base, right)});
      out.back().fitted = true;
    }
  }
  // Positions held in a 16-bit float (position ids cast to the activations' dtype): exact up to
  // 256 in bf16 and 2048 in f16, rounded to even steps past that.
  if (const TapInfo* tap = in.observed.find(name, layer); tap && tap->last_position() > 256)
    for (const bool bf16 : {true, false})
      if (bf16 || tap->last_position() > 2048)
        out.push_back({fmt::format("rotated at p rounded to {} (position ids cast to a 16-bit float: past {} they "
                                   "step by 2 and more)",
                                   bf16 ? "bf16" : "f16", bf16 ? 256 : 2048),
                       "rope", false, rotate([bf16](std::int64_t p) {
                         return std::int64_t(rounded_16bit(float(p), bf16));
                       }, base, right)});
  out.push_back({"rotated at 2p: RoPE applied twice", "rope", false,
                 rotate([](std::int64_t p) { return 2 * p; }, base, right)});
  out.push_back({"rotated at -p (the sine's sign flipped)", "rope", false,
                 rotate([](std::int64_t p) { return -p; }, base, right)});
  out.push_back({"rotated at the decode step index p - prompt length instead of p", "rope", false,
                 rotate([prompt](std::int64_t p) { return p >= prompt ? p - prompt : p; }, base, right)});
  if (const std::int64_t chunk = in.prefill_chunk; chunk > 0 && chunk < prompt)
    out.push_back({fmt::format("rotated at the position within its prefill chunk of {} (p mod {}) instead of p",
                               chunk, chunk),
                   "rope", false,
                   rotate([prompt, chunk](std::int64_t p) { return p < prompt ? p % chunk : p; }, base, right)});
  if (factors) {
    out.push_back({fmt::format("the frequency factors ({}) not applied", factors_tensor), "rope", false,
                   rotate(at_p, base, right, true, 0, nullptr, false)});
    auto inverted = std::make_shared<std::vector<float>>(*factors);
    for (float& f : *inverted) f = 1.0f / f;
    out.push_back({"the frequency factors multiplied into the angle instead of dividing it", "rope", false,
                   [keep = inverted, f = rotate(at_p, base, right, true, 0, inverted.get())](std::int64_t p) {
                     return f(p);
                   }});
    auto reversed = std::make_shared<std::vector<float>>(factors->rbegin(), factors->rend());
    out.push_back({"the frequency factors in reverse order (pair i divided by factor n_rot/2 - 1 - i)", "rope", false,
                   [keep = reversed, f = rotate(at_p, base, right, true, 0, reversed.get())](std::int64_t p) {
                     return f(p);
                   }});
  }
  // Every replay under another scaling, base, positions or factors keeps the rest as the layer has it.
  rope_scaling_candidates(
      {c, layer, name, in, factors_tensor, factors, base},
      [&](const RopeScaling& other, float b, std::function<std::int64_t(std::int64_t)> pos,
          const std::vector<float>* f, bool use_factors) { return rotate(pos, b, right, true, 0, f, use_factors, other); },
      out);
  if (c.nope_period == 0) push_unrotated("not rotated at all");
  // Some heads rotated, the others left as they came (a head loop's bound, a head count of the
  // other projection's): each head of the last row read as one or the other.
  if (const TapInfo* tap = in.observed.find(name, layer); tap && tap->n_rows > 1) {
    const std::int64_t last = tap->last_position();
    const Row y = trace_row(in.observed, name, layer, last), x = trace_row(in.actual, src, layer, last);
    const Row r = rotate(at_p, base, right)(last);
    const auto d = std::size_t(c.head_dim);
    std::vector<int> left;
    bool every_head = !y.empty() && y.size() == x.size() && r.size() == y.size() && y.size() == std::size_t(heads) * d;
    for (int h = 0; h < heads && every_head; ++h) {
      const auto at = std::size_t(h) * d;
      const auto nmse = [&](const Row& m) { return row_metrics(m.data() + at, y.data() + at, std::int64_t(d)).nmse; };
      // Each head's two readings apart by far more than the run's rounding (a 16-bit run's too).
      const double as_is = nmse(x), rotated = nmse(r);
      if (as_is * 1e3 < rotated && rotated > 1e-4) left.push_back(h);
      else every_head = rotated * 1e3 < as_is;
    }
    if (every_head && !left.empty() && int(left.size()) < heads) {
      const bool tail = left.front() == heads - int(left.size()) && left.back() == heads - 1;
      out.push_back({fmt::format("head{} {} of {} left unrotated{} (fitted at position {})", left.size() == 1 ? "" : "s",
                                 fmt::join(left, ", "), heads,
                                 tail ? ": the head loop stops short of the last" : "", last),
                     "rope", false,
                     [left, d, rotated = rotate(at_p, base, right), as_is = rotate(at_p, base, right, false)](std::int64_t p) {
                       Row row = rotated(p);
                       const Row came = as_is(p);
                       if (row.size() != came.size()) return Row{};
                       for (int h : left)
                         std::copy_n(came.begin() + std::ptrdiff_t(std::size_t(h) * d), d,
                                     row.begin() + std::ptrdiff_t(std::size_t(h) * d));
                       return row;
                     }});
      out.back().fitted = true;
    }
  }
  // gemma3's sliding layers have a base of their own: the other kind of layer's base wired in.
  const float other_kind = c.sliding(layer) ? c.rope_freq_base : c.rope_freq_base_swa;
  if (c.rope_freq_base_swa > 0 && c.sliding_window > 0 && other_kind != base)
    out.push_back({fmt::format("frequency base {:g} of the {} layers instead of this {} layer's {:g}", other_kind,
                               c.sliding(layer) ? "global" : "sliding", c.sliding(layer) ? "sliding" : "global", base),
                   "rope", false, rotate(at_p, other_kind, right)});
  for (float other : {10000.0f, 500000.0f, 1000000.0f, 100000.0f})
    if (other != base && !(c.rope_freq_base_swa > 0 && c.sliding_window > 0 && other == other_kind))
      out.push_back({fmt::format("frequency base {:g} instead of the model's {:g}", other, base), "rope",
                     false, rotate(at_p, other, right)});
  // A base nobody listed (a misread GGUF key): fitted to the actual rotation at the last
  // prompt position, where the angles are largest.
  const std::int64_t fit_at = std::max<std::int64_t>(prompt - 1, 1);
  const Row x = trace_row(in.actual, src, layer, fit_at), y = trace_row(in.observed, name, layer, fit_at);
  // (The fit knows no frequency factors or scaling: with them it would name a base that is not the bug.)
  if (const auto fitted = factors || scaling.scales() ? std::nullopt
                                                      : fit_rope_base(x, y, heads, c.head_dim, c.n_rot, fit_at, right);
      fitted && std::abs(*fitted / double(base) - 1) > 1e-5) {
    // A base stored or computed in 16 bits (1e6 is 999424 in bf16) is named so.
    const double in_bf16 = rounded_16bit(float(base), true), in_f16 = rounded_16bit(float(base), false);
    const auto near = [&](double v) { return v != double(base) && std::abs(*fitted / v - 1) < 1e-4; };
    const std::string why = near(in_bf16) ? fmt::format(": the base rounded to bf16 ({:g})", in_bf16)
                            : near(in_f16) ? fmt::format(": the base rounded to f16 ({:g})", in_f16)
                                           : "";
    const int digits = std::abs(*fitted / double(base) - 1) > 1e-3 ? 4 : 7;  // enough to tell it from the base
    out.push_back({fmt::format("frequency base {:.{}g} instead of the model's {:g} (fitted to the actual rotation){}",
                               *fitted, digits, base, why),
                   "rope", false, rotate(at_p, float(*fitted), right)});
    out.back().fitted = true;
  }
  // The inverse frequencies base^(-2i/n_rot) cast to 16 bits (a table made in the activations'
  // dtype): each pair's angle p times its rounded frequency, a factor per pair.
  for (const bool bf16 : {false, true}) {
    auto per_pair = std::make_shared<std::vector<float>>(std::size_t(c.n_rot / 2));
    for (int i = 0; i < c.n_rot / 2; ++i) {
      const float inv = float(std::pow(double(base), -2.0 * i / c.n_rot));
      const float rounded = rounded_16bit(inv, bf16);
      (*per_pair)[std::size_t(i)] = (factors ? (*factors)[std::size_t(i)] : 1.0f) * float(double(inv) / rounded);
    }
    out.push_back({fmt::format("the inverse frequencies base^(-2i/n_rot) rounded to {} (the frequency table cast to "
                               "16 bits)",
                               bf16 ? "bf16" : "f16"),
                   "rope", false, [keep = per_pair, f = rotate(at_p, base, right, true, 0, per_pair.get())](std::int64_t p) {
                     return f(p);
                   }});
  }
  // The exponent's denominator taken from another dimension: base^(-2i/F) = (base^(n_rot/F))^(-2i/n_rot).
  const std::pair<const char*, int> dims[] = {{"head_dim", c.head_dim}, {"n_embd", c.n_embd}, {"n_head * head_dim", c.q_dim()},
                                              {"n_head_kv * head_dim", c.kv_dim()}};
  for (std::size_t i = 0; i < std::size(dims); ++i) {
    const auto [what, f] = dims[i];
    bool repeated = f == c.n_rot || f <= 0;
    for (std::size_t k = 0; k < i; ++k) repeated = repeated || dims[k].second == f;
    if (!repeated)
      out.push_back({fmt::format("frequencies p * base^(-2i/{}) with {} = {} instead of n_rot = {}", what, what, f,
                                 c.n_rot),
                     "rope", false, rotate(at_p, float(std::pow(double(base), double(c.n_rot) / f)), right)});
  }
  for (int n_rot : {c.head_dim, c.n_rot / 2})
    if (n_rot > 0 && n_rot != c.n_rot && n_rot % 2 == 0)
      out.push_back({fmt::format("{} dimensions of each head rotated instead of {}", n_rot, c.n_rot), "rope", false,
                     rotate(at_p, base, right, true, n_rot)});
  // A partial rotation's slice taken from the wrong end: the head's last n_rot dimensions rotated,
  // the first ones passed through.
  if (c.n_rot < c.head_dim)
    out.push_back({fmt::format("the last {} dimensions of each head rotated instead of the first {}", c.n_rot, c.n_rot),
                   "rope", false, [&in, src, layer, heads, c, base, right, factors, scaling](std::int64_t p) {
                     Row row = trace_row(in.actual, src, layer, p);
                     if (row.size() != std::size_t(heads) * std::size_t(c.head_dim)) return row;
                     std::vector<double> slice(std::size_t(c.n_rot));
                     for (int h = 0; h < heads; ++h) {
                       float* tail = row.data() + std::size_t(h) * std::size_t(c.head_dim) + (c.head_dim - c.n_rot);
                       std::copy(tail, tail + c.n_rot, slice.begin());
                       ref::rope(slice.data(), 1, c.n_rot, c.n_rot, p, base, right, factors ? factors->data() : nullptr,
                                 scaling);
                       std::copy(slice.begin(), slice.end(), tail);
                     }
                     return row;
                   }});
}

}  // namespace tapdiff::diff
