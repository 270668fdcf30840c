// diff_traces on small synthetic traces: what counts as a divergence (thresholds and the jump
// test), the first divergence and its position pattern, non-finite origins, token sequences,
// incompatible models, shape and missing-tap findings.
#include <cmath>
#include <functional>
#include <gtest/gtest.h>
#include <limits>
#include <unistd.h>

#include "diff/compare.hpp"
#include "diff/repeats.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::diff {
namespace {

constexpr int kPositions = 5;
constexpr int kWidth = 4;

// (name, layer, position, row) → the row to record (a perturbation hook).
using Perturb = std::function<void(const std::string&, int, int, std::vector<float>&)>;

struct TraceSpec {
  std::vector<std::int32_t> tokens = {1, 2, 3, 4, 5};
  std::string sha = std::string(64, 'a');
  Perturb perturb = [](const std::string&, int, int, std::vector<float>&) {};
  std::string skip_tap;                      // "name:layer" not recorded
  std::vector<std::int64_t> q0_shape = {kWidth};
  int from = 0, to = kPositions;  // rows recorded at positions [from, to); none when from == to
  int shift = 0;                  // rows of position p recorded at p + shift (a producer counting from 1)
  int layer_shift = 0;            // rows of layer l recorded as layer l + layer_shift
  int prompt_length = 2;          // tokens after it were generated (diff compares those too)
  bool closed = true;             // false: left as a killed run leaves it, complete=0
  std::int64_t n_ctx = 0;         // > 0: the run declares /dims with this context (prompt + n-predict)
};

std::string write_trace(const std::string& tag, const TraceSpec& s) {
  const std::string path = ::testing::TempDir() + "tapdiff_cmp_" + std::to_string(getpid()) + "_" + tag + ".h5";
  TraceMetadata m;
  m.producer = Producer::external;
  m.model_path = "/nonexistent/model.gguf";
  m.model_sha256 = s.sha;
  m.prompt_length = s.prompt_length;
  m.tokens = s.tokens;
  if (s.n_ctx > 0) m.dims = TapDims{2, kWidth, 2, 1, kWidth / 2, 8, 16, s.n_ctx};
  TraceWriter w(path, m);
  const std::vector<std::pair<std::string, int>> taps = {
      {"token_embd", -1}, {"attn_norm", 0}, {"attn_q", 0}, {"attn_norm", 1}, {"attn_q", 1}};
  for (int p = 0; p < kPositions; ++p) {
    for (const auto& [name, layer] : taps) {
      if (p < s.from || p >= s.to) continue;
      if (s.skip_tap == name + ":" + std::to_string(layer)) continue;
      std::vector<float> row(kWidth);
      for (int i = 0; i < kWidth; ++i) row[std::size_t(i)] = float(1 + i + 10 * p + 100 * (layer + 1));
      s.perturb(name, layer, p, row);
      const bool q0 = name == "attn_q" && layer == 0;
      w.record(name, layer < 0 ? layer : layer + s.layer_shift, p + s.shift, 1,
               q0 ? RowShape(s.q0_shape) : RowShape{kWidth}, row.data());
    }
    w.end_step();
  }
  if (s.closed) w.close();
  return path;
}

DiffResult run(const std::string& tag, const TraceSpec& expected, const TraceSpec& actual) {
  DiffOptions o;
  o.diagnose = false;
  o.profile = builtin_profile("f32");
  return diff_traces(write_trace(tag + "_a", expected), write_trace(tag + "_b", actual), o);
}

TEST(DiffCompare, IdenticalTracesPass) {
  const auto r = run("same", {}, {});
  EXPECT_EQ(r.verdict, Verdict::pass);
  EXPECT_FALSE(r.first.has_value());
  EXPECT_EQ(r.taps.size(), 5u);
  EXPECT_EQ(r.compared_positions, 5);
  EXPECT_EQ(r.taps.front().full_name, "token_embd");  // execution order
  EXPECT_EQ(r.taps.back().full_name, "blk.1.attn_q");
}

TEST(DiffCompare, FirstDivergenceAndItsPattern) {
  TraceSpec b;
  b.perturb = [](const std::string& n, int l, int p, std::vector<float>& row) {
    if (n == "attn_q" && l == 1 && p >= 2) row[1] += 50;
  };
  const auto r = run("from2", {}, b);
  EXPECT_EQ(r.verdict, Verdict::diverged);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "blk.1.attn_q");
  EXPECT_EQ(r.first->position, 2);
  EXPECT_EQ(r.first->pattern, PositionPattern::from);
  EXPECT_EQ(r.first->diverged_positions, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(r.first->metrics.worst_index, 1);
}

TEST(DiffCompare, NoiseBelowTheThresholdPasses) {
  TraceSpec b;
  b.perturb = [](const std::string&, int, int, std::vector<float>& row) { row[0] *= 1.0f + 1e-6f; };
  EXPECT_EQ(run("noise", {}, b).verdict, Verdict::pass);
}

// An error inherited from the input, grown less than the jump factor, is not a new divergence.
TEST(DiffCompare, JumpTestBlamesTheOpWhereTheErrorAppears) {
  TraceSpec b;
  b.perturb = [](const std::string& n, int l, int, std::vector<float>& row) {
    if (l != 0) return;
    if (n == "attn_norm") row[0] *= 1.01f;  // nmse ~ 1e-5 relative to the row
    if (n == "attn_q") row[0] *= 1.02f;     // ~4x the input's nmse: inherited, not new
  };
  const auto r = run("jump", {}, b);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "blk.0.attn_norm");
  for (const auto& t : r.taps)
    if (t.full_name == "blk.0.attn_q") {
      EXPECT_FALSE(t.diverged());
      EXPECT_GT(t.rows[0].nmse, t.threshold_nmse);
      EXPECT_GT(t.rows[0].input_nmse, 0);
      EXPECT_GT(t.min_passing_nmse, 0);
    }
}

