#include "diff/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "diff/hypotheses.hpp"
#include "diff/tap_graph.hpp"

namespace tapdiff::diff {
namespace {

using Row = std::vector<float>;

constexpr std::size_t kEvaluatedPositions = 4;  // replay at the first few diverged positions
constexpr double kReproduces = 1e-3;            // residual nmse under which a variant explains B
constexpr double kBetterThanBaseline = 0.01;    // ... and at most this fraction of the baseline's


// When no hypothesis reproduces the values, the tap itself says where to look.
std::string class_of_tap(const std::string& name) {
  const auto cls = tap_class(name);
  if (cls == "rope") return "rope";
  if (cls == "cache") return "kv-cache";
  if (cls == "norm") return "normalization";
  if (cls == "embedding") return "dequantization";
  if (name == "attn.probs" || name == "attn.out") return "attention";
  if (cls == "projection" || cls == "logits") return "matmul";
  return "unexplained";
}

double residual_nmse(const std::vector<Row>& actual, const std::vector<std::vector<float>>& replayed) {
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (replayed[i].size() != actual[i].size()) return INFINITY;
    for (std::size_t k = 0; k < actual[i].size(); ++k) {
      const double d = double(actual[i][k]) - replayed[i][k];
      if (!std::isfinite(d)) return INFINITY;
      err += d * d;
      ref += double(actual[i][k]) * actual[i][k];
    }
  }
  return ref > 0 ? err / ref : err;
}

const TapComparison* find_tap(const DiffResult& r, const std::string& full_name) {
  for (const auto& t : r.taps)
    if (t.full_name == full_name) return &t;
  return nullptr;
}

// Signatures: position 0 intact or not, the position pattern, a constant offset per row.
std::vector<std::string> signatures(const DiffResult& r, const FirstDivergence& f, const TraceReader& a,
                                    const TraceReader& b) {
  std::vector<std::string> out;
  out.push_back(fmt::format("diverges at {}", position_pattern_text(f.pattern, f.position)));
  const TapComparison* t = find_tap(r, f.tap);
  if (t && !t->rows.empty() && t->rows.front().position == 0 && f.position > 0)
    out.push_back(fmt::format("position 0 intact (nmse {:.2g}): RoPE, the attention scale and the "
                              "KV cache leave a lone first position untouched",
                              t->rows.front().nmse));
  if (f.position >= a.metadata().prompt_length && f.position > 0)
    out.push_back(fmt::format("the prompt (positions 0..{}) is intact: the first decode step is the first to diverge",
                              a.metadata().prompt_length - 1));
  if (f.metrics.nonfinite > f.metrics.nonfinite_expected)
    out.push_back(fmt::format("{} non-finite values appear here while every input is finite", f.metrics.nonfinite));
  if (f.diverged_positions.size() >= 2 && t) {
    // B - A the same vector at every diverged position: an additive constant, i.e. a bias.
    const TapInfo& ia = a.tap(f.name, f.layer);
    const TapInfo& ib = b.tap(f.name, f.layer);
    std::vector<double> first_delta;
    double spread = 0, size = 0;
    for (std::size_t k = 0; k < std::min<std::size_t>(f.diverged_positions.size(), 8); ++k) {
      const auto p = f.diverged_positions[k];
      const TapRows ra = a.read(ia, p, p), rb = b.read(ib, p, p);
      if (ra.size() != 1 || rb.size() != 1) break;
      std::vector<double> delta(std::size_t(ra.row_size));
      for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = double(rb.row(0)[i]) - ra.row(0)[i];
      if (first_delta.empty()) {
        first_delta = delta;
        for (double d : delta) size += d * d;
      } else {
        for (std::size_t i = 0; i < delta.size(); ++i) spread += (delta[i] - first_delta[i]) * (delta[i] - first_delta[i]);
      }
    }
    if (size > 0 && spread < 1e-4 * size)
      out.push_back("the error is the same vector at every diverged position: a constant offset per row (a bias)");
  }
  return out;
}

}  // namespace

std::string code_area(const std::string& cls) {
  if (cls == "kv-cache") return "the KV cache bookkeeping: cache length, write offset, the slice attention reads";
  if (cls == "rope") return "the RoPE call: the positions array, the pairing (NORM adjacent vs NEOX half-split), the frequency base";
  if (cls == "bias") return "the bias add after the projection GEMM and how the bias tensor is loaded";
  if (cls == "matmul-layout") return "the GEMM call site: op flags and leading dimensions";
  if (cls == "attention-mask") return "the causal mask of the attention kernel";
  if (cls == "attention-scale") return "the softmax scale of the attention kernel";
  if (cls == "gqa-mapping") return "the kv-head index computed for each query head";
  if (cls == "dequantization") return "the dequantization kernel of this tensor's type";
  if (cls == "weight-loading") return "the weight loader: each tensor's byte size, offset and upload into its buffer";
  if (cls == "shape") return "the config value that sizes this op's buffers and GEMM dimensions";
  if (cls == "normalization") return "RMSNorm: the weight multiply and epsilon";
  if (cls == "token-sequence") return "the generation loop's token bookkeeping";
  if (cls == "non-finite") return "the first op producing NaN/Inf (overflow in f16, division by zero, uninitialized memory)";
  return "the op that produces this tap";
}

