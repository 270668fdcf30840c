#include "diff/compare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "diff/amplified.hpp"
#include "diff/coverage.hpp"
#include "diff/diagnose.hpp"
#include "diff/metrics.hpp"
#include "diff/near_tie.hpp"
#include "diff/routing_ties.hpp"
#include "diff/nonfinite.hpp"
#include "diff/pair_reader.hpp"
#include "diff/roots.hpp"
#include "diff/shapes.hpp"
#include "diff/tap_graph.hpp"
#include "diff/weights.hpp"
#include "tapdiff/row_shape.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::diff {
namespace {

constexpr int kTopTokens = 5;
// A row under its threshold is a suspect only when its error is this many times its inputs':
// an op that adds its own error, not one passing on (and amplifying) what it was given.
constexpr double kSuspectJump = 1000;

TraceSide side(const TraceReader& r) { return {r.path(), r.metadata(), r.complete()}; }

// The number of leading positions whose tokens agree.
std::int64_t common_token_prefix(const TraceMetadata& a, const TraceMetadata& b) {
  const std::size_t n = std::min(a.tokens.size(), b.tokens.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a.tokens[i] != b.tokens[i]) return static_cast<std::int64_t>(i);
  return static_cast<std::int64_t>(n);
}

void check_compatible(const TraceReader& a, const TraceReader& b, DiffResult& r) {
  const auto& ma = a.metadata();
  const auto& mb = b.metadata();
  if (!ma.model_sha256.empty() && !mb.model_sha256.empty() && ma.model_sha256 != mb.model_sha256) {
    r.findings.push_back({"metadata", "",
                          fmt::format("different models: expected {} (sha256 {}), actual {} (sha256 {})",
                                      ma.model_path, ma.model_sha256, mb.model_path, mb.model_sha256)});
    r.verdict = Verdict::incompatible;
  }
  for (const auto& [key, value] : ma.hparams) {
    auto it = mb.hparams.find(key);
    if (it != mb.hparams.end() && it->second != value)
      r.findings.push_back({"metadata", "", fmt::format("hyperparameter {} differs", key)});
  }
}

// Runs of other lengths (prompt + n-predict): attn.probs rows are as wide as each run's context.
// The longer run's are read over the shorter one's keys; the keys cut are future keys at every
// position both runs hold (attn.probs.summary still weighs them, whole). A note says so.
void compare_over_the_shorter_context(TraceReader& a, TraceReader& b, DiffResult& r) {
  const auto& da = a.metadata().dims;
  const auto& db = b.metadata().dims;
  if (!da || !db || da->n_ctx == db->n_ctx) return;
  const bool a_longer = da->n_ctx > db->n_ctx;
  TraceReader& longer = a_longer ? a : b;
  const std::int64_t n_ctx = std::min(da->n_ctx, db->n_ctx);
  std::map<std::string, std::size_t> cut;  // name -> taps
  for (const TapInfo* t : longer.read_context_as(n_ctx)) ++cut[t->name];
  for (const auto& [name, n] : cut)
    r.findings.push_back({"context-length", name,
                          fmt::format("compared over keys 0..{} ({} tap{}): n_ctx {} in the expected trace and {} in "
                                      "the actual (runs of different lengths: prompt + n-predict); the {} trace's "
                                      "keys from {} on come after every position both runs hold",
                                      n_ctx - 1, n, n == 1 ? "" : "s", da->n_ctx, db->n_ctx,
                                      a_longer ? "expected" : "actual", n_ctx)});
}

// No row of any tap, no weight and no generated token was compared: a pass would say nothing
// about the engine. (Traces of generated tokens alone compare those.)
bool nothing_compared(const DiffResult& r, const TraceMetadata& expected) {
  if (r.compared_positions > expected.prompt_length) return false;
  for (const TapComparison& t : r.taps)
    if (!t.rows.empty()) return false;
  for (const WeightComparison& w : r.weights)
    if (w.compared_rows > 0) return false;
  return true;
}

std::string nothing_compared_detail(const TraceReader& a, const TraceReader& b, bool any_pair) {
  bool common = false;
  for (const TapInfo& t : a.taps()) common = common || b.find(t.name, t.layer) != nullptr;
  std::string why = !common    ? "the traces hold no tap in common"
                    : any_pair ? "no tap holds rows at a position both traces recorded with the same tokens"
                               : "no tap both traces hold could be compared (see the notes)";
  for (const auto& [trace, label] : {std::pair{&a, "expected"}, std::pair{&b, "actual"}}) {
    if (trace->taps().empty()) why += fmt::format("; the {} trace holds no taps", label);
    if (!trace->complete())
      why += fmt::format("; the {} trace is incomplete ({} steps committed)", label, trace->committed_steps());
  }
  return "nothing compared: " + why + " (check the runs' --taps, --layers and --positions filters)";
}

struct Measured {
  TapComparison tap;
  std::vector<LogitsSummary::Position> logits;  // the output tap's, whole rows in both traces
};

LogitsSummary::Position compare_logits(const float* expected, const float* actual, std::int64_t n) {
  LogitsSummary::Position p;
  p.kl = kl_divergence(expected, actual, n);
  p.top_expected = top_k(expected, n, kTopTokens);
  p.top_actual = top_k(actual, n, kTopTokens);
  p.same_top1 = p.top_expected.front().first == p.top_actual.front().first;
  p.top5_overlap = 0;
  for (const auto& x : p.top_expected)
    for (const auto& y : p.top_actual) p.top5_overlap += x.first == y.first;
  return p;
}

TapComparison comparison_of(const TapInfo& ta, const TapInfo& tb, const ToleranceProfile& profile) {
  TapComparison c;
  c.name = ta.name;
  c.layer = ta.layer;
  c.full_name = ta.full_name;
  c.tap_class = std::string(tap_class(ta.name));
  c.row_shape = ta.sharded() ? ta.row_shape : tb.row_shape;
  c.threshold_nmse = profile.threshold(c.tap_class);
  c.jump_factor = profile.jump_factor;
  c.replay_band_nmse = profile.replay_band_nmse;
  c.own_error_floor_nmse = profile.own_error_floor_nmse;
  return c;
}

// Rows of a tap compared position by position (whole shapes agree); top-k and KL divergence
// where both traces hold every token's logit.
void measure_rows(const PairRows& rows, bool whole_logits, Measured& out) {
  const std::vector<std::int64_t>& pa = rows.positions_a;
  const std::vector<std::int64_t>& pb = rows.positions_b;
  for (std::size_t i = 0, j = 0; i < pa.size() && j < pb.size();) {
    if (pa[i] < pb[j]) {
      ++i;
    } else if (pb[j] < pa[i]) {
      ++j;
    } else {
      const float* a = rows.a + i * rows.stride_a;
      const float* b = rows.b + j * rows.stride_b;
      RowMetrics m = row_metrics(a, b, rows.row_size);
      m.position = pa[i];
      out.tap.rows.push_back(m);
      if (whole_logits) {
        out.logits.push_back(compare_logits(a, b, rows.row_size));
        out.logits.back().position = m.position;
      }
      ++i;
      ++j;
    }
  }
}

// Every pair measured, read in `order` (a permutation of pairs) while the pairs read before
// are measured.
std::vector<Measured> measure_pairs(const TraceReader& a, const TraceReader& b, const std::vector<TapPair>& pairs,
                                    const std::vector<std::size_t>& order, std::int64_t last_position,
                                    const ToleranceProfile& profile) {
  std::vector<Measured> measured(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) measured[i].tap = comparison_of(*pairs[i].first, *pairs[i].second, profile);
  if (last_position < 0) return measured;
  std::vector<TapPair> in_order;
  for (std::size_t i : order) in_order.push_back(pairs[i]);
  PairReader reader(a, b, std::move(in_order), last_position);
  while (const PairRows* rows = reader.next()) {
    const auto& [ta, tb] = pairs[order[rows->pair]];
    measure_rows(*rows, ta->name == "output" && !ta->sharded() && !tb->sharded(), measured[order[rows->pair]]);
  }
  return measured;
}

// One note per tap name a trace stores in a declared layout: what reading it aligned.
void note_alignments(const TraceReader& t, const char* which, DiffResult& r) {
  std::map<std::string, std::pair<std::string, std::size_t>> by_name;  // name -> (note, taps)
  for (const TapInfo& info : t.taps())
    if (!info.layout_note.empty()) {
      auto& [note, n] = by_name[info.name];
      note = info.layout_note;
      ++n;
    }
  for (const auto& [name, note] : by_name)
    r.findings.push_back({"layout", name,
                          fmt::format("the {} trace ({}) declares its layout for {} tap{}: {}", which,
                                      producer_name(t.metadata().producer), note.second,
                                      note.second == 1 ? "" : "s", note.first)});
}

// The jump test, now that every tap's errors are known. In lockstep every op ran on the
// expected inputs: a row diverges when its own error exceeds the threshold.
void mark_divergences(DiffResult& r, int n_layer) {
  const bool lockstep = r.mode == DiffMode::lockstep;
  std::map<std::pair<std::string, int>, const TapComparison*> by_name;
  for (const auto& t : r.taps) by_name[{t.name, t.layer}] = &t;
  // A tap's inputs as the traces hold them, resolved once per tap. A producer without cache
  // read-backs (llama.cpp) caches what it wrote; an input neither trace records (llama.cpp's
  // phi3 graph leaves resid.attn unnamed) carries what its own inputs carry, two levels up; one
  // the model has no op for (attn_q_norm outside qwen3) carries nothing. Where nothing two levels
  // up is recorded (an engine that records every other layer's stream), the nearest recorded taps
  // up the graph stand for the inputs, at every earlier position.
  const auto held = [&](const ResolvedInput& in) { return by_name.count({in.name, in.layer}) > 0; };
  const auto held_inputs = [&](const TapComparison& t) {
    std::vector<ResolvedInput> out, level = tap_inputs(t.name, t.layer, n_layer);
    std::set<std::pair<std::string, int>> seen;
    for (int depth = 0; !level.empty() && (depth <= 2 || out.empty()); ++depth) {
      std::vector<ResolvedInput> up;
      for (ResolvedInput in : level) {
        if (!held(in) && (in.name == "kv.k" || in.name == "kv.v"))
          in.name = in.name == "kv.k" ? "attn_k.rope" : "attn_v";
        if (held(in)) {
          out.push_back(in);
        } else if (depth < 2 || (out.empty() && seen.insert({in.name, in.layer}).second)) {
          // An attention block neither trace records mixes every earlier position of its stream.
          const bool mixed = in.name == "resid.attn" && !held({"attn_output", in.layer}) &&
                             !held({"attn_post_norm", in.layer});
          for (ResolvedInput earlier : tap_inputs(in.name, in.layer, n_layer)) {
            earlier.all_earlier_positions =
                earlier.all_earlier_positions || in.all_earlier_positions || mixed || depth >= 2;
            up.push_back(std::move(earlier));
          }
        }
      }
      level = std::move(up);
    }
    return out;
  };
  auto nmse_at = [&](const ResolvedInput& in, std::int64_t p) {
    double worst = 0;
    for (const auto& row : by_name.at({in.name, in.layer})->rows) {
      if (row.position > p) break;
      if (row.position == p || in.all_earlier_positions) worst = std::max(worst, row.nmse);
    }
    return worst;
  };
  for (auto& t : r.taps) {
    const auto inputs = held_inputs(t);
    t.inputs_recorded = !inputs.empty() || tap_inputs(t.name, t.layer, n_layer).empty();
    for (auto& row : t.rows) {
      row.input_nmse = 0;
      if (!lockstep)
        for (const auto& in : inputs) row.input_nmse = std::max(row.input_nmse, nmse_at(in, row.position));
      const bool new_nonfinite = row.nonfinite > row.nonfinite_expected && std::isfinite(row.input_nmse);
      const bool over = std::isfinite(row.nmse) && row.nmse > t.threshold_nmse &&
                        row.nmse > t.jump_factor * row.input_nmse;
      row.suspect = !new_nonfinite && !over && t.own_error_floor_nmse > 0 && row.nmse > t.own_error_floor_nmse &&
                    row.nmse > kSuspectJump * row.input_nmse;
      row.diverged = new_nonfinite || over || row.suspect;
    }
    t.min_passing_nmse = 0;
    for (const auto& row : t.rows) t.min_passing_nmse = std::max(t.min_passing_nmse, row.nmse);
  }
}

PositionPattern pattern_of(const TapComparison& t, std::vector<std::int64_t>& diverged) {
  diverged.clear();
  for (const auto& row : t.rows)
    if (row.diverged) diverged.push_back(row.position);
  if (diverged.empty()) return PositionPattern::none;
  if (diverged.size() == t.rows.size()) return PositionPattern::all;
  std::size_t tail = 0;
  for (const auto& row : t.rows) tail += row.position >= diverged.front();
  return tail == diverged.size() ? PositionPattern::from : PositionPattern::some;
}

// Two runs that closed cleanly and declare the same context (prompt + n-predict) but hold other
// numbers of tokens: one generation loop stopped short of its context (or ran past it).
bool other_lengths_of_one_context(const TraceReader& a, const TraceReader& b) {
  const auto& da = a.metadata().dims;
  const auto& db = b.metadata().dims;
  return a.complete() && b.complete() && da && db && da->n_ctx == db->n_ctx &&
         a.metadata().tokens.size() != b.metadata().tokens.size();
}

void find_first_divergence(DiffResult& r, const TraceReader& a, const TraceReader& b) {
  for (const auto& t : r.taps) {
    const RowMetrics* row = t.first_diverged();
    if (!row) continue;
    FirstDivergence f;
    f.tap = t.full_name;
    f.name = t.name;
    f.layer = t.layer;
    f.position = row->position;
    f.metrics = *row;
    f.pattern = pattern_of(t, f.diverged_positions);
    r.first = f;
    return;
  }
  // No numeric divergence before the tokens part: the token sequence itself is the finding, as
  // is a run that ends before the other where both declare one context.
  const auto& ta = a.metadata().tokens;
  const auto& tb = b.metadata().tokens;
  const auto common = static_cast<std::int64_t>(std::min(ta.size(), tb.size()));
  if (r.compared_positions < common || (r.compared_positions == common && other_lengths_of_one_context(a, b))) {
    FirstDivergence f;
    f.tap = "tokens";
    f.name = "tokens";
    f.position = r.compared_positions;
    f.pattern = PositionPattern::from;
    f.diverged_positions = {r.compared_positions};
    r.first = f;
  }
}

// A tap the expected trace lacks: why it may be no tap at all (a name outside the catalogue, a
// layer the model does not have) is the likelier typo of the producer.
std::string only_in_actual(const TapInfo& info, const std::optional<TapDims>& dims) {
  std::string detail = "recorded in the actual trace only";
  const TapSpec* spec = find_tap_spec(info.name);
  if (spec == nullptr)
    detail += fmt::format(": {} is not a catalogue tap (docs/taps.md)", info.name);
  else if (dims && info.layer >= dims->n_layer)
    detail += fmt::format(": the model has layers 0..{}", dims->n_layer - 1);
  return detail;
}

// Tokens that differ where either run was given its token (its prompt) are no divergence of
// an engine: the runs had other inputs. Turns the token-sequence finding into a `prompt` one;
// whether it did.
bool mark_other_prompts(DiffResult& r, const TraceMetadata& a, const TraceMetadata& b) {
  const std::int64_t p = r.compared_positions;
  if (p >= std::int64_t(std::min(a.tokens.size(), b.tokens.size())) || p >= std::max(a.prompt_length, b.prompt_length))
    return false;
  const auto given = [p](const TraceMetadata& m) {
    const int token = m.tokens[std::size_t(p)];
    if (p < m.prompt_length) return fmt::format("token {} in its prompt of {} tokens", token, m.prompt_length);
    return fmt::format("token {}, generated after its prompt of {} tokens", token, m.prompt_length);
  };
  const auto f = std::find_if(r.findings.begin(), r.findings.end(), [](const StructuralFinding& x) {
    return x.kind == "token-sequence" || x.kind == "near-tie";
  });
  const StructuralFinding prompt{
      "prompt", "tokens",
      fmt::format("the runs were given other prompts: at position {} the expected run has {}, the actual run {}. "
                  "Nothing from position {} on is compared. Two tokenizations of the same text do this (a BOS added "
                  "or dropped, other merges): compare their token ids (`tapdiff tokenize`)",
                  p, given(a), given(b), p)};
  if (f != r.findings.end()) *f = prompt;
  else r.findings.push_back(prompt);
  return true;
}

// The model the replays read: --model, else the path the expected trace recorded, from the
// working directory or beside either trace (a relative path is the producer's working
// directory's). Not found: why, for a finding where a divergence needed the replay.
struct ReplayModelPath {
  std::string path;
  std::string not_found;
};
ReplayModelPath replay_model_path(const DiffOptions& options, const TraceReader& a, const TraceReader& b) {
  namespace fs = std::filesystem;
  if (!options.model_path.empty() || !options.diagnose) return {options.model_path, ""};
  const fs::path recorded(a.metadata().model_path);
  if (recorded.empty())
    return {"", "the traces record no model path: no op can be replayed; pass the model with --model"};
  std::vector<fs::path> tried{recorded};
  if (recorded.is_relative())
    for (const TraceReader* t : {&a, &b}) {
      const fs::path beside = fs::path(t->path()).parent_path() / recorded;
      if (std::find(tried.begin(), tried.end(), beside) == tried.end()) tried.push_back(beside);
    }
  std::error_code ec;
  for (const fs::path& path : tried)
    if (fs::is_regular_file(path, ec)) return {path.string(), ""};
  std::vector<std::string> listed;
  for (const fs::path& path : tried) listed.push_back(path.string());
  return {recorded.string(), fmt::format("the traces' model {} was not found (tried {}): no op can be replayed, so no "
                                         "class can be reproduced; pass the model with --model",
                                         recorded.string(), fmt::join(listed, ", "))};
}

}  // namespace