TEST(DiffCompare, FirstNonFiniteOriginIsReported) {
  TraceSpec b;
  b.perturb = [](const std::string& n, int l, int p, std::vector<float>& row) {
    if ((n == "attn_norm" && l == 1 && p == 3) || (n == "attn_q" && l == 1 && p >= 3))
      row[2] = std::numeric_limits<float>::infinity();
  };
  const auto r = run("nan", {}, b);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "blk.1.attn_norm");
  EXPECT_EQ(r.first->position, 3);
  EXPECT_EQ(r.first->metrics.nonfinite, 1);
  EXPECT_EQ(r.first->pattern, PositionPattern::some);
}

TEST(DiffCompare, TokenSequenceIsTheFindingWhenValuesAgree) {
  TraceSpec b;
  b.tokens = {1, 2, 3, 9, 5};
  const auto r = run("tokens", {}, b);
  EXPECT_EQ(r.compared_positions, 3);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "tokens");
  EXPECT_EQ(r.first->position, 3);
  EXPECT_EQ(r.verdict, Verdict::diverged);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, "token-sequence");
}

// Both runs asked for one context (n_ctx 5); the actual's loop ended a token early. A run asked
// for fewer positions, or one still running, is no such bug.
TEST(DiffCompare, ARunThatEndsEarlyIsATokenSequenceDivergence) {
  TraceSpec a, b;
  a.n_ctx = b.n_ctx = 5;
  b.tokens = {1, 2, 3, 4};
  b.to = 4;
  auto r = run("short", a, b);
  EXPECT_EQ(r.verdict, Verdict::diverged);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "tokens");
  EXPECT_EQ(r.first->position, 4);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_NE(r.findings[0].detail.find("though both runs declare n_ctx 5"), std::string::npos) << r.findings[0].detail;

  TraceSpec asked_for_less = b;
  asked_for_less.n_ctx = 4;
  r = run("shorter_context", a, asked_for_less);
  EXPECT_EQ(r.verdict, Verdict::pass);
  EXPECT_FALSE(r.first.has_value());

  TraceSpec still_running = b;
  still_running.closed = false;
  r = run("short_unclosed", a, still_running);
  EXPECT_NE(r.verdict, Verdict::diverged);
  EXPECT_FALSE(r.first.has_value());
}

