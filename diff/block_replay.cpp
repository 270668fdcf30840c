#include "diff/block_replay.hpp"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "diff/result.hpp"
#include "diff/tap_graph.hpp"
#include "tapdiff/tap_filter.hpp"

namespace tapdiff::diff {
namespace {

const Candidate* baseline_of(const std::vector<Candidate>& candidates) {
  const auto it = std::find_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.baseline; });
  return it == candidates.end() ? nullptr : &*it;
}

// Op `op` computed right from what `in.actual` reads; empty where it has no replay.
std::function<Row(std::int64_t)> right_replay(const TapInfo& op, ReplayInputs& in) {
  const bool variants = !in.baseline_only;
  in.baseline_only = true;
  const std::vector<Candidate> candidates = candidates_for(op.name, op.layer, in);
  in.baseline_only = !variants;
  const Candidate* right = baseline_of(candidates);
  return right ? right->replay : nullptr;
}

// `text` with sibling ops' names exchanged: attn_q and attn_k (their norms, RoPE and weights too),
// ffn_gate and ffn_up, the blocks' norms, the two caches.
std::string exchanged(const std::string& text) {
  static const std::pair<std::string_view, std::string_view> kSiblings[] = {
      {"attn_q", "attn_k"}, {"ffn_gate", "ffn_up"}, {"attn_norm", "ffn_norm"}, {"attn_post_norm", "ffn_post_norm"},
      {"kv.k", "kv.v"}};
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    bool swapped = false;
    for (const auto& [x, y] : kSiblings)
      for (const auto& [from, to] : {std::pair{x, y}, std::pair{y, x}})
        if (!swapped && text.compare(i, from.size(), from) == 0) {
          out += to;
          i += from.size();
          swapped = true;
        }
    if (!swapped) out += text[i++];
  }
  return out;
}

// Op `op`'s variants replayed from what `in.actual` reads: all but fits, which read their
// constant off the op's own values (the trace does not hold them), and generic ones, which take
// another recorded buffer's (the op's own replay names that better). decode_only: each variant
// right in the prompt.
std::vector<Candidate> variants_of(const TapInfo& op, ReplayInputs& in, bool decode_only) {
  std::vector<Candidate> out;
  std::function<Row(std::int64_t)> right;
  for (Candidate& v : candidates_for(op.name, op.layer, in))
    if (v.baseline)
      right = v.replay;
    else if (!v.fitted && !v.generic)
      out.push_back(std::move(v));
  if (decode_only && right)
    for (Candidate& v : out) {
      v.variant += ", in decode steps only";
      v.replay = [right, wrong = std::move(v.replay), prompt = in.prompt_length](std::int64_t p) {
        return p >= prompt ? wrong(p) : right(p);
      };
    }
  return out;
}

}  // namespace

UnrecordedInputs unrecorded_inputs(const std::string& name, int layer, const TraceReader& inputs,
                                   const TraceReader& expected) {
  UnrecordedInputs out;
  // The expected trace's layers: the actual may record no layer at all (logits alone).
  const int n_layer = layer_count(expected);
  std::vector<ResolvedInput> todo = tap_inputs(name, layer, n_layer);
  if (std::none_of(todo.begin(), todo.end(), [&](const ResolvedInput& in) {
        return expected.find(in.name, in.layer) && !inputs.find(in.name, in.layer);
      }))
    return out;
  std::vector<std::string> seen;
  while (!todo.empty()) {
    const ResolvedInput in = todo.back();
    todo.pop_back();
    const std::string full = full_tap_name(in.name, in.layer);
    if (std::find(seen.begin(), seen.end(), full) != seen.end()) continue;
    seen.push_back(full);
    if (inputs.find(in.name, in.layer)) {
      out.recorded.push_back(full);
      continue;
    }
    if (const TapInfo* op = expected.find(in.name, in.layer)) out.ops.push_back(op);
    for (ResolvedInput& up : tap_inputs(in.name, in.layer, n_layer)) todo.push_back(std::move(up));
  }
  const auto& order = expected.taps();  // execution order
  const auto index = [&](const TapInfo* t) {
    return std::find_if(order.begin(), order.end(), [&](const TapInfo& o) { return o.full_name == t->full_name; }) -
           order.begin();
  };
  std::sort(out.ops.begin(), out.ops.end(), [&](const TapInfo* x, const TapInfo* y) { return index(x) < index(y); });
  std::sort(out.recorded.begin(), out.recorded.end());
  std::vector<int> layers;
  for (const TapInfo* op : out.ops)
    if (op->layer >= 0 && std::find(layers.begin(), layers.end(), op->layer) == layers.end()) layers.push_back(op->layer);
  out.layers = int(layers.size());
  return out;
}

