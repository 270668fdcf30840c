// Terminal text: the verdict comes first, the first divergence and its evidence follow.
#include <gtest/gtest.h>

#include "reports/render.hpp"
#include "reports/summary.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

TEST(ReportsText, DivergedLeadsWithVerdictAndFirstDivergence) {
  const std::string out = render(testing::diverged_result(), Format::text);
  EXPECT_EQ(first_line(out), "DIVERGED  blk.0.attn.probs at position 8");
  for (const char* expected :
       {"kv-cache (reproduced): attention over position p only (KV length never advances)",
        "evidence     reproduced", "first divergence",
        "blk.0.attn.probs  (layer 0, class attention)",
        "8 · every position from 8 on · 8 of 16 positions diverged",
        "head 1, key position 3: expected 2.1370e-01, actual 0", "threshold 1.00e-03",
        "residual     1.80e-15  (the correct computation: 4.70e-01)",
        "runners-up   3.90e-01  attention over the whole cache capacity (unsliced)",
        "prompt positions 0-7 intact", "missing-in-actual", "taps: 65 of 74 diverged",
        "99.9% 4.19e-01", "1% 4.00e-07", "first differs at position 10",
        "engine-host f16, fault kv-stuck-length"})
    EXPECT_NE(out.find(expected), std::string::npos) << "missing: " << expected << "\n" << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "colour without options.color";
}

// "unexplained" is the class and the evidence of an unexplained finding: the header says it once.
TEST(ReportsText, AnUnexplainedFindingSaysSoOnce) {
  diff::DiffResult r = testing::diverged_result();
  r.diagnosis->bug_class = "unexplained";
  r.diagnosis->evidence = diff::Evidence::unexplained;
  const std::string out = render(r, Format::text);
  const std::string second = out.substr(out.find('\n') + 1, out.find('\n', out.find('\n') + 1) - out.find('\n') - 1);
  EXPECT_EQ(second.find("unexplained (unexplained)"), std::string::npos) << second;
  EXPECT_NE(second.find("unexplained"), std::string::npos) << second;
}

// A summary-only trace's finding names the head and the field of its worst element.
TEST(ReportsText, TheAttentionSummarysWorstElementIsAHeadAndAField) {
  diff::TapComparison summary;
  summary.name = "attn.probs.summary";
  summary.row_shape = {2, 4};
  EXPECT_EQ(element_location(&summary, 6, std::nullopt), "head 1, mean_key");
  EXPECT_EQ(element_location(&summary, 3, std::nullopt), "head 0, future");
}

TEST(ReportsText, PassAndIncompatibleVerdicts) {
  EXPECT_EQ(first_line(render(testing::passing_result(), Format::text)),
            "PASS  all 75 taps within the f16 profile");
  const std::string out = render(testing::incompatible_result(), Format::text);
  EXPECT_EQ(first_line(out).rfind("INCOMPATIBLE  different models", 0), 0u) << out;
}

// A passing tap over its threshold (its inputs carry as much error: the jump test) is inherited,
// in every table; one within its threshold is ok.
TEST(ReportsText, APassingTapOverItsThresholdIsInherited) {
  diff::DiffResult r = testing::passing_result();
  diff::TapComparison& tap = r.taps.back();
  tap.rows.front().nmse = 10 * tap.threshold_nmse;
  tap.rows.front().input_nmse = 100 * tap.threshold_nmse;
  ASSERT_FALSE(tap.diverged());
  // The tap's line in the table: "  output  ..." in text, "| `output` | ..." in markdown.
  const auto row_of = [&](const std::string& out) {
    auto from = out.find("\n  " + tap.full_name + " ");
    if (from == std::string::npos) from = out.find("\n| `" + tap.full_name + "` |");
    return from == std::string::npos ? std::string() : out.substr(from + 1, out.find('\n', from + 1) - from - 1);
  };
  for (Format f : {Format::text, Format::markdown})
    EXPECT_NE(row_of(render(r, f)).find("inherited"), std::string::npos) << render(r, f);
  EXPECT_NE(render(r, Format::html).find("<span class=\"status inherited\">inherited</span>"), std::string::npos);
  const std::string clean = render(testing::passing_result(), Format::text);
  EXPECT_EQ(clean.find("inherited"), std::string::npos) << clean;
}

TEST(ReportsText, ColourOnlyWhenAsked) {
  RenderOptions options;
  options.color = true;
  const std::string out = render(testing::diverged_result(), Format::text, options);
  EXPECT_EQ(out.rfind("\x1b[1;31mDIVERGED\x1b[0m", 0), 0u);
  EXPECT_EQ(render(testing::passing_result(), Format::text, options).rfind("\x1b[1;32mPASS", 0),
            0u);
}

TEST(ReportsText, HostileNamesCannotReachTheTerminal) {
  const std::string out = render(testing::hostile_result(), Format::text);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(out.find('\x01'), std::string::npos);
  EXPECT_NE(out.find("nan"), std::string::npos);
  EXPECT_NE(out.find("12 in actual"), std::string::npos);
}

TEST(ReportsText, TapTableHonoursMaxRows) {
  RenderOptions options;
  options.max_table_rows = 5;
  const std::string out = render(testing::diverged_result(), Format::text, options);
  EXPECT_NE(out.find("… 60 more diverged taps"), std::string::npos) << out;
}

}  // namespace
}  // namespace tapdiff::reports