// The diagnosis names the run whose tokens are not the context both declare, and which way.
TEST(DiffCompare, TheRunOffItsContextIsNamed) {
  DiffOptions o;
  o.profile = builtin_profile("f32");
  const auto diagnosed = [&](const std::string& tag, const TraceSpec& a, const TraceSpec& b) {
    const DiffResult r = diff_traces(write_trace(tag + "_a", a), write_trace(tag + "_b", b), o);
    EXPECT_TRUE(r.first && r.first->tap == "tokens") << tag;
    return r.diagnosis.value_or(Diagnosis{});
  };
  TraceSpec full, one_short, one_past;
  full.n_ctx = one_short.n_ctx = one_past.n_ctx = 5;
  one_short.tokens = {1, 2, 3, 4};
  one_short.to = 4;
  one_past.tokens = {1, 2, 3, 4, 5, 6};
  Diagnosis d = diagnosed("actual_short", full, one_short);
  EXPECT_EQ(d.bug_class, "token-sequence");
  EXPECT_FALSE(d.in_expected);
  EXPECT_EQ(d.variant, "the actual run's generation loop ended 1 position early (its bound off by 1)");
  d = diagnosed("actual_past", full, one_past);
  EXPECT_FALSE(d.in_expected);
  EXPECT_EQ(d.variant, "the actual run's generation loop ran 1 position past its context (its bound off by 1)");
  d = diagnosed("expected_short", one_short, full);
  EXPECT_TRUE(d.in_expected);
  EXPECT_EQ(d.variant, "the expected run's generation loop ended 1 position early (its bound off by 1)");
}

TEST(DiffCompare, PositionsOneTraceLacksAreListed) {
  TraceSpec b;
  b.from = 2;
  const auto r = run("late_start", {}, b);
  EXPECT_EQ(r.verdict, Verdict::pass);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, "missing-positions");
  EXPECT_NE(r.findings[0].detail.find("positions 0..1 not in the actual trace at 5 taps"), std::string::npos)
      << r.findings[0].detail;
}

TEST(DiffCompare, PositionsShiftedByOneCompareNothing) {
  TraceSpec a, b;
  b.shift = 1;  // the last rows at position 5, where the run has no token
  const auto r = run("shifted", a, b);
  EXPECT_EQ(r.verdict, Verdict::incompatible);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, "position-shift");
  EXPECT_NE(r.findings[0].detail.find("positions +1: its producer numbers positions from 1"), std::string::npos);
  EXPECT_FALSE(r.first.has_value());
}

TEST(DiffCompare, LayersNumberedFromOneCompareNothing) {
  TraceSpec b;
  b.layer_shift = 1;
  const auto r = run("layers_from_1", {}, b);
  EXPECT_EQ(r.verdict, Verdict::incompatible);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, "layer-shift");
  EXPECT_NE(r.findings[0].detail.find("at layer L+1, what the expected trace holds at layer L: its producer numbers "
                                      "layers from 1"),
            std::string::npos)
      << r.findings[0].detail;
  EXPECT_FALSE(r.first.has_value());
}

TEST(DiffCompare, AnIncompleteTraceIsNotAPass) {
  TraceSpec b;
  b.closed = false;
  const auto r = run("unclosed", {}, b);
  EXPECT_EQ(r.verdict, Verdict::incompatible);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, "incomplete");
  EXPECT_NE(r.findings[0].detail.find("is incomplete: its run stopped after 5 committed steps"), std::string::npos)
      << r.findings[0].detail;
  b.perturb = [](const std::string& name, int layer, int p, std::vector<float>& row) {
    if (name == "attn_q" && layer == 1 && p == 3) row[0] += 1;
  };
  const auto diverged = run("unclosed_diverged", {}, b);  // a divergence before the end still leads
  EXPECT_EQ(diverged.verdict, Verdict::diverged);
  ASSERT_TRUE(diverged.first.has_value());
  EXPECT_EQ(diverged.first->tap, "blk.1.attn_q");
}

