#include "diff/roots.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "diff/amplified.hpp"
#include "diff/diagnose.hpp"
#include "diff/hypotheses.hpp"
#include "diff/replay_model.hpp"
#include "diff/tap_graph.hpp"
#include "model/ggml_type.hpp"
#include "tapdiff/tap_filter.hpp"

namespace tapdiff::diff {
namespace {

// Over tolerance, whatever its inputs: what an input error means for the taps it feeds.
bool over_tolerance(const TapComparison& t, const RowMetrics& row) {
  return row.diverged || row.nonfinite > row.nonfinite_expected ||
         (std::isfinite(row.nmse) && row.nmse > t.threshold_nmse);
}

std::vector<std::int64_t> diverged_positions(const TapComparison& t) {
  std::vector<std::int64_t> out;
  for (const auto& row : t.rows)
    if (row.diverged) out.push_back(row.position);
  return out;
}

PositionPattern pattern_of(const TapComparison& t, const std::vector<std::int64_t>& diverged) {
  if (diverged.empty()) return PositionPattern::none;
  if (diverged.size() == t.rows.size()) return PositionPattern::all;
  std::size_t tail = 0;
  for (const auto& row : t.rows) tail += row.position >= diverged.front();
  return tail == diverged.size() ? PositionPattern::from : PositionPattern::some;
}

FirstDivergence divergence_at(const TapComparison& t) {
  FirstDivergence f;
  f.tap = t.full_name;
  f.name = t.name;
  f.layer = t.layer;
  f.diverged_positions = diverged_positions(t);
  f.position = f.diverged_positions.front();
  f.pattern = pattern_of(t, f.diverged_positions);
  f.metrics = *t.first_diverged();
  return f;
}

RootFinding divergence_root(const FirstDivergence& at, std::optional<Diagnosis> d) {
  RootFinding root;
  root.at = at;
  root.diagnosis = std::move(d);
  return root;
}

bool same_inputs(const std::string& x, const std::string& y, int layer, int n_layer) {
  const auto a = tap_inputs(x, layer, n_layer), b = tap_inputs(y, layer, n_layer);
  if (a.empty() || a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].layer != b[i].layer) return false;
  return true;
}

// In lockstep only these edges have no tap point (no injection) between input and output.
bool fused(const std::string& input, const std::string& name) {
  return input == "attn.probs" && (name == "attn.out" || name == "attn.probs.summary");
}

// A text with its numbers masked ("blk.1.attn_v.weight", "10240 of its 21760 bytes"): the
// same variant or observation in another layer or tensor.
std::string without_numbers(const std::string& text) {
  static const std::regex number(R"([0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?)");
  return std::regex_replace(text, number, "#");
}

std::set<std::string> tie_classes(const Diagnosis& d) {
  std::set<std::string> classes;
  for (const Hypothesis& h : d.ties) classes.insert(h.bug_class);
  return classes;
}

bool same_signature(const Diagnosis& x, const Diagnosis& y) {
  if (x.signatures.size() != y.signatures.size()) return false;
  for (std::size_t i = 0; i < x.signatures.size(); ++i)
    if (without_numbers(x.signatures[i]) != without_numbers(y.signatures[i])) return false;
  return true;
}

// "W as loaded when <decode>" and "the row of the table as loaded when <decode>": the weight
// decode a variant replays, whichever tap reads the weight; "" for other variants.
std::string weight_decode(const std::string& variant) {
  const std::string marker = " as loaded when ";
  const auto at = variant.find(marker);
  return at == std::string::npos ? "" : without_numbers(variant.substr(at + marker.size()));
}

class Grouper {
public:
  Grouper(DiffResult& r, const TraceReader& a, const TraceReader& b, bool diagnose, const std::string& model)
      : r_(r), a_(a), b_(b), diagnose_(diagnose), model_(model), n_layer_(layer_count(r)) {
    for (std::size_t i = 0; i < r.taps.size(); ++i) index_[{r.taps[i].name, r.taps[i].layer}] = i;
  }

