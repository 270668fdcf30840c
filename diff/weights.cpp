#include "diff/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <map>

#include "diff/block_structure.hpp"
#include "diff/diagnose.hpp"
#include "diff/metrics.hpp"
#include "diff/replay_model.hpp"
#include "diff/weight_variants.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {
namespace {

constexpr std::int64_t kChunkRows = 1024;  // full rows read at a time

// How far an element may move when a program rounds weights to its precision: a relative
// step of the format's rounding, and an absolute floor for its subnormals.
struct WeightTolerance {
  double rel = 0;
  double abs = 0;
};

WeightTolerance tolerance_for(const std::string& precision) {
  if (precision == "f16") return {0x1.0p-11, 0x1.0p-25};
  if (precision == "bf16") return {0x1.0p-8, 0x1.0p-133};
  return {0x1.0p-22, 0x1.0p-149};  // f32 (and f64): a dequantizer's own rounding
}

WeightTolerance coarser(WeightTolerance a, WeightTolerance b) {
  return {std::max(a.rel, b.rel), std::max(a.abs, b.abs)};
}

bool close(float a, float b, const WeightTolerance& tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(double(b) - double(a)) <= tol.rel * std::fabs(double(a)) + tol.abs;
}

bool rows_close(const float* a, const float* b, std::int64_t n, const WeightTolerance& tol) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!close(a[i], b[i], tol)) return false;
  return true;
}

// Statistics of two rows agree when the rounding of each element could explain the gap.
bool stats_close(const WeightRowStats& a, const WeightRowStats& b, std::int64_t n,
                 const WeightTolerance& tol) {
  if (a.hash == b.hash) return true;
  if (a.nonfinite != b.nonfinite) return false;
  // Sums beyond float32's range do not survive the encoding: only equal hashes match then.
  if (!std::isfinite(a.sum_squares) || !std::isfinite(b.sum_squares)) return false;
  if (!close(a.min, b.min, tol) || !close(a.max, b.max, tol)) return false;
  const double norm1 = std::sqrt(double(n) * a.sum_squares);  // bounds Σ|a|
  const double encode = 1e-12;  // the (hi, lo) float pair keeps about 48 bits
  if (std::fabs(b.sum - a.sum) > tol.rel * norm1 + double(n) * tol.abs + encode * (norm1 + std::fabs(a.sum)))
    return false;
  const double sq_tol = (2 * tol.rel + tol.rel * tol.rel) * a.sum_squares +
                        2 * double(n) * tol.abs * std::sqrt(a.sum_squares / std::max<double>(1, n)) +
                        encode * a.sum_squares;
  return std::fabs(b.sum_squares - a.sum_squares) <= sq_tol;
}

// Without the row's values, what its statistics prove: ‖b − a‖ ≥ |‖b‖ − ‖a‖| bounds the nmse,
// and max |b − a| ≥ the shift of the extremes bounds the max abs error, both from below.
RowMetrics stats_lower_bounds(const WeightRowStats& a, const WeightRowStats& b) {
  RowMetrics m;
  const double gap = std::sqrt(b.sum_squares) - std::sqrt(a.sum_squares);
  m.nmse = a.sum_squares > 0 ? gap * gap / a.sum_squares : gap * gap;
  m.max_abs = std::max(std::fabs(double(b.max) - a.max), std::fabs(double(b.min) - a.min));
  m.nonfinite = b.nonfinite;
  m.nonfinite_expected = a.nonfinite;
  m.cosine = NAN;  // unknown from statistics
  return m;
}

bool zero_stats(const WeightRowStats& s) {
  return s.nonfinite == 0 && s.min == 0 && s.max == 0 && s.sum == 0 && s.sum_squares == 0;
}