// One batched step whose layers recorded their own number of rows (the schema lets each slot
// count its own): every slot is read, and the rows one lacks are listed.
TEST(DiffCompare, SlotsOfABatchWithTheirOwnRowCountsAreRead) {
  auto write = [](const std::string& tag, std::int64_t layer1_rows) {
    const std::string path = ::testing::TempDir() + "tapdiff_cmp_" + std::to_string(getpid()) + "_" + tag + ".h5";
    TraceMetadata m;
    m.model_path = "/nonexistent/model.gguf";
    m.model_sha256 = std::string(64, 'a');
    m.prompt_length = 4;
    m.tokens = {1, 2, 3, 4};
    TraceWriter w(path, m);
    const std::vector<float> rows(4 * kWidth, 0.5f);
    w.record("ffn_up", 0, 0, 4, RowShape{kWidth}, rows.data());
    w.record("ffn_up", 1, 0, layer1_rows, RowShape{kWidth}, rows.data());
    w.end_step();
    w.close();
    return path;
  };
  DiffOptions o;
  o.diagnose = false;
  o.profile = builtin_profile("f32");
  const auto r = diff_traces(write("batch_full", 4), write("batch_ragged", 3), o);
  EXPECT_EQ(r.verdict, Verdict::pass);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, "missing-positions");
  EXPECT_EQ(r.findings[0].tap, "blk.1.ffn_up");
  EXPECT_NE(r.findings[0].detail.find("position 3 not in the actual trace"), std::string::npos) << r.findings[0].detail;
}

TEST(DiffCompare, DifferentModelsAreIncompatible) {
  TraceSpec b;
  b.sha = std::string(64, 'b');
  const auto r = run("models", {}, b);
  EXPECT_EQ(r.verdict, Verdict::incompatible);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_NE(r.findings[0].detail.find(std::string(64, 'a')), std::string::npos);
  EXPECT_NE(r.findings[0].detail.find(std::string(64, 'b')), std::string::npos);
}

TEST(DiffCompare, ShapeMismatchIsAFindingNotACrash) {
  TraceSpec b;
  b.q0_shape = {2, 2};
  const auto r = run("shape", {}, b);
  EXPECT_EQ(r.verdict, Verdict::diverged);
  bool found = false;
  for (const auto& f : r.findings)
    found = found || (f.kind == "shape" && f.tap == "blk.0.attn_q" && f.detail.find("[4]") != std::string::npos &&
                      f.detail.find("[2, 2]") != std::string::npos);
  EXPECT_TRUE(found);
}

TEST(DiffCompare, MissingTapIsListed) {
  TraceSpec b;
  b.skip_tap = "attn_q:1";
  const auto r = run("missing", {}, b);
  EXPECT_EQ(r.verdict, Verdict::pass);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, "missing-in-actual");
  EXPECT_EQ(r.findings[0].tap, "blk.1.attn_q");
}

// A pass must have compared something: traces that share no rows (and whose tokens are all
// prompt) are not a pass but an input error that says why.
TEST(DiffCompare, NothingComparedIsNotAPass) {
  TraceSpec early, late, none;
  early.prompt_length = late.prompt_length = none.prompt_length = kPositions;
  early.to = 2;
  late.from = 3;
  none.from = none.to = 0;
  const auto disjoint = run("disjoint", early, late);
  EXPECT_EQ(disjoint.verdict, Verdict::incompatible);
  ASSERT_FALSE(disjoint.findings.empty());
  EXPECT_EQ(disjoint.findings[0].kind, "nothing-compared");
  EXPECT_NE(disjoint.findings[0].detail.find("no tap holds rows at a position both traces recorded"), std::string::npos)
      << disjoint.findings[0].detail;

  TraceSpec all_prompt;
  all_prompt.prompt_length = kPositions;
  const auto empty = run("empty", all_prompt, none);
  EXPECT_EQ(empty.verdict, Verdict::incompatible);
  ASSERT_FALSE(empty.findings.empty());
  EXPECT_EQ(empty.findings[0].kind, "nothing-compared");
  EXPECT_NE(empty.findings[0].detail.find("the traces hold no tap in common; the actual trace holds no taps"),
            std::string::npos)
      << empty.findings[0].detail;

  TraceSpec overlapping = late;
  overlapping.from = 1;
  EXPECT_EQ(run("overlap", early, overlapping).verdict, Verdict::pass);  // position 1 is in both
  TraceSpec generated_early = early, generated_late = late;
  generated_early.prompt_length = generated_late.prompt_length = 2;
  EXPECT_EQ(run("tokens", generated_early, generated_late).verdict, Verdict::pass);  // 3 generated tokens agree
}