  void divergences() {
    const bool lockstep = r_.mode == DiffMode::lockstep;
    std::vector<int> root_of(r_.taps.size(), -1);
    for (std::size_t i = 0; i < r_.taps.size(); ++i) {
      const TapComparison& t = r_.taps[i];
      const bool diverged = t.diverged();
      bool tainted = diverged;
      for (const auto& row : t.rows) tainted = tainted || over_tolerance(t, row);
      if (!tainted) continue;
      // attn.probs.summary is computed from attn.probs' rows: whatever root those are, it is too.
      if (const auto probs = index_.find({"attn.probs", t.layer});
          t.name == "attn.probs.summary" && probs != index_.end() && root_of[probs->second] >= 0) {
        if (diverged) join(root_of[probs->second], t, root_of, i);
        else root_of[i] = root_of[probs->second];
        continue;
      }
      const int linked = linked_root(t, root_of, lockstep);
      if (!diverged && (lockstep || linked < 0 || !own_under_inherited(i))) {
        if (!lockstep) root_of[i] = linked;  // carries the root's error downstream
        continue;
      }
      const FirstDivergence at = divergence_at(t);
      std::optional<Diagnosis> d;
      if (linked >= 0) {
        // Normal traces: the op replayed from its own (wrong) inputs reproduces its output,
        // so the earlier root explains it.
        if (!lockstep) d = diagnosis(at, false);
        // (A row under the threshold confirmed by its own error is judged at the floor that confirmed it.)
        const bool under = std::any_of(t.rows.begin(), t.rows.end(), [](const RowMetrics& row) {
          return row.confirmed_suspect();
        });
        const double bar = under ? t.own_error_floor_nmse : t.threshold_nmse;
        if (lockstep || !d || (!d->baseline_residual && !nonfinite_from_finite_inputs(t)) ||
            (d->baseline_residual && *d->baseline_residual <= bar)) {
          join(linked, t, root_of, i);
          continue;
        }
      }
      if (!d) d = diagnosis(at, lockstep);
      // Values copied from a root's own tap, or from a tap carrying the error of a root that is a
      // copy itself (one aliased buffer seen from several sides): that root's error, moved. Not
      // a copy of a tap that only carries another kind of root's error (a norm skipped copies its
      // input, whatever that carries), nor one that goes wrong before its source is (a residual
      // add dropped at position 0 copies ffn_down's row there, right).
      if (d && !d->copied_from.empty() && !lockstep)
        if (auto src = index_.find(split_full_tap_name(d->copied_from));
            src != index_.end() && root_of[src->second] >= 0 &&
            (r_.taps[src->second].diverged() || copies(r_.roots[std::size_t(root_of[src->second])])) &&
            wrong_by(r_.taps[src->second], at.position)) {
          join(root_of[src->second], t, root_of, i);
          continue;
        }
      // Computed right from a tap that carries a root's own error (the cache as read back): that
      // root's, in lockstep too (the cache keeps what the run stored in it).
      if (const int carrier = carrier_root(d, root_of, at.position); carrier >= 0) {
        join(carrier, t, root_of, i);
        continue;
      }
      // Rows that carry a root's error make poor signatures, and in lockstep a bug shows at each
      // layer where its values happen to: the same op with the same class at another layer is
      // that root's bug again.
      if (const int same_op = lockstep || linked >= 0 ? same_op_root(t, d) : -1; same_op >= 0) {
        join(same_op, t, root_of, i);
        continue;
      }
      if (const int decoder = decoder_root(t, d); decoder >= 0) {
        join(decoder, t, root_of, i);
        continue;
      }
      if (const int sibling = sibling_root(t, d); sibling >= 0) {
        join(sibling, t, root_of, i);
        continue;
      }
      root_of[i] = static_cast<int>(r_.roots.size());
      r_.roots.push_back(divergence_root(at, std::move(d)));
    }
  }

