#include "diff/observations.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <variant>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "diff/block_replay.hpp"
#include "diff/fitted_constants.hpp"
#include "diff/tap_graph.hpp"

namespace tapdiff::diff {
namespace {

double nmse_against(const Row& actual, const Row& model) {
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    err += (double(actual[i]) - model[i]) * (double(actual[i]) - model[i]);
    ref += double(model[i]) * model[i];
  }
  return ref > 0 ? err / ref : INFINITY;
}

bool fits_bf16(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits & 0xFFFFu) == 0;
}

bool fits_f16(float v) {
  const float m = std::fabs(v);
  if (m == 0) return true;
  if (!(m <= 65504.0f)) return false;
  if (m < 0x1p-14f) return std::ldexp(m, 24) == std::floor(std::ldexp(m, 24));  // a subnormal half
  std::uint32_t bits;
  std::memcpy(&bits, &m, sizeof bits);
  return (bits & 0x1FFFu) == 0;  // 10 of float's 23 mantissa bits
}

// A value whose mantissa needs more than 4 bits: fitting a 16-bit float says something about it
// (0, ±1, 0.5 or 0.75 fit every float type).
bool informative(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits & 0x07FFFFu) != 0;
}

// Every actual value a 16-bit float and not every expected one (a random float32 fits one in
// 8192 times), among them enough that could have missed: values stored in half precision by a
// producer whose trace says otherwise.
const char* rounded_to_16_bits(const Row& a, const Row& b) {
  if (b.size() < 16 || std::count_if(b.begin(), b.end(), informative) < 16) return nullptr;
  for (auto [fits, name] : {std::pair{&fits_bf16, "bfloat16"}, std::pair{&fits_f16, "float16"}})
    if (std::all_of(b.begin(), b.end(), fits) && !std::all_of(a.begin(), a.end(), fits)) return name;
  return nullptr;
}

// The shapes of B at one position that name no cause but narrow the search.
void degenerate_shapes(const Row& a, const Row& b, bool says_16_bits, Observations& o) {
  if (a.size() != b.size() || b.empty()) return;
  constexpr double kClose = 1e-4;
  const bool zero = std::all_of(b.begin(), b.end(), [](float v) { return v == 0; });
  if (zero) {
    o.lines.push_back("the actual values are all zero: never written, or never loaded");
    return;
  }
  if (std::all_of(b.begin(), b.end(), [&](float v) { return v == b.front(); })) {
    o.lines.push_back(fmt::format("every actual value is {:g}: a constant fill, not a computed row", b.front()));
    return;
  }
  if (const char* half = says_16_bits ? nullptr : rounded_to_16_bits(a, b)) {
    o.lines.push_back(fmt::format("every actual value is a {} number and not every expected one: values stored in 16 "
                                  "bits; if that is the producer's precision, its trace should say so (or diff "
                                  "--profile {})",
                                  half, half == std::string_view("float16") ? "f16" : "bf16"));
    return;
  }
  // A shape explains B only when it leaves far less than B's own error: a row 3e-4 off (a
  // slightly wrong attention row, a scale of 1.00001) is close to a sorted or scaled A by
  // accident.
  const double bar = std::min(kClose, 1e-2 * nmse_against(b, a));
  Row negated(a.size());
  std::transform(a.begin(), a.end(), negated.begin(), [](float v) { return -v; });
  if (nmse_against(b, negated) < bar) {
    o.lines.push_back("the actual values are the expected ones with the sign flipped");
    return;
  }
  if (const auto fitted = fit_scale(a, b)) {
    const double c = *fitted;
    Row scaled(a.size());
    std::transform(a.begin(), a.end(), scaled.begin(), [c](float v) { return float(c * v); });
    if (nmse_against(b, scaled) < bar) {
      o.lines.push_back(fmt::format("the actual values are the expected ones times {:.6g} (a scale factor)", c));
      o.scale = c;
      return;
    }
  }
  Row sa = a, sb = b;
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  if (nmse_against(sb, sa) < bar)
    o.lines.push_back("the actual values are the expected ones in another order (a permutation: an index or "
                      "layout error)");
}