// Logits traces for the near-tie tests: positions 0..3, 8 tokens; at position 2 the expected
// run prefers token 4 over token 6 by `margin`, and the actual run's logits are the expected
// ones with tokens 4 and 6 moved by `shift` (toward 6).
std::string write_logits(const std::string& tag, const std::vector<std::int32_t>& tokens, float margin, float shift) {
  const std::string path = ::testing::TempDir() + "tapdiff_tie_" + std::to_string(getpid()) + "_" + tag + ".h5";
  TraceMetadata m;
  m.producer = Producer::external;
  m.model_path = "/nonexistent/model.gguf";
  m.prompt_length = 2;
  m.tokens = tokens;
  TraceWriter w(path, m);
  for (int p = 0; p < 4; ++p) {
    std::vector<float> logits = {-3, 1, -2, 0.5f, 2, -1, 2 - margin, 0};
    if (p == 2) logits[4] -= shift, logits[6] += shift;
    w.record("output", -1, p, 1, RowShape{8}, logits.data());
    w.end_step();
  }
  w.close();
  return path;
}

DiffResult diff_logits(const std::string& tag, float margin, float shift, std::int32_t fed, const char* profile) {
  DiffOptions o;
  o.diagnose = false;
  o.profile = builtin_profile(profile);
  return diff_traces(write_logits(tag + "_a", {1, 2, 3, 4}, margin, 0),
                     write_logits(tag + "_b", {1, 2, 3, fed}, margin, shift), o);
}

// A greedy flip where the expected margin is within the precision's noise is a note in f16 and
// bf16, never in f32; a run that does not follow its own logits diverges in every precision.
TEST(DiffCompare, NearTieFlipIsANoteInReducedPrecision) {
  const DiffResult noise = diff_logits("tie_f16", 0.01f, 0.01f, 6, "f16");
  EXPECT_EQ(noise.verdict, Verdict::pass);
  EXPECT_FALSE(noise.first.has_value());
  ASSERT_EQ(noise.findings.size(), 1u);
  EXPECT_EQ(noise.findings[0].kind, "near-tie");
  EXPECT_NE(noise.findings[0].detail.find("prefer 4 by 0.01"), std::string::npos) << noise.findings[0].detail;

  const DiffResult f32 = diff_logits("tie_f32", 0.01f, 0.01f, 6, "f32");
  EXPECT_EQ(f32.verdict, Verdict::diverged);
  for (const auto& f : f32.findings) EXPECT_NE(f.kind, "near-tie");

  // The actual run continued with token 6 although its own logits still choose 4.
  const DiffResult not_own = diff_logits("tie_own", 0.01f, 0.0f, 6, "f16");
  EXPECT_EQ(not_own.verdict, Verdict::diverged);
  ASSERT_TRUE(not_own.first.has_value());
  EXPECT_EQ(not_own.first->tap, "tokens");
}