Diagnosis diagnose(const DiffResult& r, const TraceReader& a, const TraceReader& b,
                   const std::string& model_path) {
  return diagnose_at(r, *r.first, a, b, b, model_path);
}

Diagnosis diagnose_at(const DiffResult& r, const FirstDivergence& f, const TraceReader& a, const TraceReader& b,
                      const TraceReader& inputs, const std::string& model_path) {
  Diagnosis d;
  if (f.tap == "tokens") {
    d.bug_class = "token-sequence";
    d.signatures.push_back(fmt::format("every tap agrees on positions 0..{}, then the tokens differ", f.position - 1));
    d.explanation = fmt::format(
        "The two runs computed the same values for every common position but continued with different "
        "tokens at position {}: the actual run's generation loop fed or recorded a token other than the one its "
        "own logits chose. Look at {}.",
        f.position, code_area(d.bug_class));
    return d;
  }
  d.signatures = signatures(r, f, a, b);
  if (f.metrics.nonfinite > f.metrics.nonfinite_expected) {
    d.bug_class = "non-finite";
    d.explanation = fmt::format("{} at position {} is the first tap holding NaN/Inf while its inputs are finite. "
                                "Look at {}.", f.tap, f.position, code_area(d.bug_class));
    return d;
  }

  try {
    ReplayModel model(model_path.empty() ? a.metadata().model_path : model_path, a.metadata().model_sha256);
    const std::int64_t n_ctx = a.metadata().dims ? a.metadata().dims->n_ctx : std::int64_t(a.metadata().tokens.size());
    ReplayInputs in{inputs, model, a.metadata().prompt_length, n_ctx};
    const auto candidates = candidates_for(f.name, f.layer, in);

    std::vector<std::int64_t> positions(f.diverged_positions.begin(),
                                        f.diverged_positions.begin() +
                                            std::ptrdiff_t(std::min(kEvaluatedPositions, f.diverged_positions.size())));
    std::vector<Row> actual;
    const TapInfo& ib = b.tap(f.name, f.layer);
    for (auto p : positions) {
      const TapRows rows = b.read(ib, p, p);
      actual.emplace_back(rows.row(0), rows.row(0) + rows.row_size);
    }
    std::vector<std::pair<double, const Candidate*>> scored;
    for (const auto& c : candidates) {
      std::vector<std::vector<float>> replayed;
      for (auto p : positions) replayed.push_back(c.replay(p));
      const double residual = residual_nmse(actual, replayed);
      if (c.baseline)
        d.baseline_residual = residual;
      else
        scored.emplace_back(residual, &c);
    }
    std::stable_sort(scored.begin(), scored.end(), [](auto& x, auto& y) { return x.first < y.first; });
    for (std::size_t i = 0; i < scored.size() && d.runners_up.size() < 3; ++i)
      if (i > 0 || !(scored[0].first <= kReproduces && scored[0].first <= kBetterThanBaseline * d.baseline_residual))
        d.runners_up.push_back({scored[i].second->variant, scored[i].first});
    if (!scored.empty() && scored[0].first <= kReproduces &&
        scored[0].first <= kBetterThanBaseline * d.baseline_residual) {
      d.bug_class = scored[0].second->bug_class;
      d.variant = scored[0].second->variant;
      d.residual = scored[0].first;
    }
  } catch (const std::exception& e) {
    d.signatures.push_back(fmt::format("hypothesis replay skipped: {}", e.what()));
  }

  const std::string where = f.layer >= 0 ? fmt::format("{} at layer {}", f.name, f.layer) : f.name;
  if (d.variant.empty()) {
    d.bug_class = class_of_tap(f.name);
    d.explanation = fmt::format(
        "{} first diverges at position {} (nmse {:.3g}), and no replayed hypothesis reproduces it (the correct "
        "computation from the actual run's own inputs leaves a residual of {:.3g}). Look at {}.",
        where, f.position, f.metrics.nmse, d.baseline_residual, code_area(d.bug_class));
  } else {
    d.explanation = fmt::format(
        "{} at position {} is reproduced by the hypothesis \"{}\" (residual {:.2g}; the correct computation "
        "from the same inputs leaves {:.2g}). Look at {}.",
        where, f.position, d.variant, d.residual, d.baseline_residual, code_area(d.bug_class));
  }
  return d;
}

}  // namespace tapdiff::diff