// Load order of a GGUF weight name (the order the programs record them in).
std::pair<int, int> load_order(const std::string& name) {
  static const std::vector<std::string> kLayerOrder = {
      "attn_norm.weight", "attn_q.weight", "attn_k.weight",   "attn_v.weight",
      "attn_q.bias",      "attn_k.bias",   "attn_v.bias",     "attn_q_norm.weight", "attn_k_norm.weight",
      "attn_output.weight", "post_attention_norm.weight",
      "ffn_norm.weight",  "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "post_ffw_norm.weight"};
  if (name == "token_embd.weight") return {-1, 0};
  if (name == "rope_freqs.weight") return {-1, 1};
  if (name == "rope_factors_long.weight") return {-1, 2};
  if (name == "rope_factors_short.weight") return {-1, 3};
  if (name == "output_norm.weight") return {1 << 20, 0};
  if (name == "output.weight") return {1 << 20, 1};
  int layer = 0, consumed = 0;
  if (std::sscanf(name.c_str(), "blk.%d.%n", &layer, &consumed) == 1 && consumed > 0) {
    const auto it = std::find(kLayerOrder.begin(), kLayerOrder.end(), name.substr(std::size_t(consumed)));
    return {layer, int(it - kLayerOrder.begin())};
  }
  return {1 << 21, 0};
}

// The weight taps of one trace for one tensor.
struct TensorTaps {
  const TapInfo* full = nullptr;   // weight.<name>
  const TapInfo* stats = nullptr;  // weight_stats.<name>
  std::int64_t rows() const {
    if (stats) return stats->n_rows;
    return full && full->n_rows > 0 ? full->last_position() + 1 : 0;
  }
  std::int64_t cols() const { return full ? full->row_size : 0; }
};

std::map<std::string, TensorTaps> weight_taps_of(const TraceReader& r) {
  std::map<std::string, TensorTaps> out;
  for (const TapInfo& t : r.taps()) {
    if (auto tensor = weight_tap_tensor(t.name)) out[*tensor].full = &t;
    else if (t.name.rfind(kWeightStatsTapPrefix, 0) == 0)
      out[t.name.substr(kWeightStatsTapPrefix.size())].stats = &t;
  }
  return out;
}

// One tensor as a trace describes it: full rows by row index, statistics of every row.
struct TensorView {
  std::map<std::int64_t, std::vector<float>> full;  // row -> values
  std::vector<WeightRowStats> stats;                // empty without a stats tap
};

TensorView read_view(const TraceReader& r, const TensorTaps& t, std::int64_t first_row,
                     std::int64_t last_row) {
  TensorView v;
  if (t.full) {
    const TapRows rows = r.read(*t.full, first_row, last_row);
    for (std::size_t i = 0; i < rows.size(); ++i)
      v.full[rows.positions[i]] = std::vector<float>(rows.row(i), rows.row(i) + rows.row_size);
  }
  if (t.stats) {
    const TapRows rows = r.read(*t.stats, first_row, last_row);
    v.stats.resize(std::size_t(last_row - first_row + 1));
    for (std::size_t i = 0; i < rows.size(); ++i)
      v.stats[std::size_t(rows.positions[i] - first_row)] = decode_weight_stats(rows.row(i));
  }
  return v;
}

const std::vector<float>* full_row(const TensorView& v, std::int64_t row) {
  const auto it = v.full.find(row);
  return it == v.full.end() ? nullptr : &it->second;
}

// Row `row`'s statistics, from the stats tap or computed from a full row.
std::optional<WeightRowStats> row_stats(const TensorView& v, std::int64_t row, std::int64_t first_row,
                                        std::int64_t cols) {
  if (!v.stats.empty()) return v.stats[std::size_t(row - first_row)];
  if (const auto* f = full_row(v, row)) return weight_row_stats(f->data(), cols);
  return std::nullopt;
}

// Per-row verdicts of one tensor.
struct RowVerdicts {
  std::vector<std::int64_t> compared, differing, zero_in_actual;
  double max_abs = 0;
  bool stats_only = false;  // some compared row had no full values on both sides
};

void compare_rows(const TensorView& a, const TensorView& b, std::int64_t first_row,
                  std::int64_t last_row, std::int64_t cols, const WeightTolerance& tol,
                  RowVerdicts& out) {
  for (std::int64_t r = first_row; r <= last_row; ++r) {
    const auto* fa = full_row(a, r);
    const auto* fb = full_row(b, r);
    bool differs = false, zero = false;
    if (fa && fb) {
      differs = !rows_close(fa->data(), fb->data(), cols, tol);
      zero = std::all_of(fb->begin(), fb->end(), [](float x) { return x == 0.0f; });
      for (std::int64_t i = 0; i < cols; ++i)
        if (std::isfinite((*fa)[std::size_t(i)]) && std::isfinite((*fb)[std::size_t(i)]))
          out.max_abs = std::max(out.max_abs, std::fabs(double((*fb)[std::size_t(i)]) - (*fa)[std::size_t(i)]));
    } else {
      const auto sa = row_stats(a, r, first_row, cols), sb = row_stats(b, r, first_row, cols);
      if (!sa || !sb) continue;
      out.stats_only = true;
      differs = !stats_close(*sa, *sb, cols, tol);
      zero = zero_stats(*sb);
    }
    out.compared.push_back(r);
    if (differs) out.differing.push_back(r);
    if (zero) out.zero_in_actual.push_back(r);
  }
}

// "rows 0..149 match, rows 151.. are zero (row 150 partly)", or a count.
std::string row_summary(const RowVerdicts& v, std::int64_t rows) {
  if (v.differing.empty()) return fmt::format("all {} compared rows match", v.compared.size());
  const std::int64_t first = v.differing.front();
  const bool all_zero = v.zero_in_actual.size() == v.compared.size();
  if (all_zero) return fmt::format("all {} compared rows are zero", v.compared.size());
  // The smallest row from which every compared row of the actual is zero.
  std::int64_t zero_from = rows;
  for (auto it = v.compared.rbegin(); it != v.compared.rend(); ++it) {
    if (!std::binary_search(v.zero_in_actual.begin(), v.zero_in_actual.end(), *it)) break;
    zero_from = *it;
  }
  // Rows before `first` match by definition; the tail is the story when it starts at or
  // right after the first differing row (that row cut part-way).
  if (first > 0 && zero_from < rows && zero_from <= first + 1)
    return fmt::format("rows 0..{} match, rows {}.. are zero{}", first - 1, zero_from,
                       zero_from == first + 1 ? fmt::format(" (row {} partly)", first) : "");
  return fmt::format("{} of {} compared rows differ, the first at row {}", v.differing.size(),
                     v.compared.size(), first);
}

PositionPattern pattern_of(const RowVerdicts& v) {
  if (v.differing.empty()) return PositionPattern::none;
  if (v.differing.size() == v.compared.size()) return PositionPattern::all;
  const auto tail = std::count_if(v.compared.begin(), v.compared.end(),
                                  [&](std::int64_t r) { return r >= v.differing.front(); });
  return std::size_t(tail) == v.differing.size() ? PositionPattern::from : PositionPattern::some;
}

// How well a replayed tensor explains the actual one: rows explained, and the nmse over the
// full rows the actual holds.
struct VariantScore {
  std::int64_t explained = 0;
  double residual = 0;
};

VariantScore score_variant(const WeightVariant& w, const TraceReader& b, const TensorTaps& tb,
                           std::int64_t rows, std::int64_t cols, const WeightTolerance& tol) {
  VariantScore s;
  double err = 0, ref = 0;
  for (std::int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const std::int64_t r1 = std::min(rows, r0 + kChunkRows) - 1;
    const TensorView v = read_view(b, tb, r0, r1);
    for (std::int64_t r = r0; r <= r1; ++r) {
      if (r < w.rows_predicted.first || r >= w.rows_predicted.second) {
        ++s.explained;  // bytes outside the tensor: whatever the program found there
        continue;
      }
      const float* replayed = w.values.data() + r * cols;
      if (const auto* f = full_row(v, r)) {
        s.explained += rows_close(replayed, f->data(), cols, tol);
        for (std::int64_t i = 0; i < cols; ++i) {
          const double x = (*f)[std::size_t(i)], d = x - replayed[i];
          if (std::isfinite(d)) {
            err += d * d;
            ref += x * x;
          } else if (!(std::isnan(x) && std::isnan(replayed[i])) && x != replayed[i]) {
            err = INFINITY;
          }
        }
      } else if (!v.stats.empty()) {
        s.explained += stats_close(weight_row_stats(replayed, cols), v.stats[std::size_t(r - r0)], cols, tol);
      }
    }
  }
  s.residual = ref > 0 ? err / ref : err;
  return s;
}

// Tensors of `type` other than `tensor` whose every compared row matches.
std::int64_t matching_of_type(const ReplayModel& model, GgmlType type, const std::string& tensor,
                              const std::vector<WeightComparison>& compared) {
  std::int64_t n = 0;
  for (const WeightComparison& w : compared) {
    const GgufTensorInfo* t = model.file().find_tensor(w.tensor);
    n += w.tensor != tensor && !w.differs() && w.compared_rows > 0 && t && t->type == type;
  }
  return n;
}

// Tensors of `type` other than `tensor` that differ, and tensors of other types that match:
// every tensor of one type wrong while the others load right points at that type's decoder.
bool only_this_type_differs(const ReplayModel& model, GgmlType type, const std::string& tensor,
                            const std::vector<WeightComparison>& compared) {
  std::int64_t same_type_differing = 0, other_types_matching = 0;
  for (const WeightComparison& w : compared) {
    const GgufTensorInfo* t = model.file().find_tensor(w.tensor);
    if (!t || w.tensor == tensor || w.compared_rows == 0) continue;
    if (t->type == type) {
      if (!w.differs()) return false;
      ++same_type_differing;
    } else {
      other_types_matching += !w.differs();
    }
  }
  return same_type_differing > 0 && other_types_matching > 0;
}

// A differing row the actual trace holds in full, from the middle of the differing ones (the
// first and last may hold bytes from outside the tensor), and its values.
std::optional<std::pair<std::int64_t, std::vector<float>>> middle_full_differing_row(const TraceReader& b,
                                                                                    const TensorTaps& tb,
                                                                                    const RowVerdicts& v) {
  const std::size_t n = v.differing.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t r = v.differing[(n / 2 + i) % n];
    const TensorView view = read_view(b, tb, r, r);
    if (const auto* f = full_row(view, r)) return std::make_pair(r, *f);
  }
  return std::nullopt;
}