// A one-layer mixture of 4 experts, 1 used, positions 0..3. Each expert's output is a row of its
// own; at position 2 the expected router prefers expert 0 to expert 1 by `margin`, and the actual
// router's logits move those two by `shift` toward expert 1. The actual run uses expert `used` at
// position 2 (its own router's choice, or another) and records its routing weights.
std::string write_experts(const std::string& tag, float margin, float shift, int used) {
  const std::string path = ::testing::TempDir() + "tapdiff_moe_" + std::to_string(getpid()) + "_" + tag + ".h5";
  TraceMetadata m;
  m.producer = Producer::external;
  m.model_path = "/nonexistent/model.gguf";
  m.prompt_length = 4;
  m.tokens = {1, 2, 3, 4};
  TapDims dims{1, kWidth, 2, 1, kWidth / 2, 8, 16, 4};
  dims.n_expert = 4;
  dims.n_expert_used = 1;
  m.dims = dims;
  TraceWriter w(path, m);
  for (int p = 0; p < 4; ++p) {
    std::vector<float> x = {1, -1, 0.5f, 2}, logits = {2, 2 - margin, -1, 0.5f};
    if (p == 2) logits[0] -= shift, logits[1] += shift;
    const int expert = p == 2 ? used : 0;
    std::vector<float> routing(4, 0.0f), down(kWidth), resid(kWidth);
    routing[std::size_t(expert)] = 1;
    for (int i = 0; i < kWidth; ++i) {
      down[std::size_t(i)] = float((expert + 1) * (i % 2 ? -1 : 1));
      resid[std::size_t(i)] = x[std::size_t(i)] + down[std::size_t(i)];
    }
    w.record("ffn_norm", 0, p, 1, RowShape{kWidth}, x.data());
    w.record("ffn_gate_inp", 0, p, 1, RowShape{4}, logits.data());
    w.record("ffn.routing", 0, p, 1, RowShape{4}, routing.data());
    w.record("ffn_down", 0, p, 1, RowShape{kWidth}, down.data());
    w.record("resid.ffn", 0, p, 1, RowShape{kWidth}, resid.data());
    w.end_step();
  }
  w.close();
  return path;
}

DiffResult diff_experts(const std::string& tag, float margin, float shift, int used) {
  DiffOptions o;
  o.diagnose = false;
  o.profile = builtin_profile("bf16");
  return diff_traces(write_experts(tag + "_a", margin, 0, 0), write_experts(tag + "_b", margin, shift, used), o);
}

// Experts chosen apart at a near tie of the router are a note: the experts' rows there are no
// divergence, and the stream after them carries the difference (the jump test). A run that did not
// use its own router's choice, or a choice apart by more than the noise, diverges.
TEST(DiffCompare, ExpertsChosenAtANearTieAreANote) {
  const DiffResult tie = diff_experts("moe_tie", 0.01f, 0.01f, 1);
  EXPECT_EQ(tie.verdict, Verdict::pass);
  EXPECT_FALSE(tie.first.has_value());
  ASSERT_EQ(tie.findings.size(), 1u);
  EXPECT_EQ(tie.findings[0].kind, "routing-tie");
  EXPECT_EQ(tie.findings[0].tap, "blk.0.ffn_gate_inp");
  EXPECT_NE(tie.findings[0].detail.find("at position 2 the expected run chose experts {0}, the actual {1}"),
            std::string::npos)
      << tie.findings[0].detail;

  // Its own router still chose expert 0.
  const DiffResult not_own = diff_experts("moe_not_own", 0.01f, 0.0f, 1);
  EXPECT_EQ(not_own.verdict, Verdict::diverged);
  ASSERT_TRUE(not_own.first.has_value());
  EXPECT_EQ(not_own.first->tap, "blk.0.ffn.routing");
  EXPECT_EQ(not_own.first->position, 2);

  // A margin of 0.2 where bf16 lets two logits of this row differ by 0.16, although the row itself
  // stays within tolerance (nmse 2.6e-3 < 3e-3): beyond the noise.
  const DiffResult real_margin = diff_experts("moe_margin", 0.2f, 0.105f, 1);
  EXPECT_EQ(real_margin.verdict, Verdict::diverged);
  ASSERT_TRUE(real_margin.first.has_value());
  EXPECT_EQ(real_margin.first->tap, "blk.0.ffn.routing");
  for (const auto& f : real_margin.findings) EXPECT_NE(f.kind, "routing-tie");
}