  void shapes() {
    for (const auto& f : r_.findings) {
      if (f.kind != "shape") continue;
      const auto [name, layer] = split_full_tap_name(f.tap);
      // Fed by a shape-mismatched tap, or next to one (same layer, same inputs): its root's.
      int joined = -1;
      for (const auto& in : tap_inputs(name, layer, n_layer_))
        if (auto s = shape_root_.find({in.name, in.layer}); s != shape_root_.end()) joined = s->second;
      for (const auto& [tap, root] : shape_root_)
        if (joined < 0 && tap.second == layer && same_inputs(tap.first, name, layer, n_layer_)) joined = root;
      // The same tap of another layer with the same two shapes: one config value, every layer.
      for (const auto& [tap, root] : shape_root_) {
        const RootFinding& other = r_.roots[std::size_t(root)];
        if (joined < 0 && tap.first == name && other.at.name == name && other.expected_shape == f.expected_shape &&
            other.actual_shape == f.actual_shape)
          joined = root;
      }
      if (joined >= 0) {
        r_.roots[std::size_t(joined)].explained.push_back(f.tap);
        shape_root_[{name, layer}] = joined;
        continue;
      }
      shape_root_[{name, layer}] = int(r_.roots.size());
      RootFinding root;
      root.kind = "shape";
      root.at.tap = f.tap;
      root.at.name = name;
      root.at.layer = layer;
      Diagnosis d;
      d.bug_class = "shape";
      d.evidence = Evidence::indicated;
      d.variant = f.detail;
      d.explanation = f.tap + " has another row shape in the two traces (" + f.detail +
                      "). Look at the buffer's size and the model config field the producer takes it from.";
      root.diagnosis = std::move(d);
      root.expected_shape = f.expected_shape;
      root.actual_shape = f.actual_shape;
      r_.roots.push_back(std::move(root));
    }
  }

private:
  // The root whose error reaches t through an input over tolerance at t's diverged positions.
  int linked_root(const TapComparison& t, const std::vector<int>& root_of, bool lockstep) const {
    std::vector<std::int64_t> positions;
    for (const auto& row : t.rows)
      if (over_tolerance(t, row)) positions.push_back(row.position);
    for (const auto& in : tap_inputs(t.name, t.layer, n_layer_)) {
      // An input of another shape was never injected: whatever it fed is its root's.
      if (auto s = shape_root_.find({in.name, in.layer}); s != shape_root_.end()) return s->second;
      if (lockstep && !fused(in.name, t.name)) continue;
      auto it = index_.find({in.name, in.layer});
      if (it == index_.end() || root_of[it->second] < 0) continue;
      const TapComparison& input = r_.taps[it->second];
      for (const auto& row : input.rows) {
        if (!over_tolerance(input, row)) continue;
        for (auto p : positions)
          if (row.position == p || (in.all_earlier_positions && row.position <= p)) return root_of[it->second];
      }
    }
    return -1;
  }

  // An op no variant reproduces that reads a weight of a block type whose decoder a root already
  // named (class dequantization), or suspected (unexplained at an op reading that type, its
  // decoded weights asked for): that decoder again, wherever a weight of its type is read.
  int decoder_root(const TapComparison& t, const std::optional<Diagnosis>& d) {
    if (!d || d->evidence == Evidence::reproduced || d->evidence == Evidence::tied || !model()) return -1;
    const auto type_read_by = [&](const std::string& name, int layer) -> std::optional<GgmlType> {
      try {
        const std::string w = weight_read_by(name, layer, replay_->config());
        const GgufTensorInfo* info = w.empty() ? nullptr : replay_->tensor(w);
        if (!info || ggml_type_traits(info->type).block_elems <= 1) return std::nullopt;
        return info->type;
      } catch (const std::exception&) {
        return std::nullopt;  // another model's file (its sha256): no weight types to compare
      }
    };
    const auto type = type_read_by(t.name, t.layer);
    if (!type) return -1;
    for (std::size_t k = 0; k < r_.roots.size(); ++k) {
      const RootFinding& root = r_.roots[k];
      if (root.kind != "divergence" || !root.diagnosis) continue;
      const bool suspected = root.diagnosis->bug_class == "unexplained" && !root.diagnosis->decoder_suspect.empty();
      if ((root.diagnosis->bug_class == "dequantization" || suspected) && type_read_by(root.at.name, root.at.layer) == type)
        return int(k);
    }
    return -1;
  }