// Each head's probabilities A's times one factor of its own, the factors not all 1: the
// softmax's normalizing sum taken over other terms (the rows' sums are the factors).
std::optional<std::pair<double, double>> per_head_factors(const Row& a, const Row& b, std::int64_t n_head) {
  if (n_head <= 0 || a.empty() || a.size() != b.size() || a.size() % std::size_t(n_head) != 0) return std::nullopt;
  const std::size_t keys = a.size() / std::size_t(n_head);
  double least = INFINITY, greatest = -INFINITY;
  for (std::size_t h = 0; h < std::size_t(n_head); ++h) {
    double ab = 0, aa = 0, largest = 0;
    for (std::size_t k = h * keys; k < (h + 1) * keys; ++k)
      ab += double(a[k]) * b[k], aa += double(a[k]) * a[k], largest = std::max(largest, double(std::fabs(b[k])));
    if (aa == 0) return std::nullopt;
    const double c = ab / aa;
    for (std::size_t k = h * keys; k < (h + 1) * keys; ++k)
      if (std::fabs(b[k] - c * a[k]) > 1e-4 * largest) return std::nullopt;
    least = std::min(least, c), greatest = std::max(greatest, c);
  }
  // Zero rows are a buffer never written; a factor near 1 is no finding.
  if (!(least > 1e-2) || (std::fabs(least - 1) < 1e-3 && std::fabs(greatest - 1) < 1e-3)) return std::nullopt;
  return std::make_pair(least, greatest);
}

// The heads a per-head tap's row holds, from the traces' hyperparameters (0 for other taps).
std::int64_t heads_in(const std::string& name, const HParams& hparams) {
  const auto count = [&](const char* key) {
    const auto it = hparams.find(key);
    return it != hparams.end() && std::holds_alternative<std::int64_t>(it->second) ? std::get<std::int64_t>(it->second)
                                                                                  : std::int64_t(0);
  };
  for (const char* q : {"attn_q", "attn_q_norm", "attn_q.rope", "attn.probs", "attn.out"})
    if (name == q) return count("n_head");
  for (const char* kv : {"attn_k", "attn_k_norm", "attn_k.rope", "attn_v", "kv.k", "kv.v"})
    if (name == kv) return count("n_head_kv");
  return 0;
}

// The error confined to some heads of a per-head row, the rest matching (within a hundredth of
// the threshold): which, as a sentence; "" when every head (or none) is off.
std::string heads_off(const Row& a, const Row& b, std::int64_t heads, double threshold) {
  if (heads < 2 || a.empty() || a.size() != b.size() || a.size() % std::size_t(heads) != 0) return "";
  const std::size_t width = a.size() / std::size_t(heads);
  std::vector<std::int64_t> off;
  double clean = 0;
  for (std::int64_t h = 0; h < heads; ++h) {
    const Row ha(a.begin() + std::ptrdiff_t(std::size_t(h) * width), a.begin() + std::ptrdiff_t(std::size_t(h + 1) * width));
    const Row hb(b.begin() + std::ptrdiff_t(std::size_t(h) * width), b.begin() + std::ptrdiff_t(std::size_t(h + 1) * width));
    const double e = nmse_against(hb, ha);
    if (e > threshold) off.push_back(h);
    else if (e <= 1e-2 * threshold) clean = std::max(clean, e);
    else return "";
  }
  if (off.empty() || std::int64_t(off.size()) == heads) return "";
  return fmt::format("the error is confined to head{} {} of {}: the other heads match (nmse up to {:.2g})",
                     off.size() == 1 ? "" : "s", runs_text(off), heads, clean);
}

// The largest nmse of t's rows before `position` (0 without any).
double largest_nmse_before(const TapComparison* t, std::int64_t position) {
  double largest = 0;
  if (t)
    for (const RowMetrics& row : t->rows)
      if (row.position < position && std::isfinite(row.nmse)) largest = std::max(largest, row.nmse);
  return largest;
}

}  // namespace

