#include "diff/block_replay.hpp"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "diff/tap_graph.hpp"
#include "tapdiff/tap_filter.hpp"

namespace tapdiff::diff {
namespace {

const Candidate* baseline_of(const std::vector<Candidate>& candidates) {
  const auto it = std::find_if(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.baseline; });
  return it == candidates.end() ? nullptr : &*it;
}

// Op `op` computed right from what `in.actual` reads, from here on: false where it has no replay.
bool compute_right(const TapInfo& op, ReplayInputs& in, bool keep_rows) {
  const bool variants = !in.baseline_only;
  in.baseline_only = true;
  const std::vector<Candidate> candidates = candidates_for(op.name, op.layer, in);
  in.baseline_only = !variants;
  const Candidate* right = baseline_of(candidates);
  if (right) in.actual.compute(op, right->replay, keep_rows);
  return right;
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
                                   const TraceReader& expected, int n_layer) {
  UnrecordedInputs out;
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
  return out;
}

std::vector<Candidate> block_candidates(const std::string& name, int layer, ReplayInputs& in,
                                        const std::vector<const TapInfo*>& ops, bool decode_only) {
  // The ops computed right, in order, each from the ones before it (a row on its first read).
  for (const TapInfo* op : ops)
    if (!compute_right(*op, in, true)) return {};
  std::vector<Candidate> out = candidates_for(name, layer, in);
  if (!baseline_of(out)) return out;
  const TapInfo diverged = *in.observed.find(name, layer);
  const bool matrix_variants = in.matrix_variants;
  in.matrix_variants = false;  // a decoder's bug asks for the weights as decoded (--weights) here
  std::vector<std::vector<Candidate>> variants(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) variants[i] = variants_of(*ops[i], in, decode_only);
  // The diverged tap computed from the ops with `wrong` ones replaced (by op index, in order), the
  // ops after the first wrong one computed right from what they read. A later wrong op's variant
  // is replayed anew from what the earlier ones gave it.
  const auto carried = [&](const std::vector<std::pair<std::size_t, const Candidate*>>& wrong, std::string variant,
                           const std::string& bug_class) {
    auto through = std::make_shared<ReplayInputs>(in);
    auto next = wrong.begin();
    for (std::size_t k = wrong.front().first; k < ops.size(); ++k) {
      if (next == wrong.end() || next->first != k) {
        if (!compute_right(*ops[k], *through, false)) return;
        continue;
      }
      const std::string& text = (next++)->second->variant;
      if (k == wrong.front().first) {
        through->actual.compute(*ops[k], wrong.front().second->replay, false);
        continue;
      }
      const std::vector<Candidate> anew = variants_of(*ops[k], *through, decode_only);
      const auto v = std::find_if(anew.begin(), anew.end(), [&](const Candidate& c) { return c.variant == text; });
      if (v == anew.end()) return;
      through->actual.compute(*ops[k], v->replay, false);
    }
    if (!compute_right(diverged, *through, false)) return;
    Candidate c;
    c.variant = std::move(variant);
    c.bug_class = bug_class;
    for (const auto& [k, v] : wrong) c.unrecorded_ops.push_back(ops[k]->full_name);
    c.replay = [through, diverged](std::int64_t p) { return trace_row(through->actual, diverged.name, diverged.layer, p); };
    out.push_back(std::move(c));
  };
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (const Candidate& v : variants[i])
      carried({{i, &v}}, fmt::format("{}, which the trace does not record: {}", ops[i]->full_name, v.variant),
              v.bug_class);
  // Sibling ops (q and k, gate and up) wrong alike (one position counter, one norm routine), or
  // each given the other's tensor.
  for (std::size_t i = 0; i < ops.size(); ++i)
    for (std::size_t j = i + 1; j < ops.size(); ++j) {
      if (exchanged(ops[i]->full_name) != ops[j]->full_name) continue;
      for (const Candidate& a : variants[i])
        for (const Candidate& b : variants[j])
          if (a.bug_class == b.bug_class && exchanged(a.variant) == b.variant)
            carried({{i, &a}, {j, &b}},
                    a.variant == b.variant
                        ? fmt::format("{} and {}, which the trace does not record: both {}", ops[i]->full_name,
                                      ops[j]->name, a.variant)
                        : fmt::format("{} and {}, which the trace does not record: {}; {}", ops[i]->full_name,
                                      ops[j]->name, a.variant, b.variant),
                    a.bug_class);
    }
  in.matrix_variants = matrix_variants;
  return out;
}

}  // namespace tapdiff::diff
