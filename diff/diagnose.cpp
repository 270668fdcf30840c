#include "diff/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "diff/block_replay.hpp"
#include "diff/block_structure.hpp"
#include "diff/hypotheses.hpp"
#include "diff/judge.hpp"
#include "diff/nonfinite.hpp"
#include "diff/observations.hpp"
#include "diff/tap_graph.hpp"
#include "model/ggml_type.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {
namespace {

constexpr std::size_t kDivergedPositions = 6;  // replay at the first few diverged positions

// The first diverged positions, then the first and the last intact one of the same phase:
// engines run the prompt and the decode steps through different code paths, so a variant
// is held to keeping intact only what its own phase left intact. A variant must reproduce every
// diverged phase, though, and the last diverged row: a bug whose first rows a simpler one
// explains (positions p / 8 rounded down: 0 for the prompt's first eight) shows itself there.
std::vector<std::int64_t> evaluated_positions(const TapComparison* t, const FirstDivergence& f,
                                              std::int64_t prompt_length) {
  const auto& diverged = f.diverged_positions;
  std::vector<std::int64_t> out(diverged.begin(),
                                diverged.begin() + std::ptrdiff_t(std::min(kDivergedPositions, diverged.size())));
  bool prefill = false, decode = false;
  for (auto p : out) (p < prompt_length ? prefill : decode) = true;
  const auto add = [&out](std::int64_t p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  if (const auto other = std::find_if(diverged.begin(), diverged.end(),
                                      [&](std::int64_t p) { return prefill ? p >= prompt_length : p < prompt_length; });
      other != diverged.end())
    add(*other);
  if (!diverged.empty()) add(diverged.back());
  if (!t) return out;
  std::vector<std::int64_t> intact;
  for (const auto& row : t->rows)
    if (!row.diverged && (row.position < prompt_length ? prefill : decode)) intact.push_back(row.position);
  if (!intact.empty()) out.push_back(intact.front());
  if (intact.size() > 1) out.push_back(intact.back());
  return out;
}

// Over its tolerance at any of these positions (diverged, or carrying an upstream error).
bool wrong_at(const TapComparison& t, const std::vector<std::int64_t>& positions) {
  for (const auto& row : t.rows)
    if (std::find(positions.begin(), positions.end(), row.position) != positions.end() &&
        (row.diverged || !(row.nmse <= t.threshold_nmse)))
      return true;
  return false;
}

// The run that tells tied variants apart.
// identical: the tied variants' residuals are equal, as replays computing the same numbers give.
std::string separating_experiment(const std::vector<std::string>& classes, bool identical) {
  auto has = [&](const char* c) { return std::find(classes.begin(), classes.end(), c) != classes.end(); };
  // A token fed a place late and an output left from the step before give the same row at every
  // position of any run: only the code tells them apart.
  if (has("token-sequence") && has("buffer") &&
      std::all_of(classes.begin(), classes.end(), [](const std::string& c) { return c == "token-sequence" || c == "buffer"; }))
    return "no rerun separates them: both give position p the row of token p - 1 in any run; read which token the "
           "loop feeds each step and whether the lookup writes its output every step";
  if (has("attention-mask") && has("kv-cache") && identical)
    return "no rerun separates them: a mask hiding keys and a cache that lost them give the same numbers; read the "
           "cache back at the first diverging position (its length, its capacity, which slot holds which key): a "
           "cache holding every key points at the mask";
  if (has("sampling") && has("weight-loading"))
    return "record the weights in both runs (`--weights`) and diff them: a head weight that differs names the loader; "
           "one that agrees leaves the forward pass's scale of the logits and the sampler's in-place edit, which the "
           "logits before the sampler tell apart";
  if (identical)
    return "a rerun may not separate them: they compute the same numbers from these inputs; read the code each "
           "names";
  if (has("rope") || has("kv-cache") || has("attention-mask") || has("buffer"))
    return "rerun with a longer prompt and more decode steps (--n-predict), recording every position: the tied "
           "variants predict the same values at these positions only";
  if (has("embedding") || has("token-sequence"))
    return "rerun with a prompt whose token ids repeat and include neighbours (t and t + 1)";
  return "rerun on another prompt (other tokens, another length): the tied variants agree on this input only";
}

// Whether `trace` holds weight w as its program decoded it (in full or its statistics).
bool holds_decoded(const TraceReader& trace, const std::string& w) {
  return trace.find(std::string(kWeightTapPrefix) + w, -1) || trace.find(std::string(kWeightStatsTapPrefix) + w, -1);
}

// How to see weight w (several where empty) of `type` as the actual run's producer decoded it.
std::string record_decoded(Producer producer, const std::string& w, std::string_view type) {
  if (producer == Producer::llama_cpp || producer == Producer::transformers)
    return fmt::format("{} records no weights, so its {} decoding stays a suspect the activations cannot name",
                       producer_name(producer), type);
  if (producer == Producer::external)
    return fmt::format("record {} as your engine decodes it (`{}{}` rows, docs/taps.md) and the reference's "
                       "(`tapdiff run --backend reference --weights`), and diff them; decoded weights that differ "
                       "name the decoder, weights that agree leave the kernels' own {} decoding as the suspect",
                       w.empty() ? "each" : "it", kWeightTapPrefix, w.empty() ? "<name>" : w, type);
  return fmt::format("record --weights in both runs (`tapdiff run --weights`) and diff them; decoded weights that "
                     "differ name the decoder, weights that agree leave the kernels' own {} decoding (a fast path, an "
                     "embedding lookup) as the suspect",
                     type);
}

// Tied variants of different ops the trace does not record: recording those ops separates them.
std::string recording_separates(const std::vector<Judged>& ties) {
  if (std::all_of(ties.begin(), ties.end(), [&](const Judged& tie) {
        return tie.candidate->unrecorded_ops == ties.front().candidate->unrecorded_ops;
      }))
    return "";
  std::vector<std::string> ops;
  for (const Judged& tie : ties)
    for (const std::string& op : tie.candidate->unrecorded_ops)
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  return fmt::format("record {} (`--taps`, or your engine's tracer) and diff again: the ops' own values tell the "
                     "tied variants apart",
                     fmt::join(ops, ", "));
}

std::string where_text(const FirstDivergence& f) {
  return f.layer >= 0 ? fmt::format("{} at layer {}", f.name, f.layer) : f.name;
}

std::string explain(const Diagnosis& d, const FirstDivergence& f) {
  const std::string where = where_text(f);
  const std::string baseline = d.baseline_residual
                                   ? fmt::format("the correct computation from the same inputs leaves {:.2g}",
                                                 *d.baseline_residual)
                                   : "this tap has no replay";
  switch (d.evidence) {
    case Evidence::reproduced:
      return fmt::format("{} at position {} is reproduced by the hypothesis \"{}\" (relative residual {:.2g}; {}). "
                         "Look at {}.",
                         where, f.position, d.variant, d.residual, baseline, code_area(d.bug_class));
    case Evidence::tied: {
      std::string names;
      for (const auto& t : d.ties) names += fmt::format("{}\"{}\" ({})", names.empty() ? "" : " and ", t.variant, t.bug_class);
      return fmt::format("{} at position {} is reproduced equally well by {}: the run cannot tell them apart. To "
                         "separate them, {}.",
                         where, f.position, names, d.separating_experiment);
    }
    case Evidence::indicated:
      return fmt::format("{} first diverges at position {} (nmse {:.3g}); no replayed variant reproduces it ({}), "
                         "but the signatures point to {}{}. Look at {}.",
                         where, f.position, f.metrics.nmse, baseline, d.bug_class,
                         d.variant.empty() ? "" : ": " + d.variant, code_area(d.bug_class));
    case Evidence::unexplained:
      break;
  }
  return fmt::format("{} first diverges at position {} (nmse {:.3g}) and no replayed variant reproduces it ({}). "
                     "The class is unknown: the signatures say what was observed. Look at the code that computes "
                     "{} and its inputs as this run recorded them.",
                     where, f.position, f.metrics.nmse, baseline, f.name);
}

// Argmax of a logits row.
int argmax(const Row& row) {
  return row.empty() ? -1 : int(std::max_element(row.begin(), row.end()) - row.begin());
}

// Every common position agrees, and the runs, declaring one context, hold other numbers of
// tokens: a generation loop stopped short of the context it was asked for, or ran past it. The
// run whose tokens are not its context is the wrong one (the shorter, when neither is).
Diagnosis diagnose_short_run(const FirstDivergence& f, const TraceReader& a, const TraceReader& b) {
  Diagnosis d;
  d.bug_class = "token-sequence";
  d.evidence = Evidence::indicated;
  const auto n_a = std::int64_t(a.metadata().tokens.size()), n_b = std::int64_t(b.metadata().tokens.size());
  const std::int64_t n_ctx = a.metadata().dims ? a.metadata().dims->n_ctx : std::max(n_a, n_b);
  const bool actual_wrong = n_a == n_ctx || (n_b != n_ctx && n_b < n_a);
  const std::int64_t held = actual_wrong ? n_b : n_a, other = actual_wrong ? n_a : n_b;
  const std::int64_t off = std::abs(held - (held == n_ctx ? other : n_ctx));
  d.in_expected = !actual_wrong;
  d.signatures.push_back(fmt::format("every tap agrees on positions 0..{}; the expected run holds {} tokens, the "
                                     "actual {}, and both declare n_ctx {} (prompt + n-predict)",
                                     f.position - 1, n_a, n_b, n_ctx));
  d.variant = fmt::format("the {} run's generation loop {} {} position{} {} (its bound off by {})",
                          actual_wrong ? "actual" : "expected", held < other ? "ended" : "ran", off,
                          off == 1 ? "" : "s", held < other ? "early" : "past its context", off);
  d.explanation = fmt::format("The two runs agree on every common position, but the {} run holds {} tokens where "
                              "the other, asked for the same context, holds {}: {}. Look at {}.",
                              actual_wrong ? "actual" : "expected", held, other, d.variant, code_area(d.bug_class));
  return d;
}

// Every tap agrees and the tokens differ: what the actual run's loop fed instead of its own choice.
Diagnosis diagnose_tokens(const FirstDivergence& f, const TraceReader& a, const TraceReader& b) {
  const auto common = std::int64_t(std::min(a.metadata().tokens.size(), b.metadata().tokens.size()));
  if (f.position >= common) return diagnose_short_run(f, a, b);
  Diagnosis d;
  d.bug_class = "token-sequence";
  d.evidence = Evidence::indicated;
  d.signatures.push_back(fmt::format("every tap agrees on positions 0..{}, then the tokens differ", f.position - 1));
  const auto& tokens = b.metadata().tokens;
  const std::int64_t p = f.position;
  const Row logits = trace_row(b, "output", -1, p - 1);
  if (p > 0 && p < std::int64_t(tokens.size()) && !logits.empty()) {
    const int fed = tokens[std::size_t(p)], chosen = argmax(logits);
    d.signatures.push_back(fmt::format("the actual run's own logits at position {} choose token {}; it continued "
                                       "with token {}",
                                       p - 1, chosen, fed));
    if (fed != chosen) {
      const Row earlier = trace_row(b, "output", -1, p - 2);
      Row second = logits;
      if (chosen >= 0) second[std::size_t(chosen)] = -INFINITY;
      if (fed == tokens[std::size_t(p - 1)])
        d.variant = "the previous token fed again (the token written before it was chosen)";
      else if (!earlier.empty() && fed == argmax(earlier))
        d.variant = "the token chosen one step earlier (a stale sampled-token buffer)";
      else if (fed == argmax(second))
        d.variant = "the second-best token (an off-by-one in the argmax or top-k)";
      else if (fed == chosen + 1 || fed == chosen - 1)
        d.variant = "the chosen token id off by one";
      if (!d.variant.empty()) d.evidence = Evidence::reproduced;
    }
  }
  d.explanation = fmt::format(
      "The two runs computed the same values for every common position but continued with different tokens at "
      "position {}{}. Look at {}.",
      p, d.variant.empty() ? "" : ": the actual run fed " + d.variant, code_area(d.bug_class));
  return d;
}

}  // namespace

std::string code_area(const std::string& cls) {
  if (cls == "kv-cache") return "the KV cache bookkeeping: cache length, write offset, the slice attention reads";
  if (cls == "rope") return "the RoPE call: the positions array, the pairing (NORM adjacent vs NEOX half-split), the frequency base";
  if (cls == "bias") return "the bias add after the projection GEMM and how the bias tensor is loaded";
  if (cls == "matmul-layout") return "the GEMM call site: op flags and leading dimensions";
  if (cls == "attention-mask")
    return "the attention kernel's mask: its causal bound, the sliding window, and the query positions it is "
           "measured from (their upload each step)";
  if (cls == "attention-scale") return "the softmax scale of the attention kernel";
  if (cls == "softcap") return "the soft-capping of attention scores or logits: cap · tanh(x / cap), and the cap's value";
  if (cls == "softmax") return "the attention softmax: the range it normalizes over and the running max and sum";
  if (cls == "gqa-mapping") return "the kv-head index computed for each query head";
  if (cls == "dequantization") return "the dequantization kernel of this tensor's type";
  if (cls == "weight-loading") return "the weight loader: each tensor's byte size, offset and upload into its buffer";
  if (cls == "shape") return "the config value that sizes this op's buffers and GEMM dimensions";
  if (cls == "normalization") return "RMSNorm: the weight multiply and epsilon";
  if (cls == "token-sequence") return "the tokens fed to the model: the prompt's assembly (BOS) and the generation loop's bookkeeping";
  if (cls == "layer-loop") return "the forward pass's loop over the layers: its bounds, the layer range or stages it runs";
  if (cls == "sampling") return "the sampler's edits of the logits (temperature, penalties, top-k): on a copy, not the buffer the head wrote";
  if (cls == "residual")
    return "the residual adds around attention and the FFN, and any multiplier on the block's output (Granite's "
           "residual multiplier)";
  if (cls == "logit-scale") return "the head's scaling of the logits (Granite's logit scale divides them) and its value";
  if (cls == "activation") return "the FFN's gated activation: which projection is gated and the activation function";
  if (cls == "tap-layout")
    return "how the engine lays the tap's rows out as it records them (the catalogue's layout: docs/taps.md); the "
           "numbers may be right";
  if (cls == "moe-routing")
    return "a mixture of experts' routing: the softmax over the router's logits, which experts the top-k keeps, the "
           "renormalization of their weights and where the weights are applied";
  if (cls == "embedding") return "the embedding lookup: the row index and any scaling";
  if (cls == "buffer") return "the op's output buffer: aliasing with another buffer, a missing write or copy";
  if (cls == "non-finite") return "the first op producing NaN/Inf (overflow in f16, division by zero, uninitialized memory)";
  if (cls == "nondeterministic") return "races and uninitialized reads: two runs of the same engine on the same input disagree";
  return "the op that produces this tap";
}

Diagnosis diagnose(const DiffResult& r, const TraceReader& a, const TraceReader& b,
                   const std::string& model_path) {
  return diagnose_at(r, *r.first, a, b, b, model_path);
}

namespace {

// A projection right for the first r0 rows of every prefill batch and wrong from there, never
// wrong in a decode step: r0. The row's place in its batch, not its values, decides: the batched
// GEMM's tiling. A row over tolerance that the jump test let pass (an earlier root's error) is
// neither right nor wrong: then nothing is said.
std::optional<std::int64_t> wrong_from_batch_row(const TapComparison& t, std::int64_t prompt, std::int64_t chunk) {
  for (const RowMetrics& row : t.rows)
    if (!row.diverged && !(row.nmse <= t.threshold_nmse)) return std::nullopt;
  const std::int64_t step = chunk > 0 ? chunk : prompt;
  std::optional<std::int64_t> from;
  std::int64_t longest_right = 0;  // the longest batch with no wrong row
  for (std::int64_t start = 0; start < prompt; start += step) {
    const std::int64_t end = std::min(prompt, start + step);
    std::int64_t first_wrong = -1;
    for (const RowMetrics& row : t.rows) {
      if (row.position < start || row.position >= end) continue;
      if (row.diverged && first_wrong < 0) first_wrong = row.position - start;
      if (!row.diverged && first_wrong >= 0) return std::nullopt;  // wrong rows then a right one
    }
    if (first_wrong < 0) longest_right = std::max(longest_right, end - start);
    else if (first_wrong == 0 || (from && *from != first_wrong)) return std::nullopt;
    else from = first_wrong;
  }
  if (!from || longest_right > *from) return std::nullopt;
  for (const RowMetrics& row : t.rows)
    if (row.position >= prompt && row.diverged) return std::nullopt;
  return from;
}

// Variants of different classes that tie on attn.probs may predict different attn.out, which
// the same kernel computed from those probabilities (a cache whose slot 0 holds the current row,
// a mask that shows key 0 only: the same one-hot weights over other values). Where the trace holds
// attn.out, the tied variants it does not give drop out, and a signature says which.
void keep_ties_the_fused_output_gives(Judgement& j, const DiffResult& r, const FirstDivergence& f,
                                      const TraceReader& b, ReplayInputs& in, const std::vector<std::int64_t>& positions,
                                      std::vector<std::string>& signatures) {
  if (f.name != "attn.probs" && f.name != "attn.probs.summary") return;
  const auto classes_tied = [&] {
    return std::any_of(j.reproducing.begin(), j.reproducing.end(), [&](const Judged& t) {
      return t.candidate->bug_class != j.reproducing.front().candidate->bug_class;
    });
  };
  const TapComparison* out = find_tap(r, full_tap_name("attn.out", f.layer));
  if (j.reproducing.empty() || !classes_tied() || !out) return;
  Rows actual, expected;
  for (auto p : positions) {
    actual.push_back(trace_row(b, "attn.out", f.layer, p));
    expected.push_back(Row{});
  }
  const std::vector<Candidate> fused = candidates_for("attn.out", f.layer, in);
  const Judgement by_out = judge(fused, positions, actual, expected, out->threshold_nmse, "attn.out");
  std::vector<Judged> kept, dropped;
  for (const Judged& t : j.reproducing) {
    const bool gives = std::any_of(by_out.reproducing.begin(), by_out.reproducing.end(),
                                   [&](const Judged& o) { return o.candidate->variant == t.candidate->variant; });
    (gives ? kept : dropped).push_back(t);
  }
  if (kept.empty() || dropped.empty()) return;
  std::vector<std::string> ruled_out;  // classes none of the kept variants is of
  for (const Judged& t : dropped)
    if (std::none_of(kept.begin(), kept.end(), [&](const Judged& k) { return k.candidate->bug_class == t.candidate->bug_class; }) &&
        std::find(ruled_out.begin(), ruled_out.end(), t.candidate->bug_class) == ruled_out.end())
      ruled_out.push_back(t.candidate->bug_class);
  signatures.push_back(fmt::format("attn.out, computed by the same kernel from these probabilities, rules out {} of "
                                   "the {} tied variants{}",
                                   dropped.size(), dropped.size() + kept.size(),
                                   ruled_out.empty() ? std::string()
                                                     : fmt::format(" (every {} one)", fmt::join(ruled_out, " and every "))));
  j.reproducing = std::move(kept);
}

// The op's diagnosis: signatures, then the variants replayed from `inputs`.
Diagnosis diagnose_op(const DiffResult& r, const FirstDivergence& f, const TraceReader& a, const TraceReader& b,
                      const TraceReader& inputs, const std::string& model_path) {
  Diagnosis d;
  d.bug_class = "unexplained";
  const Observations seen = observe(r, f, a, b);
  d.signatures = seen.lines;
  const TapComparison* t = find_tap(r, f.tap);
  const auto masked = f.name == "output" && t ? masked_to_minus_infinity(trace_row(a, f.name, f.layer, f.position),
                                                                         trace_row(b, f.name, f.layer, f.position),
                                                                         t->threshold_nmse)
                                              : std::nullopt;
  try {
    ReplayModel model(model_path.empty() ? a.metadata().model_path : model_path, a.metadata().model_sha256,
                      a.metadata().hparams);
    ReplayInputs in = replay_inputs(inputs, b, model, a.metadata().prompt_length);
    const UnrecordedInputs gap = unrecorded_inputs(f.name, f.layer, inputs, a);
    auto candidates =
        !gap.replayed() ? candidates_for(f.name, f.layer, in) : block_candidates(f.name, f.layer, in, gap.ops,
                                                                   f.position >= a.metadata().prompt_length);
    const auto positions = evaluated_positions(t, f, a.metadata().prompt_length);
    // The same op of another layer, wrong the same way, is the same bug twice (every layer's
    // attention one-hot, say), not a copy.
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                    [&](const Candidate& c) {
                                      const TapComparison* source = c.generic ? find_tap(r, c.takes) : nullptr;
                                      return source && source->name == f.name &&
                                             wrong_at(*source, f.diverged_positions);
                                    }),
                     candidates.end());
    Rows actual, expected;
    for (auto p : positions) {
      actual.push_back(trace_row(b, f.name, f.layer, p));
      expected.push_back(trace_row(a, f.name, f.layer, p));
    }
    // A divergence under the threshold (a confirmed suspect) is judged at the floor that confirmed it.
    const bool under = t && std::any_of(t->rows.begin(), t->rows.end(), [&](const RowMetrics& row) {
      return row.position == f.position && row.confirmed_suspect();
    });
    const double tolerance = !t ? 1e-8 : under ? t->own_error_floor_nmse : t->threshold_nmse;
    Judgement j = judge(candidates, positions, actual, expected, tolerance, f.name);
    keep_ties_the_fused_output_gives(j, r, f, b, in, positions, d.signatures);
    d.baseline_residual = j.baseline_residual;
    if (!j.reproducing.empty()) {
      const Judged& best = j.reproducing.front();
      d.variant = best.candidate->variant;
      if (find_tap(r, best.candidate->takes)) d.copied_from = best.candidate->takes;
      // Computed right from what a carrier tap holds, within the tie: that tap's error, whichever
      // variant heads the tie (a cache written wrong reads as its own error carried).
      const auto carrier = std::find_if(j.reproducing.begin(), j.reproducing.end(),
                                        [](const Judged& tie) { return !tie.candidate->carries.empty(); });
      if (carrier != j.reproducing.end()) d.carried_from = carrier->candidate->carries;
      d.residual = best.residual;
      d.bug_class = best.candidate->bug_class;
      d.evidence = Evidence::reproduced;
      std::vector<std::string> classes;
      for (const Judged& tie : j.reproducing) {
        d.ties.push_back({tie.candidate->variant, tie.residual, tie.candidate->bug_class});
        classes.push_back(tie.candidate->bug_class);
        if (tie.candidate->bug_class != d.bug_class) d.evidence = Evidence::tied;
      }
      if (d.ties.size() == 1) d.ties.clear();
      if (d.evidence == Evidence::tied) d.bug_class = "unexplained";
      const bool identical = std::all_of(j.reproducing.begin(), j.reproducing.end(), [&](const Judged& tie) {
        return tie.residual == j.reproducing.front().residual;
      });
      if (!d.ties.empty()) d.separating_experiment = separating_experiment(classes, identical);
      if (d.evidence == Evidence::tied)
        if (std::string record = recording_separates(j.reproducing); !record.empty()) d.separating_experiment = record;
    }
    for (const Judged& h : j.runners_up) d.runners_up.push_back({h.candidate->variant, h.residual, h.candidate->bug_class});
    // Unexplained at an op reading a quantized weight: its decoder is a suspect the activations
    // cannot name (every program decodes the weight its own way). The weights as decoded can.
    const std::string w = weight_read_by(f.name, f.layer, model.config());
    const GgufTensorInfo* wt = j.reproducing.empty() && !masked && !w.empty() ? model.tensor(w) : nullptr;
    const auto holds = [&w](const TraceReader& trace) { return holds_decoded(trace, w); };
    if (wt && ggml_type_traits(wt->type).block_elems > 1 && !(holds(a) && holds(b))) {
      const std::string_view type = ggml_type_name(wt->type);
      d.signatures.push_back(fmt::format("{} is {} and the traces do not hold it as decoded: {}", w, type,
                                         record_decoded(b.metadata().producer, w, type)));
      d.decoder_suspect = w;
    }
    // Likewise the quantized weights of the ops the trace does not record (whose replay leaves a
    // decoder's variants out: diff/block_replay.hpp).
    if (j.reproducing.empty() && !masked && gap.replayed()) {
      std::vector<std::string> suspects, types;
      for (const TapInfo* op : gap.ops) {
        const std::string ow = weight_read_by(op->name, op->layer, model.config());
        const GgufTensorInfo* ot = ow.empty() ? nullptr : model.tensor(ow);
        if (!ot || ggml_type_traits(ot->type).block_elems == 1 || (holds_decoded(a, ow) && holds_decoded(b, ow))) continue;
        suspects.push_back(ow);
        if (std::find(types.begin(), types.end(), ggml_type_name(ot->type)) == types.end())
          types.emplace_back(ggml_type_name(ot->type));
      }
      if (!suspects.empty())
        d.signatures.push_back(fmt::format(
            "the ops the trace does not record read {} ({}), which the traces do not hold as decoded: {}",
            fmt::join(suspects, ", "), fmt::join(types, ", "),
            record_decoded(b.metadata().producer, suspects.size() == 1 ? suspects.front() : "",
                           fmt::format("{}", fmt::join(types, "/")))));
    }
    // An embedding row is its table's decoded row: how it differs block by block can name the decoder.
    const std::string shape = wt && f.name == "token_embd" ? decoder_structure(expected, actual, wt->type) : "";
    if (!shape.empty()) {
      d.bug_class = "dequantization";
      d.evidence = Evidence::indicated;
      d.variant = shape;
    }
  } catch (const std::exception& e) {
    d.signatures.push_back(fmt::format("hypothesis replay skipped: {}", e.what()));
  }