DiffResult diff_traces(const std::string& expected_path, const std::string& actual_path,
                       const DiffOptions& options) {
  TraceReader a(expected_path);
  TraceReader b(actual_path);
  DiffResult r;
  r.expected = side(a);
  r.actual = side(b);
  const ToleranceProfile profile = options.profile ? *options.profile
                                                   : profile_for_precisions(a.metadata().precision, b.metadata().precision);
  r.profile = profile.name;
  r.mode = options.lockstep || !b.metadata().lockstep_source.empty() ? DiffMode::lockstep
           : options.all                                               ? DiffMode::all
                                                                       : DiffMode::first;
  check_compatible(a, b, r);
  if (r.verdict == Verdict::incompatible) return r;
  const ReplayModelPath model = replay_model_path(options, a, b);
  const std::string& model_path = model.path;
  if (!options.profile)
    for (const TraceReader* t : {&a, &b})
      if (!has_profile(t->metadata().precision))
        r.findings.push_back({"precision", "",
                              fmt::format("the {} trace's precision \"{}\" has no tolerance profile of its own: "
                                          "compared under {} (--profile names another)",
                                          t == &a ? "expected" : "actual", t->metadata().precision, profile.name)});

  r.compared_positions = common_token_prefix(a.metadata(), b.metadata());
  const auto& ta = a.metadata().tokens;
  const auto& tb = b.metadata().tokens;
  if (r.compared_positions < static_cast<std::int64_t>(std::min(ta.size(), tb.size())))
    r.findings.push_back({"token-sequence", "tokens",
                          fmt::format("position {}: expected token {}, actual token {}; positions from "
                                      "{} on are not compared",
                                      r.compared_positions, ta[std::size_t(r.compared_positions)],
                                      tb[std::size_t(r.compared_positions)], r.compared_positions)});
  else if (ta.size() != tb.size())
    r.findings.push_back({"token-sequence", "tokens",
                          fmt::format("the expected trace holds {} tokens, the actual {}{}", ta.size(), tb.size(),
                                      other_lengths_of_one_context(a, b)
                                          ? fmt::format(", though both runs declare n_ctx {} (prompt + n-predict)",
                                                        a.metadata().dims->n_ctx)
                                          : "")});

  compare_over_the_shorter_context(a, b, r);
  // Weights first: a loader or dequantization bug is the first finding, before any activation.
  const std::optional<WeightFinding> weight_finding =
      compare_weights(a, b, model_path, options.diagnose, r);
  std::vector<TapPair> pairs;  // execution order
  std::map<std::string, std::vector<std::string>> not_available;  // short name → full names
  for (const TapInfo& info : a.taps()) {
    if (is_weight_tap(info.name)) continue;
    const TapInfo* other = b.find(info.name, info.layer);
    if (!other && b.metadata().unavailable.count(info.name) > 0) {
      not_available[info.name].push_back(info.full_name);
    } else if (!other) {
      r.findings.push_back({"missing-in-actual", info.full_name, "recorded in the expected trace only"});
    } else if (info.sharded() && other->sharded() && info.alignment->covers != other->alignment->covers) {
      r.findings.push_back({"layout", info.full_name,
                            fmt::format("not compared: the traces hold different shards ({}; {})", info.layout_note,
                                        other->layout_note)});
    } else if (info.whole_shape() != other->whole_shape()) {
      const auto& dims = a.metadata().dims ? a.metadata().dims : b.metadata().dims;
      r.findings.push_back({"shape", info.full_name,
                            fmt::format("row shape {} in the expected trace, {} in the actual trace: {}",
                                        shape_string(info.row_shape), shape_string(other->row_shape),
                                        shape_explanation(info.name, info.row_shape, other->row_shape, dims)),
                            info.row_shape, other->row_shape});
    } else {
      pairs.emplace_back(&info, other);
    }
  }
  std::optional<StructuralFinding> shift = layer_shift(a, b);
  if (!shift) shift = position_shift(pairs, a, b);
  if (shift) {
    r.findings.insert(r.findings.begin(), std::move(*shift));
    r.verdict = Verdict::incompatible;
    return r;
  }
  // Read stack by stack: the layers of a tap name then come in one read per trace
  // (diff/pair_reader.hpp), not one per layer; the results keep execution order.
  std::vector<std::size_t> by_stack(pairs.size());
  std::iota(by_stack.begin(), by_stack.end(), std::size_t{0});
  std::stable_sort(by_stack.begin(), by_stack.end(), [&](std::size_t x, std::size_t y) {
    return std::tie(pairs[x].first->stack, pairs[x].first->slot) <
           std::tie(pairs[y].first->stack, pairs[y].first->slot);
  });
  for (Measured& m : measure_pairs(a, b, pairs, by_stack, r.compared_positions - 1, profile)) {
    r.taps.push_back(std::move(m.tap));
    if (m.logits.empty()) continue;
    if (!r.logits) r.logits.emplace();
    for (auto& p : m.logits) r.logits->positions.push_back(std::move(p));
  }
  for (const TapInfo& info : b.taps())
    if (!is_weight_tap(info.name) && !a.find(info.name, info.layer)) {
      if (a.metadata().unavailable.count(info.name) > 0) not_available[info.name].push_back(info.full_name);
      else r.findings.push_back({"missing-in-expected", info.full_name, only_in_actual(info, a.metadata().dims)});
    }
  // One note per tap name a producer declared it cannot record: not compared, not a bug.
  for (const auto& [name, full_names] : not_available) {
    const bool in_actual = b.metadata().unavailable.count(name) > 0;
    const TraceMetadata& m = in_actual ? b.metadata() : a.metadata();
    r.findings.push_back({"not-available", full_names.size() == 1 ? full_names.front() : name,
                          fmt::format("not compared ({} tap{}): the {} trace ({}) says: {}", full_names.size(),
                                      full_names.size() == 1 ? "" : "s", in_actual ? "actual" : "expected",
                                      producer_name(m.producer), m.unavailable.at(name))});
  }

  note_missing_positions(pairs, r.compared_positions, a, b, r);
  note_alignments(a, "expected", r);
  note_alignments(b, "actual", r);

  // The model's layers as the traces hold them, compared or not: a trace of every other layer's
  // stream reads its last layer's output through the unrecorded ones.
  mark_divergences(r, std::max(layer_count(a), layer_count(b)));
  clear_routing_ties(r, a, b, profile);
  if (r.mode != DiffMode::lockstep) {  // in lockstep every op ran on the expected inputs: its error is its own
    const bool replayed =
        options.diagnose && clear_amplified_rows(r, a, b, model_path, r.mode == DiffMode::all);
    settle_replay_band(r, replayed);
  } else if (options.diagnose) {
    confirm_lockstep_suspects(r, a, b, model_path);
  }
  drop_unconfirmed_suspects(r);
  if (r.logits) summarize_logits(*r.logits);
  find_first_divergence(r, a, b);
  // A flip at a near-tie in a reduced precision is noise: a note, not a divergence.
  if (r.first && r.first->tap == "tokens")
    if (auto note = near_tie(a, b, r.first->position, profile)) {
      r.first.reset();
      for (auto& f : r.findings)
        if (f.kind == "token-sequence") f = {"near-tie", "tokens", *note};
    }
  const bool other_prompts = mark_other_prompts(r, a.metadata(), b.metadata());
  if (other_prompts && r.first && r.first->tap == "tokens") r.first.reset();
  if (auto nonfinite = first_nonfinite_origin(r.taps)) r.findings.push_back(std::move(*nonfinite));

  // A tap in one trace only is listed (producers may filter taps); a shape mismatch or a
  // non-finite value is a bug.
  bool structural_bug = false;
  for (const auto& f : r.findings)
    structural_bug = structural_bug || f.kind == "shape" || f.kind == "non-finite";
  r.verdict = (r.first || structural_bug) ? Verdict::diverged : Verdict::pass;
  if (r.verdict == Verdict::pass && other_prompts) {
    r.verdict = Verdict::incompatible;
  } else if (r.verdict == Verdict::pass && nothing_compared(r, a.metadata())) {
    r.findings.insert(r.findings.begin(), {"nothing-compared", "", nothing_compared_detail(a, b, !pairs.empty())});
    r.verdict = Verdict::incompatible;
  } else if (r.verdict == Verdict::pass) {
    if (auto incomplete = incomplete_trace(a, b)) {
      r.findings.insert(r.findings.begin(), std::move(*incomplete));
      r.verdict = Verdict::incompatible;
    }
  }
  if (r.first && options.diagnose && (r.mode == DiffMode::first || r.first->tap == "tokens"))
    r.diagnosis = diagnose(r, a, b, model_path);
  find_roots(r, a, b, options.diagnose, model_path);
  if (!model.not_found.empty() && (r.first || !r.roots.empty()))
    r.findings.push_back({"no-model", "", model.not_found});
  if (r.mode != DiffMode::first && r.first && !r.roots.empty() && r.roots.front().at.tap == r.first->tap)
    r.diagnosis = r.roots.front().diagnosis;
  // A shape mismatch ahead of every divergence is the root: it leads (later taps fed by a
  // buffer of the wrong width diverge because of it).
  if (!r.roots.empty() && r.roots.front().kind == "shape") {
    const RootFinding& root = r.roots.front();
    FirstDivergence f = root.at;
    f.shape = true;
    f.expected_shape = root.expected_shape;
    f.actual_shape = root.actual_shape;
    r.first = f;
    r.diagnosis = root.diagnosis;
  }
  if (weight_finding) put_weight_finding_first(*weight_finding, r);
  return r;
}

}  // namespace tapdiff::diff