// How the first differing rows the actual trace holds in full differ from the correct decode,
// block by block (decoder_structure).
std::string differing_rows_structure(const std::vector<float>& correct, GgmlType type, const TraceReader& b,
                                     const TensorTaps& tb, const RowVerdicts& v, std::int64_t cols) {
  constexpr std::size_t kRowsRead = 64;
  Rows expected, actual;
  for (std::size_t i = 0; i < v.differing.size() && actual.size() < kRowsRead; ++i) {
    const std::int64_t r = v.differing[i];
    const TensorView view = read_view(b, tb, r, r);
    if (const auto* f = full_row(view, r)) {
      expected.emplace_back(correct.begin() + r * cols, correct.begin() + (r + 1) * cols);
      actual.push_back(*f);
    }
  }
  return decoder_structure(expected, actual, type);
}

Diagnosis diagnose_weight(const std::string& tensor, const RowVerdicts& v, const WeightComparison& c,
                          const std::vector<WeightComparison>& all, const TraceReader& a,
                          const TraceReader& b, const TensorTaps& tb, const WeightTolerance& tol,
                          const std::string& model_path) {
  Diagnosis d;
  d.signatures.push_back(c.summary);
  d.signatures.push_back(v.stats_only ? fmt::format("compared by per-row statistics ({} rows) and sampled full rows; "
                                                    "at rows without values, nmse and max abs are lower "
                                                    "bounds from the statistics",
                                                    c.compared_rows)
                                      : fmt::format("compared every value of {} rows of {}", c.compared_rows, c.cols));
  const std::int64_t compared = std::int64_t(v.compared.size());
  std::string wrong_type;  // the GGUF type whose every tensor, and no other type's, differs
  std::string shape;       // how its blocks differ, where they differ as only a decoder's would
  std::int64_t same_type_matching = 0;  // other tensors of its type that decode right
  try {
    ReplayModel model(model_path.empty() ? a.metadata().model_path : model_path, a.metadata().model_sha256,
                      a.metadata().hparams);
    const GgufTensorInfo* t = model.tensor(tensor);
    if (!t) throw std::invalid_argument(fmt::format("{} has no tensor {}", model.file().path(), tensor));
    if (std::int64_t(t->n_elements) != c.rows * c.cols)
      throw std::invalid_argument(fmt::format("{} holds {} elements, the trace {} x {}", tensor, t->n_elements,
                                              c.rows, c.cols));
    d.signatures.push_back(fmt::format("GGUF type {}, {} bytes", ggml_type_name(t->type), t->n_bytes));
    std::vector<std::pair<VariantScore, const WeightVariant*>> scored;
    std::vector<WeightVariant> variants = weight_variants(*t);
    for (auto& mixup : loader_mixups(*t, model.file())) variants.push_back(std::move(mixup));
    for (const WeightVariant& w : variants) {
      const VariantScore s = score_variant(w, b, tb, c.rows, c.cols, tol);
      if (w.baseline) d.baseline_residual = s.residual;
      else scored.emplace_back(s, &w);
      if (w.baseline) shape = differing_rows_structure(w.values, t->type, b, tb, v, c.cols);
    }
    // Most rows explained first. Among variants explaining every row the list order decides
    // (the specific decodes before "all zero": in f16 a Q8_0 scale read as bf16 rounds to 0).
    std::stable_sort(scored.begin(), scored.end(), [&](const auto& x, const auto& y) {
      if (x.first.explained != y.first.explained) return x.first.explained > y.first.explained;
      return x.first.explained < compared && x.first.residual < y.first.residual;
    });
    // A decoder bug hits every tensor of its type: when others of this type decode right, a
    // loader variant that explains every row as well is the better account (in f16 a Q8_0
    // scale read as bf16 flushes to zero, like a buffer never filled).
    if (const std::int64_t same = matching_of_type(model, t->type, tensor, all); same > 0) {
      d.signatures.push_back(fmt::format("{} other {} tensors match: the {} decoder they go through works", same,
                                         ggml_type_name(t->type), ggml_type_name(t->type)));
      same_type_matching = same;
      std::stable_partition(scored.begin(), scored.end(), [&](const auto& x) {
        return !(x.first.explained == compared && x.second->bug_class == "dequantization");
      });
      std::stable_sort(scored.begin(), scored.end(), [&](const auto& x, const auto& y) {
        return x.first.explained > y.first.explained;
      });
    } else if (only_this_type_differs(model, t->type, tensor, all)) {
      // The converse: every tensor of this type is wrong and the other types load right, so the
      // type's decoder is the better account than a loader failing for exactly that type.
      d.signatures.push_back(fmt::format("every other {} tensor differs too, while tensors of other types match",
                                         ggml_type_name(t->type)));
      wrong_type = ggml_type_name(t->type);
      std::stable_partition(scored.begin(), scored.end(), [&](const auto& x) {
        return !(x.first.explained == compared && x.second->bug_class == "weight-loading");
      });
      std::stable_sort(scored.begin(), scored.end(), [&](const auto& x, const auto& y) {
        return x.first.explained > y.first.explained;
      });
    }
    // Nothing listed explains every row: an offset fitted on a differing row held in full.
    std::optional<WeightVariant> shifted;
    if (scored.empty() || scored[0].first.explained < compared)
      if (const auto fit_row = middle_full_differing_row(b, tb, v)) {
        shifted = offset_fitted(*t, model.file(), fit_row->first, fit_row->second,
                                [&tol](const float* x, const float* y, std::int64_t n) { return rows_close(x, y, n, tol); });
        if (shifted) scored.insert(scored.begin(), {score_variant(*shifted, b, tb, c.rows, c.cols, tol), &*shifted});
      }
    const bool found = !scored.empty() && scored[0].first.explained == compared;
    std::size_t next = 0;
    if (found) {
      d.bug_class = scored[0].second->bug_class;
      d.variant = scored[0].second->variant;
      d.residual = scored[0].first.residual;
      d.evidence = Evidence::reproduced;
      // Every other decode explaining every row about as well is a tie (a decoder variant
      // already ruled out by the other tensors of its type is not).
      const bool decoder_ruled_out = matching_of_type(model, t->type, tensor, all) > 0;
      const bool decoder_indicated = only_this_type_differs(model, t->type, tensor, all);
      for (next = 1; next < scored.size(); ++next) {
        const auto& [s, w] = scored[next];
        if (s.explained != compared || s.residual > std::max(10 * d.residual, 1e-12) ||
            (decoder_ruled_out && w->bug_class == "dequantization") ||
            (decoder_indicated && d.bug_class == "dequantization" && w->bug_class == "weight-loading"))
          break;
        if (d.ties.empty()) d.ties.push_back({d.variant, d.residual, d.bug_class});
        d.ties.push_back({w->variant, s.residual, w->bug_class});
        if (w->bug_class != d.bug_class) d.evidence = Evidence::tied;
      }
      if (d.evidence == Evidence::tied) d.bug_class = "unexplained";
      if (!d.ties.empty())
        d.separating_experiment = "record the weights in full (--weights full) and compare the tied decodes row by row";
    }
    for (std::size_t i = next; i < scored.size() && d.runners_up.size() < 3; ++i)
      d.runners_up.push_back({fmt::format("{} ({} of {} rows)", scored[i].second->variant,
                                          scored[i].first.explained, compared),
                              scored[i].first.residual, scored[i].second->bug_class});
  } catch (const std::exception& e) {
    d.signatures.push_back(fmt::format("replay from the GGUF bytes skipped: {}", e.what()));
  }
  if (d.variant.empty()) {
    // No decode reproduces the values: zero rows point to a load that never happened; any
    // other difference is unexplained (it could be the decoder or the loader).
    // Every tensor of this type wrong and every other type right: its decoder, by elimination.
    const bool zeros = !v.zero_in_actual.empty() && v.zero_in_actual.back() >= v.differing.front();
    const bool decoder = !zeros && (!wrong_type.empty() || !shape.empty());
    d.bug_class = zeros ? "weight-loading" : decoder ? "dequantization" : "unexplained";
    d.evidence = zeros || decoder ? Evidence::indicated : Evidence::unexplained;
    if (decoder && !shape.empty()) d.variant = shape;
    const std::string others_say =
        !wrong_type.empty()
            ? fmt::format("Every {0} tensor differs and every tensor of another type matches: look at the {0} decoder "
                          "(its block layout, scales and mins).",
                          wrong_type)
        : same_type_matching > 0
            ? fmt::format("The other {} tensors decode right: look at the decoder on this tensor's own path (an "
                          "embedding lookup, a fused or fast path that only it takes).",
                          same_type_matching)
            : "";
    d.explanation = fmt::format(
        "The weight {} differs between the programs before any activation runs ({}), and no replayed decode of "
        "its GGUF bytes reproduces the actual values. {}",
        tensor, c.summary,
        zeros ? "Its differing rows are zero: never loaded. Look at " + code_area(d.bug_class) + "."
        : decoder
            ? (shape.empty() ? others_say
                             : fmt::format("Its blocks differ as only a decoder's do: {}. {}", shape,
                                           others_say.empty() ? "Look at " + code_area(d.bug_class) + "."
                                                                  : others_say))
            : "Look at the loader and the dequantization kernel of its type.");
  } else if (d.evidence == Evidence::tied) {
    std::string names;
    for (const auto& tie : d.ties) names += fmt::format("{}\"{}\" ({})", names.empty() ? "" : " and ", tie.variant, tie.bug_class);
    d.explanation = fmt::format(
        "The weight {} differs between the programs before any activation runs ({}). Replaying its GGUF bytes, {} "
        "reproduce every compared row equally well. To separate them, {}.",
        tensor, c.summary, names, d.separating_experiment);
  } else {
    d.explanation = fmt::format(
        "The weight {} differs between the programs before any activation runs ({}). Replaying its GGUF bytes, "
        "\"{}\" reproduces every compared row (residual {:.2g}; the correct decode leaves {:.2g}). Look at {}.",
        tensor, c.summary, d.variant, d.residual, d.baseline_residual.value_or(0), code_area(d.bug_class));
  }
  return d;
}

}  // namespace