namespace {

// The ops by name: the global ones, then "layers 2-3's a, b; layer 2's c", the names each group
// of layers holds.
std::string ops_text(const std::vector<const TapInfo*>& ops) {
  std::vector<std::string> globals;
  std::vector<std::pair<std::string, std::vector<int>>> by_name;  // first appearance order
  for (const TapInfo* t : ops) {
    if (t->layer < 0) {
      globals.push_back(t->name);
      continue;
    }
    auto it = std::find_if(by_name.begin(), by_name.end(), [&](const auto& n) { return n.first == t->name; });
    if (it == by_name.end()) it = by_name.insert(by_name.end(), {t->name, {}});
    it->second.push_back(t->layer);
  }
  std::vector<std::pair<std::vector<int>, std::vector<std::string>>> groups;  // layers and their names
  for (auto& [name, layers] : by_name) {
    std::sort(layers.begin(), layers.end());
    auto g = std::find_if(groups.begin(), groups.end(), [&, &l = layers](const auto& x) { return x.first == l; });
    if (g == groups.end()) g = groups.insert(groups.end(), {layers, {}});
    g->second.push_back(name);
  }
  std::vector<std::string> parts;
  if (!globals.empty()) parts.push_back(fmt::format("{}", fmt::join(globals, ", ")));
  for (const auto& [layers, names] : groups) {
    const bool contiguous = layers.back() - layers.front() + 1 == int(layers.size());
    const std::string which = layers.size() == 1 ? fmt::format("layer {}'s", layers.front())
                              : contiguous       ? fmt::format("layers {}-{}'s", layers.front(), layers.back())
                                                 : fmt::format("layers {}'s", fmt::join(layers, ", "));
    parts.push_back(fmt::format("{} {}", which, fmt::join(names, ", ")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

// Where the actual trace lacks an input of the op (an engine that traces a few taps), the ops the
// expected trace records between the actual's recorded taps and this one hold the bug: the replay
// computes them from the recorded taps, and only recording them shows their own values. "" when
// every input is recorded.
std::string unrecorded_ops(const FirstDivergence& f, const TraceReader& a, const TraceReader& b) {
  const UnrecordedInputs gap = unrecorded_inputs(f.name, f.layer, b, a);
  if (gap.ops.empty()) return "";
  return fmt::format("the actual trace does not record {}: the bug is in one of those ops or in {} itself{}; {}",
                     ops_text(gap.ops), f.tap,
                     gap.recorded.empty() ? std::string()
                                          : fmt::format(", after {}, which agree{}", fmt::join(gap.recorded, ", "),
                                                        gap.recorded.size() == 1 ? "s" : ""),
                     gap.replayed()
                         ? "the replay computes them from the recorded taps, and recording them shows each op's own "
                           "values"
                         : fmt::format("they span {} layers, and the replay runs through at most {}: record the "
                                       "residual stream of each layer to replay each block",
                                       gap.layers, UnrecordedInputs::kMaxReplayedLayers));
}

Observations observe(const DiffResult& r, const FirstDivergence& f, const TraceReader& a, const TraceReader& b) {
  Observations o;
  o.lines.push_back(fmt::format("diverges at {}", position_pattern_text(f.pattern, f.position)));
  if (std::string line = unrecorded_ops(f, a, b); !line.empty()) o.lines.push_back(std::move(line));
  const TapComparison* t = find_tap(r, f.tap);
  // Rows before the first diverged one that pass only just (within a hundredth of the threshold
  // of it) are not intact: the bug may act there too, below the threshold. Unless the same tap
  // of another layer is about as far off there: that is the run's own noise (an engine with
  // 8-bit activations leaves every layer's rows at a good part of the threshold).
  const double before = largest_nmse_before(t, f.position);
  double noise = 0;
  for (const TapComparison& other : r.taps)
    if (other.name == f.name && other.layer != f.layer) noise = std::max(noise, largest_nmse_before(&other, f.position));
  const bool clean_before = !t || before < 1e-2 * t->threshold_nmse || before <= 2 * noise;
  if (!clean_before)
    o.lines.push_back(fmt::format("positions before {} pass, but not cleanly (nmse up to {:.2g}, the threshold "
                                  "{:.2g}): the error is there too, smaller",
                                  f.position, before, t->threshold_nmse));
  // Taps that RoPE and attention feed (layer 0's attention on, every later layer) are where a
  // lone intact first position points at them; before them it only says which tokens differ. In
  // lockstep every op ran on the expected inputs: only RoPE's and attention's own taps are fed.
  const bool rope_or_attention = f.name == "attn_q.rope" || f.name == "attn_k.rope" || f.name == "kv.k" ||
                                 f.name == "kv.v" || f.name == "attn.probs" || f.name == "attn.probs.summary" ||
                                 f.name == "attn.out";
  const bool before_attention =
      r.mode == DiffMode::lockstep
          ? !rope_or_attention
          : f.name == "token_embd" || (f.layer == 0 && (f.name == "attn_norm" || f.name == "attn_q" ||
                                                         f.name == "attn_k" || f.name == "attn_v" ||
                                                         f.name == "attn_q_norm" || f.name == "attn_k_norm"));
  if (clean_before && t && !t->rows.empty() && t->rows.front().position == 0 && f.position > 0)
    o.lines.push_back(before_attention ? fmt::format("position 0 intact (nmse {:.2g})", t->rows.front().nmse)
                                       : fmt::format("position 0 intact (nmse {:.2g}): RoPE, the attention scale and "
                                                     "the KV cache leave a lone first position untouched",
                                                     t->rows.front().nmse));
  // One GEMM in the prefill, one matvec in decode: not a mixture of experts' per-expert products or their sum.
  const bool experts = a.metadata().hparams.count("n_expert") > 0 &&
                       (f.name == "ffn_down" || f.name == "ffn_gate_exps" || f.name == "ffn_up_exps");
  if (clean_before && f.position >= a.metadata().prompt_length && f.position > 0)
    o.lines.push_back(fmt::format("the prompt (positions 0..{}) is intact: the first decode step is the first to "
                                  "diverge{}",
                                  a.metadata().prompt_length - 1,
                                  tap_class(f.name) == "projection" && !experts
                                      ? "; a projection right in the batched prefill and wrong in decode points at "
                                        "the decode path's matrix-vector kernel (its loop bounds, tail, reduction or "
                                        "inline weight decoding), which the prompt's GEMM does not run"
                                      : ""));
  if (f.metrics.nonfinite > f.metrics.nonfinite_expected)
    o.lines.push_back(fmt::format("{} non-finite values appear here while every input is finite", f.metrics.nonfinite));
  const Row ra = trace_row(a, f.name, f.layer, f.position), rb = trace_row(b, f.name, f.layer, f.position);
  const std::string& precision = b.metadata().precision;
  degenerate_shapes(ra, rb, precision == "f16" || precision == "bf16", o);
  if (t)
    if (std::string line = heads_off(ra, rb, heads_in(f.name, a.metadata().hparams), t->threshold_nmse); !line.empty())
      o.lines.push_back(std::move(line));
  if (const TapInfo* probs = f.name == "attn.probs" ? b.find(f.name, f.layer) : nullptr;
      probs && probs->row_shape.size() == 2)
    if ((o.head_factors = per_head_factors(ra, rb, probs->row_shape[0])))
      o.lines.push_back(fmt::format("each head's probabilities are the expected ones times a factor of its own, "
                                    "{:.4g} to {:.4g}: rows that sum to those instead of 1",
                                    o.head_factors->first, o.head_factors->second));
  if (f.diverged_positions.size() >= 2 && t) {
    // B - A the same vector at every diverged position: an additive constant.
    std::vector<double> first_delta;
    double spread = 0, size = 0;
    for (std::size_t k = 0; k < std::min<std::size_t>(f.diverged_positions.size(), 8); ++k) {
      const auto p = f.diverged_positions[k];
      const Row xa = trace_row(a, f.name, f.layer, p), xb = trace_row(b, f.name, f.layer, p);
      if (xa.empty() || xa.size() != xb.size()) break;
      std::vector<double> delta(xa.size());
      for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = double(xb[i]) - xa[i];
      if (first_delta.empty()) {
        first_delta = delta;
        for (double d : delta) size += d * d;
      } else {
        for (std::size_t i = 0; i < delta.size(); ++i) spread += (delta[i] - first_delta[i]) * (delta[i] - first_delta[i]);
      }
    }
    if (size > 0 && spread < 1e-4 * size) {
      o.constant_offset = true;
      o.lines.push_back("the error is the same vector at every diverged position: a constant offset per row");
    }
  }
  // The logit most off is the token fed at this position: with a tied head its row is the
  // embedding's, which a lookup handing out a view, then written in place, changes.
  if (const auto& tokens = b.metadata().tokens; f.name == "output" && f.metrics.worst_index >= 0 &&
                                                 f.position < std::int64_t(tokens.size()) &&
                                                 tokens[std::size_t(f.position)] == f.metrics.worst_index)
    o.lines.push_back(fmt::format("the logit most off is token {}'s, the token fed at position {}: its row of the "
                                  "head (the embedding's, where the head is tied) may have been written, an in-place "
                                  "op on a view of the embedding row",
                                  f.metrics.worst_index, f.position));
  return o;
}

}  // namespace tapdiff::diff