// q8 holds a norm to 3e-3 but only a replay of the op can tell its own error from amplified
// 8-bit noise up to 3e-2: with nothing replayed (no model here) a row in that band passes and is
// named; a row past it diverges.
TEST(DiffCompare, RowsInTheReplayBandPassWhenNothingReplaysThem) {
  const auto scaled = [](float by) {
    TraceSpec b;
    b.perturb = [by](const std::string& n, int l, int p, std::vector<float>& row) {
      if (n == "attn_norm" && l == 0 && p == 2)
        for (float& v : row) v *= by;
    };
    return b;
  };
  for (bool diagnose : {false, true}) {  // no model at hand: the replay cannot run either way
    DiffOptions o;
    o.diagnose = diagnose;
    o.profile = builtin_profile("q8");
    const auto band = diff_traces(write_trace("band_a", {}), write_trace("band_b", scaled(1.1f)), o);  // nmse 1e-2
    EXPECT_EQ(band.verdict, Verdict::pass);
    bool named = false;
    for (const auto& f : band.findings)
      named = named || (f.kind == "unreplayed" && f.tap == "blk.0.attn_norm");
    EXPECT_TRUE(named);
    const auto past = diff_traces(write_trace("past_a", {}), write_trace("past_b", scaled(1.3f)), o);  // nmse 9e-2
    EXPECT_EQ(past.verdict, Verdict::diverged);
    ASSERT_TRUE(past.first.has_value());
    EXPECT_EQ(past.first->tap, "blk.0.attn_norm");
    EXPECT_EQ(past.first->position, 2);
  }
}

// A margin beyond the noise the profile allows for two logits is no near-tie, even when the
// logits row itself stays within tolerance (bf16: the row's nmse here is 2.4e-3 < 3e-3).
TEST(DiffCompare, FlipWithARealMarginStillDiverges) {
  const DiffResult r = diff_logits("real_margin", 0.3f, 0.16f, 6, "bf16");
  EXPECT_EQ(r.verdict, Verdict::diverged);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "tokens");
}

// Nothing replays and no signature points anywhere: the class is withheld ("unexplained"), never
// the tap's op family, and the observations say what the values look like.
TEST(DiffCompare, WithoutEvidenceTheClassIsUnexplained) {
  TraceSpec b;
  b.perturb = [](const std::string& n, int l, int p, std::vector<float>& row) {
    if (n == "attn_q" && l == 0 && p == 2)
      for (float& v : row) v = -v;
  };
  DiffOptions o;
  o.profile = builtin_profile("f32");
  const auto r = diff_traces(write_trace("unexpl_a", {}), write_trace("unexpl_b", b), o);
  ASSERT_TRUE(r.diagnosis.has_value());
  EXPECT_EQ(r.diagnosis->bug_class, "unexplained");
  EXPECT_EQ(r.diagnosis->evidence, Evidence::unexplained);
  EXPECT_TRUE(r.diagnosis->variant.empty());
  bool flipped = false;
  for (const auto& s : r.diagnosis->signatures) flipped = flipped || s.find("sign flipped") != std::string::npos;
  EXPECT_TRUE(flipped);
  EXPECT_EQ(r.diagnosis->explanation.find("matmul"), std::string::npos) << r.diagnosis->explanation;
}

// Two runs of one engine that differ by one bit somewhere are nondeterministic there: the
// finding and root come first, ahead of the comparison with the reference.
TEST(DiffCompare, RepeatsThatDisagreeAreNondeterministicFirst) {
  TraceSpec racy;
  racy.perturb = [](const std::string& n, int l, int p, std::vector<float>& row) {
    if (n == "attn_norm" && l == 1 && p >= 3) row[2] = std::nextafter(row[2], 1e9f);
  };
  const std::string run1 = write_trace("rep_1", {}), run2 = write_trace("rep_2", {}), run3 = write_trace("rep_3", racy);
  EXPECT_FALSE(first_repeat_difference(run1, run2).has_value());
  const auto at = first_repeat_difference(run1, run3);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->tap, "blk.1.attn_norm");
  EXPECT_EQ(at->position, 3);
  EXPECT_EQ(at->diverged_positions, (std::vector<std::int64_t>{3, 4}));

  DiffResult r = run("rep_vs_ref", {}, {});
  EXPECT_EQ(r.verdict, Verdict::pass);
  put_nondeterminism_first(*at, 3, r);
  EXPECT_EQ(r.verdict, Verdict::diverged);
  ASSERT_FALSE(r.roots.empty());
  EXPECT_EQ(r.roots.front().kind, "nondeterministic");
  EXPECT_EQ(r.findings.front().kind, "nondeterministic");
  ASSERT_TRUE(r.diagnosis.has_value());
  EXPECT_EQ(r.diagnosis->bug_class, "nondeterministic");
  EXPECT_EQ(r.first->tap, "blk.1.attn_norm");
}