std::optional<WeightFinding> compare_weights(const TraceReader& a, const TraceReader& b,
                                             const std::string& model_path, bool diagnose,
                                             DiffResult& result) {
  const auto taps_a = weight_taps_of(a), taps_b = weight_taps_of(b);
  if (taps_a.empty() != taps_b.empty()) {
    const bool in_expected = !taps_a.empty();
    StructuralFinding f;
    f.kind = in_expected ? "missing-in-actual" : "missing-in-expected";
    f.tap = "weight.*";
    f.detail = fmt::format("only the {} trace records weights ({} tensors): record both with "
                                           "`tapdiff run --weights` to compare them",
                                           in_expected ? "expected" : "actual",
                           (in_expected ? taps_a : taps_b).size());
    result.findings.push_back(std::move(f));
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (const auto& [name, taps] : taps_a)
    if (taps_b.count(name)) names.push_back(name);
  std::stable_sort(names.begin(), names.end(),
                   [](const std::string& x, const std::string& y) { return load_order(x) < load_order(y); });
  const WeightTolerance tol =
      coarser(tolerance_for(a.metadata().precision), tolerance_for(b.metadata().precision));

  std::optional<WeightFinding> finding;
  RowVerdicts first_verdicts;
  const TensorTaps* first_taps = nullptr;
  for (const std::string& name : names) {
    const TensorTaps& ta = taps_a.at(name);
    const TensorTaps& tb = taps_b.at(name);
    WeightComparison c;
    c.tensor = name;
    c.mode = ta.stats || tb.stats ? "stats" : "full";
    c.rows = ta.rows();
    c.cols = std::max(ta.cols(), tb.cols());
    if (ta.rows() != tb.rows() || (ta.cols() && tb.cols() && ta.cols() != tb.cols())) {
      StructuralFinding f;
      f.kind = "shape";
      f.tap = weight_tap_name(name);
      f.detail = fmt::format("the expected trace holds {} rows of {}, the actual {} rows of {}", ta.rows(),
                             ta.cols(), tb.rows(), tb.cols());
      f.expected_shape = {ta.rows(), ta.cols()};
      f.actual_shape = {tb.rows(), tb.cols()};
      result.findings.push_back(std::move(f));
      continue;
    }
    RowVerdicts v;
    for (std::int64_t r0 = 0; r0 < c.rows; r0 += kChunkRows) {
      const std::int64_t r1 = std::min(c.rows, r0 + kChunkRows) - 1;
      compare_rows(read_view(a, ta, r0, r1), read_view(b, tb, r0, r1), r0, r1, c.cols, tol, v);
    }
    c.compared_rows = std::int64_t(v.compared.size());
    c.differing_rows = std::int64_t(v.differing.size());
    c.first_differing_row = v.differing.empty() ? -1 : v.differing.front();
    c.max_abs = v.max_abs;
    c.summary = row_summary(v, c.rows);
    result.weights.push_back(c);
    if (finding || !c.differs()) continue;
    first_verdicts = v;
    first_taps = &tb;

    WeightFinding w;
    w.first.tap = weight_tap_name(name);
    w.first.name = w.first.tap;
    w.first.layer = -1;
    w.first.position = c.first_differing_row;
    w.first.pattern = pattern_of(v);
    w.first.diverged_positions = v.differing;
    const TensorView row_a = read_view(a, ta, c.first_differing_row, c.first_differing_row);
    const TensorView row_b = read_view(b, tb, c.first_differing_row, c.first_differing_row);
    const auto* fa = full_row(row_a, c.first_differing_row);
    const auto* fb = full_row(row_b, c.first_differing_row);
    if (fa && fb) {
      w.first.metrics = row_metrics(fa->data(), fb->data(), c.cols);
    } else if (const auto sa = row_stats(row_a, c.first_differing_row, c.first_differing_row, c.cols),
               sb = row_stats(row_b, c.first_differing_row, c.first_differing_row, c.cols);
               sa && sb) {
      w.first.metrics = stats_lower_bounds(*sa, *sb);
    }
    w.first.metrics.position = c.first_differing_row;
    w.first.metrics.diverged = true;
    finding = std::move(w);
  }
  // Diagnosed once every tensor is compared: which others match is evidence.
  if (finding && diagnose) {
    const std::string tensor = finding->first.tap.substr(kWeightTapPrefix.size());
    const auto c = std::find_if(result.weights.begin(), result.weights.end(),
                                [&](const WeightComparison& w) { return w.tensor == tensor; });
    finding->diagnosis =
        diagnose_weight(tensor, first_verdicts, *c, result.weights, a, b, *first_taps, tol, model_path);
  }
  return finding;
}

namespace {

// The weights a tap is computed from directly (its GGUF tensors), "" entries omitted.
std::vector<std::string> weights_of_tap(const std::string& name, int layer) {
  if (name == "token_embd") return {"token_embd.weight"};
  if (name == "output_norm") return {"output_norm.weight"};
  if (name == "output") return {"output.weight", "token_embd.weight"};  // tied heads use the embedding
  if (layer < 0) return {};
  const std::string b = fmt::format("blk.{}.", layer);
  if (name == "attn_norm" || name == "ffn_norm" || name == "attn_q_norm" || name == "attn_k_norm")
    return {b + name + ".weight"};
  if (name == "attn_post_norm") return {b + "post_attention_norm.weight"};
  if (name == "ffn_post_norm") return {b + "post_ffw_norm.weight"};
  if (name == "attn_q" || name == "attn_k" || name == "attn_v") return {b + name + ".weight", b + name + ".bias"};
  if (name == "attn_output" || name == "ffn_gate" || name == "ffn_up" || name == "ffn_down")
    return {b + name + ".weight"};
  return {};
}

}  // namespace

void put_weight_finding_first(const WeightFinding& finding, DiffResult& r) {
  r.first = finding.first;
  r.diagnosis = finding.diagnosis;
  RootFinding root;
  root.kind = "weights";
  root.at = finding.first;
  root.diagnosis = finding.diagnosis;
  // An activation root computed straight from a weight that differs is that weight's effect.
  auto differs = [&](const std::string& tensor) {
    for (const auto& w : r.weights)
      if (w.tensor == tensor) return w.differs();
    return false;
  };
  std::vector<RootFinding> independent;
  for (RootFinding& other : r.roots) {
    const auto tensors = weights_of_tap(other.at.name, other.at.layer);
    if (other.kind == "divergence" && std::any_of(tensors.begin(), tensors.end(), differs)) {
      root.explained.push_back(other.at.tap);
      root.explained.insert(root.explained.end(), other.explained.begin(), other.explained.end());
    } else {
      independent.push_back(std::move(other));
    }
  }
  independent.insert(independent.begin(), std::move(root));
  r.roots = std::move(independent);
  r.verdict = Verdict::diverged;
}

}  // namespace tapdiff::diff