  // The replay's model, loaded once; nullptr where it cannot be.
  ReplayModel* model() {
    if (!diagnose_) return nullptr;
    try {
      if (!replay_) replay_.emplace(model_.empty() ? a_.metadata().model_path : model_, a_.metadata().model_sha256,
                                    a_.metadata().hparams);
      return &*replay_;
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  int same_op_root(const TapComparison& t, const std::optional<Diagnosis>& d) const {
    for (std::size_t k = 0; k < r_.roots.size(); ++k) {
      const RootFinding& root = r_.roots[k];
      const bool same_op = root.at.name == t.name || std::any_of(root.explained.begin(), root.explained.end(),
                                                                  [&](const std::string& tap) {
                                                                    return split_full_tap_name(tap).first == t.name;
                                                                  });
      // A class named (reproduced or indicated) names the code; "unexplained" only with the same evidence.
      if (root.kind == "divergence" && same_op && d && root.diagnosis && root.diagnosis->bug_class == d->bug_class &&
          (d->bug_class != "unexplained" || root.diagnosis->evidence == d->evidence) &&
          !other_variant_elsewhere(root, t, d))
        return int(k);
    }
    return -1;
  }

  static bool copies(const RootFinding& root) { return root.diagnosis && !root.diagnosis->copied_from.empty(); }

  // Whether a row of t at position p or before is over its tolerance (its own error or carried).
  static bool wrong_by(const TapComparison& t, std::int64_t p) {
    return std::any_of(t.rows.begin(), t.rows.end(),
                       [&](const RowMetrics& row) { return row.position <= p && over_tolerance(t, row); });
  }

  // The root of a tap whose error t's op carries (the cache t's attention reads), wrong at p or
  // before; one that diverged itself first, over one that only carries an earlier root's error.
  int carrier_root(const std::optional<Diagnosis>& d, const std::vector<int>& root_of, std::int64_t p) const {
    if (!d) return -1;
    int carrier = -1;
    for (const std::string& tap : d->carried_from) {
      const auto src = index_.find(split_full_tap_name(tap));
      if (src == index_.end() || root_of[src->second] < 0) continue;
      const TapComparison& c = r_.taps[src->second];
      if (!wrong_by(c, p)) continue;
      if (c.diverged()) return root_of[src->second];
      if (carrier < 0) carrier = root_of[src->second];
    }
    return carrier;
  }

  int sibling_root(const TapComparison& t, const std::optional<Diagnosis>& d) const {
    for (std::size_t k = 0; k < r_.roots.size(); ++k) {
      const RootFinding& root = r_.roots[k];
      if (root.kind != "divergence") continue;
      if (same_bug(root, t, d)) return static_cast<int>(k);
      if (root.at.layer != t.layer) continue;
      // The same kind of op explained by the same hypothesis (RoPE on q and on k, both norms).
      // (Or unexplained both, at the same kind of op: RoPE on q and on k.)
      const bool same_hypothesis = tap_class(root.at.name) == tap_class(t.name) && d && root.diagnosis &&
                                   (d->variant.empty() ? d->evidence == Evidence::unexplained &&
                                                             root.diagnosis->evidence == Evidence::unexplained
                                                       : d->variant == root.diagnosis->variant);
      if (!same_inputs(root.at.name, t.name, t.layer, n_layer_) && !fused(root.at.name, t.name) && !same_hypothesis)
        continue;
      const std::string mine = d ? d->bug_class : "", theirs = root.diagnosis ? root.diagnosis->bug_class : "";
      if (mine == theirs) return static_cast<int>(k);
    }
    return -1;
  }

  // NaN/Inf that t's row holds where its inputs' rows hold none beyond the expected's: made here,
  // not carried (no replay measures it: the correct op from finite inputs is finite).
  bool nonfinite_from_finite_inputs(const TapComparison& t) const {
    const auto row = std::find_if(t.rows.begin(), t.rows.end(),
                                  [](const RowMetrics& r) { return r.nonfinite > r.nonfinite_expected; });
    if (row == t.rows.end()) return false;
    for (const auto& in : tap_inputs(t.name, t.layer, n_layer_)) {
      const auto it = index_.find({in.name, in.layer});
      if (it == index_.end()) continue;
      for (const RowMetrics& r : r_.taps[it->second].rows)
        if (r.position == row->position && r.nonfinite > r.nonfinite_expected) return false;
    }
    return true;
  }

  // Another variant of the root's class, first wrong at a position where the root's tap is right
  // (the prompt, where the root is wrong in decode steps only): another bug in the same code.
  static bool other_variant_elsewhere(const RootFinding& root, const TapComparison& t,
                                      const std::optional<Diagnosis>& d) {
    if (!d || !root.diagnosis || without_numbers(d->variant) == without_numbers(root.diagnosis->variant)) return false;
    const auto& theirs = root.at.diverged_positions;
    const auto first = std::find_if(t.rows.begin(), t.rows.end(), [](const RowMetrics& row) { return row.diverged; });
    return first != t.rows.end() && std::find(theirs.begin(), theirs.end(), first->position) == theirs.end();
  }

  // Every layer runs the same code: the kind of op a root already holds in another layer,
  // reproduced by the same hypothesis (layer numbers aside), is the same bug again, not an
  // independent one; so is the same tap with the same signature when nothing reproduces it.
  static bool same_bug(const RootFinding& root, const TapComparison& t,
                                       const std::optional<Diagnosis>& d) {
    if (!d || !root.diagnosis || d->bug_class != root.diagnosis->bug_class || d->evidence != root.diagnosis->evidence)
      return false;
    if (other_variant_elsewhere(root, t, d)) return false;
    // One decoder or loader bug, read by every op that reads a weight of that kind.
    if (const std::string decode = weight_decode(d->variant); !decode.empty())
      return decode == weight_decode(root.diagnosis->variant);
    if (d->variant.empty() != root.diagnosis->variant.empty()) return false;
    // Reproduced: the class names the code, whichever variant of it each layer shows (a cache
    // written a slot late looks like an unwritten slot in the layer where only one step ran).
    // Otherwise the same variant or the same signature.
    // Tied: the same classes tie (which variant of them heads the tie can differ by layer).
    const bool reproduced = d->evidence == Evidence::reproduced;
    if (d->evidence == Evidence::tied ? tie_classes(*d) != tie_classes(*root.diagnosis)
        : !reproduced && (d->variant.empty() ? !same_signature(*d, *root.diagnosis)
                                             : without_numbers(d->variant) != without_numbers(root.diagnosis->variant)))
      return false;
    // Without a reproducing variant, the ops reading a weight matrix (embedding lookup,
    // projections, the head) are one kind: they share a loader and decoder whose bug (NaN from
    // a broken decode, say) shows wherever a weight is read.
    auto kind = [reproduced](const std::string& name) {
      const std::string_view c = tap_class(name);
      return !reproduced && (c == "embedding" || c == "logits") ? std::string_view("projection") : c;
    };
    auto same_kind = [&](const std::string& name) { return name == t.name || kind(name) == kind(t.name); };
    if (same_kind(root.at.name)) return true;
    for (const auto& tap : root.explained)
      if (same_kind(split_full_tap_name(tap).first)) return true;
    return false;
  }

  // Tap i's rows that carry a root's error but not only it (own_rows_under_inherited) become
  // diverged: whether there are any.
  bool own_under_inherited(std::size_t i) {
    TapComparison& t = r_.taps[i];
    if (!model()) return false;
    try {
      const auto own = own_rows_under_inherited(t, b_, *replay_, a_.metadata().prompt_length);
      for (RowMetrics& row : t.rows)
        row.diverged = row.diverged || std::find(own.begin(), own.end(), row.position) != own.end();
      return !own.empty();
    } catch (const std::exception&) {
      return false;  // no model, or a trace the replay cannot read: the rows carry what they carry
    }
  }

  void join(int root, const TapComparison& t, std::vector<int>& root_of, std::size_t i) {
    root_of[i] = root;
    r_.roots[std::size_t(root)].explained.push_back(t.full_name);
  }

  std::optional<Diagnosis> diagnosis(const FirstDivergence& at, bool lockstep) const {
    if (!diagnose_) return std::nullopt;
    return diagnose_at(r_, at, a_, b_, lockstep ? a_ : b_, model_);
  }

  DiffResult& r_;
  const TraceReader& a_;
  const TraceReader& b_;
  bool diagnose_;
  std::string model_;
  std::optional<ReplayModel> replay_;  // own_under_inherited's, loaded once
  int n_layer_ = 0;
  std::map<std::pair<std::string, int>, std::size_t> index_;
  std::map<std::pair<std::string, int>, int> shape_root_;  // shape-mismatched tap -> its root
};

// Roots in execution order (the expected trace's tap order), the token sequence last.
void sort_roots(std::vector<RootFinding>& roots, const TraceReader& a) {
  std::map<std::string, std::size_t> order;
  for (const TapInfo& t : a.taps()) order.emplace(t.full_name, order.size());
  auto key = [&](const RootFinding& r) {
    auto it = order.find(r.at.tap);
    return it == order.end() ? order.size() : it->second;
  };
  std::stable_sort(roots.begin(), roots.end(),
                   [&](const RootFinding& x, const RootFinding& y) { return key(x) < key(y); });
}

}  // namespace

void find_roots(DiffResult& r, const TraceReader& a, const TraceReader& b, bool diagnose,
                const std::string& model_path) {
  r.roots.clear();
  Grouper g(r, a, b, diagnose, model_path);
  g.shapes();
  if (r.mode == DiffMode::first) {
    if (r.first) r.roots.push_back(divergence_root(*r.first, r.diagnosis));
  } else {
    g.divergences();
    // No tap diverged but the tokens did: the token sequence is the one root.
    if (r.first && r.first->tap == "tokens") r.roots.push_back(divergence_root(*r.first, r.diagnosis));
  }
  sort_roots(r.roots, a);
}

}  // namespace tapdiff::diff