  if (d.evidence == Evidence::unexplained && masked) {
    std::vector<std::string> ids;
    for (std::size_t id : *masked)
      if (ids.size() < 8) ids.push_back(std::to_string(id));
    if (masked->size() > ids.size()) ids.push_back("...");
    d.bug_class = "sampling";
    d.evidence = Evidence::indicated;
    d.variant = fmt::format("the correct logits with token{} {} set to -inf at position {}: a sampler's mask (a banned "
                            "or suppressed token, an end-of-sequence ban until a minimum length, a grammar) written "
                            "into the logits buffer before it was recorded",
                            masked->size() == 1 ? "" : "s", fmt::join(ids, ", "), f.position);
  }
  // NaN/Inf that no variant reproduces: where they first appear is the finding.
  if (d.evidence == Evidence::unexplained && f.metrics.nonfinite > f.metrics.nonfinite_expected) {
    d.bug_class = "non-finite";
    d.evidence = Evidence::indicated;
    d.explanation = fmt::format("{} at position {} is the first tap holding NaN/Inf while its inputs are finite. "
                                "Look at {}.", f.tap, f.position, code_area(d.bug_class));
    return d;
  }
  if (d.evidence == Evidence::unexplained && seen.constant_offset && tap_class(f.name) == "projection") {
    d.bug_class = "bias";
    d.evidence = Evidence::indicated;
  }
  if (const auto from = d.evidence == Evidence::unexplained && t && tap_class(f.name) == "projection"
                            ? wrong_from_batch_row(*t, a.metadata().prompt_length, prefill_chunk_of(b.metadata()))
                            : std::nullopt) {
    d.bug_class = "matmul-layout";
    d.evidence = Evidence::indicated;
    const std::int64_t prompt = a.metadata().prompt_length;
    const bool decode_seen = std::any_of(t->rows.begin(), t->rows.end(), [&](const RowMetrics& row) {
      return row.position >= prompt;
    });
    d.variant = fmt::format("rows {}.. of each prefill batch wrong, the rows before them{} right: the batched GEMM's "
                            "tiling from batch row {} (a tile or panel edge), or the bias add after it",
                            *from, decode_seen ? " and every decode step" : "", *from);
  }
  if (d.evidence == Evidence::unexplained && seen.head_factors) {
    d.bug_class = "softmax";
    d.evidence = Evidence::indicated;
    d.variant = fmt::format("each head's probabilities the correct ones times a factor of its own ({:.4g} to {:.4g}) "
                            "at position {}: the softmax's sum taken over other terms than the keys it normalizes",
                            seen.head_factors->first, seen.head_factors->second, f.position);
  }
  // A norm's weight acts element by element: one factor over the whole row is its statistic.
  if (d.evidence == Evidence::unexplained && seen.scale && tap_class(f.name) == "norm") {
    d.bug_class = "normalization";
    d.evidence = Evidence::indicated;
    d.variant = fmt::format("the correct row times {:.6g} at position {}: the norm's statistic (its sum of squares, "
                            "the count it divides by, or epsilon) computed wrong, or one factor over its weight",
                            *seen.scale, f.position);
  }
  d.explanation = explain(d, f);
  return d;
}

}  // namespace

Diagnosis diagnose_at(const DiffResult& r, const FirstDivergence& f, const TraceReader& a, const TraceReader& b,
                      const TraceReader& inputs, const std::string& model_path) {
  if (f.tap == "tokens") return diagnose_tokens(f, a, b);
  // The amplification check found the expected trace's row off its own inputs and the actual's
  // right: the bug to diagnose is the expected trace's.
  const TapComparison* t = find_tap(r, f.tap);
  if (&inputs != &b || !t || !t->expected_off_its_inputs) return diagnose_op(r, f, a, b, inputs, model_path);
  Diagnosis d = diagnose_op(r, f, b, a, a, model_path);
  d.in_expected = true;
  d.explanation = fmt::format("The expected trace ({}) is the one that diverged here: the actual trace's {} is what "
                              "the correct computation gives from its own inputs, the expected trace's is not. "
                              "Diagnosed with the two traces' roles swapped (in the signatures, \"actual\" is the "
                              "expected trace): {}",
                              a.path(), f.tap, d.explanation);
  return d;
}

}  // namespace tapdiff::diff