std::vector<Candidate> block_candidates(const std::string& name, int layer, ReplayInputs& in,
                                        const std::vector<const TapInfo*>& ops, bool decode_only) {
  // The ops computed right, in order, each from the ones before it (a row on its first read).
  for (const TapInfo* op : ops) {
    auto right = right_replay(*op, in);
    if (!right) return {};
    in.actual.compute(*op, std::move(right));
  }
  std::vector<Candidate> out = candidates_for(name, layer, in);
  if (!baseline_of(out)) return out;
  const TapInfo diverged = *in.observed.find(name, layer);
  // The replay the judge reads now: the others keep no rows.
  const auto judged = std::make_shared<std::weak_ptr<ReplayInputs>>();
  const bool matrix_variants = in.matrix_variants;
  in.matrix_variants = false;  // a decoder's bug asks for the weights as decoded (--weights) here
  std::vector<std::vector<Candidate>> variants(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) variants[i] = variants_of(*ops[i], in, decode_only);
  // The diverged tap computed from the ops with `wrong` ones replaced (by op index, in order), the
  // ops after the first wrong one computed right from what they read. A later wrong op's variant
  // is replayed anew from what the earlier ones gave it.
  using Wrong = std::vector<std::pair<std::size_t, const Candidate*>>;
  const auto carried = [&](const Wrong& wrong, std::string variant, const std::string& bug_class) {
    auto through = std::make_shared<ReplayInputs>(in);
    std::vector<std::string> changed;  // the ops that read a wrong one, directly or not, and the wrong ones
    const auto reads_changed = [&](const TapInfo& op) {
      const auto from = tap_inputs(op.name, op.layer, in.model.config().n_layer);
      return std::any_of(from.begin(), from.end(), [&](const ResolvedInput& x) {
        return std::find(changed.begin(), changed.end(), full_tap_name(x.name, x.layer)) != changed.end();
      });
    };
    // An op that reads none keeps the rows computed right; in decode steps only, so does every
    // op's prompt.
    const auto recompute = [&](const TapInfo& op, bool prompt_right) {
      auto right = right_replay(op, *through);
      if (!right) return false;
      if (prompt_right)
        right = [&in, name = op.name, layer = op.layer, anew = std::move(right)](std::int64_t p) {
          return p < in.prompt_length ? trace_row(in.actual, name, layer, p) : anew(p);
        };
      through->actual.compute(op, std::move(right));
      changed.push_back(op.full_name);
      return true;
    };
    auto next = wrong.begin();
    for (std::size_t k = wrong.front().first; k < ops.size(); ++k) {
      if (next == wrong.end() || next->first != k) {
        if (reads_changed(*ops[k]) && !recompute(*ops[k], decode_only)) return;
        continue;
      }
      changed.push_back(ops[k]->full_name);
      const std::string& text = (next++)->second->variant;
      if (k == wrong.front().first) {
        through->actual.compute(*ops[k], wrong.front().second->replay);
        continue;
      }
      const std::vector<Candidate> anew = variants_of(*ops[k], *through, decode_only);
      const auto v = std::find_if(anew.begin(), anew.end(), [&](const Candidate& c) { return c.variant == text; });
      if (v == anew.end()) return;
      through->actual.compute(*ops[k], v->replay);
    }
    if (!recompute(diverged, false)) return;
    Candidate c;
    c.variant = std::move(variant);
    c.bug_class = bug_class;
    for (const auto& [k, v] : wrong) c.unrecorded_ops.push_back(ops[k]->full_name);
    c.replay = [through, judged, &in, diverged](std::int64_t p) {
      if (judged->lock() != through) {  // the judge has moved on from the variant before
        if (const auto before = judged->lock()) before->actual.forget_rows_not_in(in.actual);
        *judged = through;
      }
      return trace_row(through->actual, diverged.name, diverged.layer, p);
    };
    out.push_back(std::move(c));
  };
  // Each wrong set (a single op's variant, or siblings'), and where the ops span layers the same
  // set in every layer: the code each layer runs, wrong alike (the later layers' variants found by
  // their text).
  int first_layer = -1, last_layer = -1;  // the layers the ops span
  for (const TapInfo* op : ops)
    if (op->layer >= 0) {
      if (first_layer < 0) first_layer = op->layer;
      last_layer = std::max(last_layer, op->layer);
    }
  // names: the wrong ops' names without their layer ("attn_q.rope and attn_k.rope").
  const auto carried_in_every_layer = [&](const Wrong& wrong, const std::string& names, const std::string& variant,
                                          const std::string& bug_class) {
    const int at = ops[wrong.front().first]->layer;
    carried(wrong,
            fmt::format("{}{}, which the trace does not record: {}", at >= 0 ? fmt::format("blk.{}.", at) : "", names,
                        variant),
            bug_class);
    if (at < 0 || at != first_layer || first_layer == last_layer) return;
    Wrong every = wrong;
    for (const auto& [k, v] : wrong)
      for (std::size_t m = k + 1; m < ops.size(); ++m)
        if (ops[m]->name == ops[k]->name) every.push_back({m, v});
    std::sort(every.begin(), every.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    carried(every,
            fmt::format("{} in layers {}-{}, which the trace does not record: {}", names, first_layer, last_layer,
                        variant),
            bug_class);
  };
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (const Candidate& v : variants[i]) carried_in_every_layer({{i, &v}}, ops[i]->name, v.variant, v.bug_class);
  // Sibling ops (q and k, gate and up) wrong alike (one position counter, one norm routine), or
  // each given the other's tensor.
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (std::size_t j = i + 1; j < ops.size(); ++j) {
      if (exchanged(ops[i]->full_name) != ops[j]->full_name) continue;
      for (const Candidate& a : variants[i])
        for (const Candidate& b : variants[j])
          if (a.bug_class == b.bug_class && exchanged(a.variant) == b.variant)
            carried_in_every_layer({{i, &a}, {j, &b}}, fmt::format("{} and {}", ops[i]->name, ops[j]->name),
                                   a.variant == b.variant ? "both " + a.variant : a.variant + "; " + b.variant,
                                   a.bug_class);
    }
  in.matrix_variants = matrix_variants;
  return out;
}

}  // namespace tapdiff::diff
