// Markdown: headline, first-divergence table, collapsible per-tap table; every table row keeps
// its column count whatever the names hold.
#include <gtest/gtest.h>

#include <sstream>

#include "reports/render.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

// Cell separators of a GFM table row: pipes not escaped with a backslash.
int columns(const std::string& row) {
  int pipes = 0;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] == '|' && (i == 0 || row[i - 1] != '\\')) ++pipes;
  return pipes - 1;
}

// Every table (a header row followed by a |---| rule) keeps the header's column count.
void expect_tables_intact(const std::string& md) {
  std::istringstream in(md);
  std::string line;
  int expected = -1;
  while (std::getline(in, line)) {
    if (line.rfind('|', 0) != 0) {
      expected = -1;
      continue;
    }
    if (expected < 0) expected = columns(line);
    EXPECT_EQ(columns(line), expected) << line;
  }
}

TEST(ReportsMarkdown, DivergedHasHeadlineTableAndDetails) {
  const std::string md = render(testing::diverged_result(), Format::markdown);
  EXPECT_EQ(md.rfind("## \u274c tapdiff: DIVERGED \u2014 blk.0.attn.probs at position 8\n", 0), 0u)
      << md;
  for (const char* expected :
       {"| **first divergence** | `blk.0.attn.probs` (layer 0, class attention) |",
        "| position | 8 \u2014 every position from 8 on (8 of 16 positions diverged) |",
        "| **diagnosis** | **kv-cache** \u2014 attention over position p only (KV length never "
        "advances) |",
        "| residual | 1.80e-15 (correct computation: 4.70e-01) |",
        "<details><summary>Per-tap comparison: 65 of 74 taps diverged</summary>\n\n| tap |",
        "| `blk.0.attn.probs` | attention | \u274c diverged | 8 |",
        "- `missing-in-actual` `blk.3.ffn.act`: the actual trace has no blk.3.ffn.act",
        "**first greedy difference at position 10**", "| KL 99.9% |"})
    EXPECT_NE(md.find(expected), std::string::npos) << "missing: " << expected << "\n" << md;
  expect_tables_intact(md);
}

TEST(ReportsMarkdown, PassIsShort) {
  const std::string md = render(testing::passing_result(), Format::markdown);
  EXPECT_EQ(md.rfind("## \u2705 tapdiff: PASS", 0), 0u);
  EXPECT_EQ(md.find("first divergence"), std::string::npos);
  EXPECT_NE(md.find("greedy choices identical"), std::string::npos);
  expect_tables_intact(md);
}

TEST(ReportsMarkdown, HostileNamesAreEscaped) {
  const std::string md = render(testing::hostile_result(), Format::markdown);
  for (const char* raw : {"<script>", "<b>", "<&>", "\x1b", "\x01"})
    EXPECT_EQ(md.find(raw), std::string::npos) << raw;
  EXPECT_NE(md.find("blk.1.attn\\_q&lt;&amp;&gt;\"'"), std::string::npos) << md;
  expect_tables_intact(md);
}

}  // namespace
}  // namespace tapdiff::reports