// No model to replay with: the class comes from the signatures alone (here the same offset at
// every position of a projection: a bias), marked "indicated", never from the tap's op family.
TEST(DiffCompare, DiagnosisWithoutTheModelStillReports) {
  TraceSpec b;
  b.perturb = [](const std::string& n, int l, int, std::vector<float>& row) {
    if (n == "attn_q" && l == 0) row[0] += 10;
  };
  DiffOptions o;
  o.profile = builtin_profile("f32");
  const auto r = diff_traces(write_trace("diag_a", {}), write_trace("diag_b", b), o);
  ASSERT_TRUE(r.diagnosis.has_value());
  EXPECT_EQ(r.diagnosis->bug_class, "bias");
  EXPECT_EQ(r.diagnosis->evidence, Evidence::indicated);
  EXPECT_FALSE(r.diagnosis->baseline_residual.has_value());
  bool skipped = false;
  for (const auto& s : r.diagnosis->signatures) skipped = skipped || s.find("replay skipped") != std::string::npos;
  EXPECT_TRUE(skipped);
}

// An FFN gate amplifying a within-tolerance difference of its inputs: gate element 0 large and
// positive (its product dominates ffn.act's row), the others large and negative (they dominate
// ffn_gate's row, their products near zero). The actual gate differs by a relative 3e-4 there.
struct GatedRow {
  std::vector<float> gate, up, act;
};
GatedRow gated_row(float gate0) {
  GatedRow g{std::vector<float>(kWidth, -40.0f), std::vector<float>(kWidth, 0.01f), {}};
  g.gate[0] = gate0;
  g.up[0] = 5.0f;
  for (int i = 0; i < kWidth; ++i) {
    const float x = g.gate[std::size_t(i)];
    g.act.push_back(x / (1.0f + std::exp(-x)) * g.up[std::size_t(i)]);
  }
  return g;
}

std::string write_gated_trace(const std::string& tag, const GatedRow& row) {
  const std::string path = ::testing::TempDir() + "tapdiff_cmp_" + std::to_string(getpid()) + "_" + tag + ".h5";
  TraceMetadata m;
  m.model_path = "/nonexistent/model.gguf";
  m.model_sha256 = std::string(64, 'a');
  m.prompt_length = 1;
  m.tokens = {1};
  TraceWriter w(path, m);
  w.record("ffn_gate", 0, 0, 1, RowShape{kWidth}, row.gate.data());
  w.record("ffn_up", 0, 0, 1, RowShape{kWidth}, row.up.data());
  w.record("ffn.act", 0, 0, 1, RowShape{kWidth}, row.act.data());
  w.end_step();
  w.close();
  return path;
}

DiffResult diff_gated(const std::string& tag, const GatedRow& expected, const GatedRow& actual) {
  DiffOptions o;
  o.profile = builtin_profile("f32");
  return diff_traces(write_gated_trace(tag + "_a", expected), write_gated_trace(tag + "_b", actual), o);
}

TEST(DiffCompare, AGateAmplifyingItsInputsIsClearedWithoutTheModel) {
  const auto r = diff_gated("gate_amplifies", gated_row(6.0f), gated_row(6.0f * (1 + 3e-4f)));
  EXPECT_EQ(r.verdict, Verdict::pass);
  const TapComparison* act = find_tap(r, "blk.0.ffn.act");
  ASSERT_NE(act, nullptr);
  EXPECT_GT(act->rows[0].nmse, act->threshold_nmse);
  EXPECT_GT(act->rows[0].nmse, 10 * act->rows[0].input_nmse) << "the jump test alone would call it a divergence";
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, "amplified");
  EXPECT_EQ(r.findings[0].tap, "blk.0.ffn.act");
}

TEST(DiffCompare, AGateWrongOnEqualInputsStillDiverges) {
  GatedRow wrong = gated_row(6.0f);
  wrong.act[0] *= 1 + 3e-4f;
  const auto r = diff_gated("gate_wrong", gated_row(6.0f), wrong);
  EXPECT_EQ(r.verdict, Verdict::diverged);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->tap, "blk.0.ffn.act");
}

}  // namespace
}  // namespace tapdiff::diff
