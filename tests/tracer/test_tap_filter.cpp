// TapFilter: globs on full names, exclusions, layer and position ranges, the memo.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tapdiff/tap_filter.hpp"

namespace tapdiff {
namespace {

TEST(GlobMatch, StarsAndQuestionMarks) {
  struct Case {
    const char* pattern;
    const char* text;
    bool match;
  };
  const Case cases[] = {
      {"*", "", true},
      {"*", "blk.3.attn_q", true},
      {"blk.*.attn_q", "blk.3.attn_q", true},
      {"blk.*.attn_q", "blk.3.attn_q.rope", false},
      {"blk.*.attn_q*", "blk.3.attn_q.rope", true},
      {"blk.*.attn_q*", "blk.12.attn_k", false},
      {"blk.?.ffn_*", "blk.7.ffn_up", true},
      {"blk.?.ffn_*", "blk.17.ffn_up", false},
      {"*.probs", "blk.0.attn.probs", true},
      {"output", "output_norm", false},
      {"output*", "output_norm", true},
      {"a*b*c", "aXXbYYbZZc", true},
      {"a*b*c", "aXXbYYbZZ", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(glob_match(c.pattern, c.text), c.match) << c.pattern << " vs " << c.text;
  }
}

TEST(TapFilter, DefaultEnablesEverything) {
  const TapFilter f;
  EXPECT_TRUE(f.everything());
  EXPECT_TRUE(f.enabled("attn_q", 0, 0));
  EXPECT_TRUE(f.enabled("output", -1, 1'000'000));
}

TEST(TapFilter, GlobsMatchTheFullName) {
  const TapFilter f = TapFilter::parse("blk.*.attn_q*,output");
  EXPECT_TRUE(f.enabled("attn_q", 3, 0));
  EXPECT_TRUE(f.enabled("attn_q.rope", 3, 0));
  EXPECT_FALSE(f.enabled("attn_k", 3, 0));
  EXPECT_TRUE(f.enabled("output", -1, 5));
  EXPECT_FALSE(f.enabled("output_norm", -1, 5));
  EXPECT_FALSE(f.enabled("token_embd", -1, 5));
}

TEST(TapFilter, GlobCanSelectLayers) {
  const TapFilter f = TapFilter::parse("blk.1?.*");
  EXPECT_TRUE(f.enabled("ffn_up", 12, 0));
  EXPECT_FALSE(f.enabled("ffn_up", 2, 0));
  EXPECT_FALSE(f.enabled("ffn_up", 112, 0));
}

TEST(TapFilter, ExclusionsWinAndMayStandAlone) {
  const TapFilter only_excludes = TapFilter::parse("!*.attn.probs");
  EXPECT_TRUE(only_excludes.enabled("attn_q", 0, 0));
  EXPECT_FALSE(only_excludes.enabled("attn.probs", 0, 0));
  EXPECT_TRUE(only_excludes.enabled("output", -1, 0));

  const TapFilter both = TapFilter::parse("blk.*, !blk.*.kv.*");
  EXPECT_TRUE(both.enabled("attn_k", 4, 0));
  EXPECT_FALSE(both.enabled("kv.k", 4, 0));
  EXPECT_FALSE(both.enabled("output", -1, 0));
}

TEST(TapFilter, LayerRangesApplyToLayerTapsOnly) {
  const TapFilter f = TapFilter::parse("", "0-2,7,20-");
  for (int layer : {0, 1, 2, 7, 20, 29}) EXPECT_TRUE(f.enabled("attn_q", layer, 0)) << layer;
  for (int layer : {3, 6, 8, 19}) EXPECT_FALSE(f.enabled("attn_q", layer, 0)) << layer;
  EXPECT_TRUE(f.enabled("output", -1, 0));
  EXPECT_TRUE(f.enabled("token_embd", -1, 0));
}

TEST(TapFilter, PositionRangesApplyToEveryTap) {
  const TapFilter f = TapFilter::parse("", "", "0-3, 10");
  EXPECT_TRUE(f.enabled("attn_q", 0, 3));
  EXPECT_FALSE(f.enabled("attn_q", 0, 4));
  EXPECT_TRUE(f.enabled("output", -1, 10));
  EXPECT_FALSE(f.enabled("output", -1, 11));
  // A batch of positions is enabled when any of them is.
  EXPECT_TRUE(f.enabled("attn_q", 0, 5, 6));   // 5..10
  EXPECT_FALSE(f.enabled("attn_q", 0, 4, 6));  // 4..9
  EXPECT_FALSE(f.enabled("attn_q", 0, 0, 0));
}

TEST(TapFilter, AllFiltersCombine) {
  const TapFilter f = TapFilter::parse("blk.*.ffn_*", "1", "5-");
  EXPECT_TRUE(f.enabled("ffn_up", 1, 5));
  EXPECT_FALSE(f.enabled("ffn_up", 0, 5));
  EXPECT_FALSE(f.enabled("ffn_up", 1, 4));
  EXPECT_FALSE(f.enabled("attn_q", 1, 5));
}

TEST(RangeSet, RunsSplitABatchAtTheGaps) {
  const RangeSet set = RangeSet::parse("2-4,6,9-", "positions");
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  set.for_each_run(0, 12, [&](std::int64_t first, std::int64_t n) { runs.emplace_back(first, n); });
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected = {{2, 3}, {6, 1}, {9, 3}};
  EXPECT_EQ(runs, expected);
}

TEST(RangeSet, OverlappingAndAdjacentRangesMerge) {
  const RangeSet set = RangeSet::parse("5-7,0-2,3,6-9", "layers");
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  set.for_each_run(0, 20, [&](std::int64_t first, std::int64_t n) { runs.emplace_back(first, n); });
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected = {{0, 4}, {5, 5}};
  EXPECT_EQ(runs, expected);
}

TEST(TapFilter, ParseErrorsNameThePart) {
  struct Case {
    const char* names;
    const char* layers;
    const char* positions;
    const char* needle;
  };
  const Case cases[] = {
      {"", "x", "", "layers"},        {"", "3-1", "", "layers"}, {"", "-2", "", "layers"},
      {"", "", "1-2-3", "positions"}, {"a,,b", "", "", "names"}, {"!", "", "", "names"},
  };
  for (const Case& c : cases) {
    try {
      TapFilter::parse(c.names, c.layers, c.positions);
      ADD_FAILURE() << "accepted " << c.names << " | " << c.layers << " | " << c.positions;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
}

TEST(TapFilter, SpecRoundTrips) {
  const TapFilter f = TapFilter::parse(" blk.*.attn_q* ", "0-3", "5-");
  const TapFilterSpec spec = f.spec();
  EXPECT_EQ(spec.names, "blk.*.attn_q*");
  EXPECT_EQ(spec.layers, "0-3");
  EXPECT_EQ(spec.positions, "5-");
  const TapFilter again = TapFilter::parse(spec);
  EXPECT_EQ(again.enabled("attn_q", 2, 6), f.enabled("attn_q", 2, 6));
}

// The memo keys on the name's content, so a producer reusing one buffer for different names
// gets the right verdict for each.
TEST(TapFilter, MemoKeysOnContentNotPointer) {
  const TapFilter f = TapFilter::parse("blk.*.attn_q");
  char buffer[32];
  for (int round = 0; round < 3; ++round) {
    std::strcpy(buffer, "attn_q");
    EXPECT_TRUE(f.enabled(buffer, 1, 0));
    std::strcpy(buffer, "attn_k");
    EXPECT_FALSE(f.enabled(buffer, 1, 0));
  }
  // Same name, another layer: a separate entry.
  const TapFilter layer3 = TapFilter::parse("blk.3.*");
  EXPECT_TRUE(layer3.enabled("attn_q", 3, 0));
  EXPECT_FALSE(layer3.enabled("attn_q", 4, 0));
  EXPECT_TRUE(layer3.enabled("attn_q", 3, 0));
}

TEST(TapFilter, LongNamesAndAFullMemoStillWork) {
  const TapFilter f = TapFilter::parse("blk.*.x*");
  const std::string long_name = "x" + std::string(100, 'y');
  EXPECT_TRUE(f.enabled(long_name, 0, 0));
  EXPECT_FALSE(f.enabled("z" + long_name, 0, 0));
  // More (name, layer) pairs than memo slots: verdicts stay right past capacity.
  for (int layer = 0; layer < 3000; ++layer) {
    ASSERT_TRUE(f.enabled("x1", layer, 0));
    ASSERT_FALSE(f.enabled("y1", layer, 0));
  }
}

TEST(FullTapName, LayerAndGlobal) {
  EXPECT_EQ(full_tap_name("attn_q", 3), "blk.3.attn_q");
  EXPECT_EQ(full_tap_name("output", -1), "output");
  EXPECT_EQ(split_full_tap_name("blk.3.attn_q"), std::make_pair(std::string("attn_q"), 3));
  EXPECT_EQ(split_full_tap_name("blk.12.ffn_norm.weight"), std::make_pair(std::string("ffn_norm.weight"), 12));
  EXPECT_EQ(split_full_tap_name("output"), std::make_pair(std::string("output"), -1));
  EXPECT_EQ(split_full_tap_name("blk.x.attn_q"), std::make_pair(std::string("blk.x.attn_q"), -1));
  EXPECT_EQ(split_full_tap_name("blk."), std::make_pair(std::string("blk."), -1));
}

}  // namespace
}  // namespace tapdiff
