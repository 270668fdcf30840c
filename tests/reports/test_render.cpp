// render(): format names, and every format renders every sample result.
#include <gtest/gtest.h>

#include "reports/render.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

TEST(ReportsRender, ParsesFormatNames) {
  const std::pair<const char*, Format> names[] = {
      {"text", Format::text}, {"md", Format::markdown}, {"markdown", Format::markdown},
      {"json", Format::json}, {"junit", Format::junit}, {"html", Format::html}};
  for (const auto& [name, format] : names) {
    ASSERT_TRUE(parse_format(name)) << name;
    EXPECT_EQ(*parse_format(name), format) << name;
  }
  for (const char* bad : {"", "HTML", "xml", "txt", "mark"}) EXPECT_FALSE(parse_format(bad)) << bad;
  EXPECT_EQ(format_name(Format::markdown), "markdown");
  EXPECT_EQ(format_extension(Format::junit), "xml");
}

TEST(ReportsRender, EveryFormatRendersEverySample) {
  for (const auto& [name, result] : testing::all_results())
    for (Format f : {Format::text, Format::markdown, Format::json, Format::junit, Format::html})
      EXPECT_FALSE(render(result, f).empty()) << name << " as " << format_name(f);
}

TEST(ReportsRender, EmptyResultRenders) {
  const diff::DiffResult empty;
  for (Format f : {Format::text, Format::markdown, Format::json, Format::junit, Format::html})
    EXPECT_FALSE(render(empty, f).empty()) << format_name(f);
}

// Renderers look the first divergence's tap up in `taps`; a result without it must still render.
TEST(ReportsRender, FirstDivergenceWithoutItsTapRenders) {
  diff::DiffResult r = testing::diverged_result();
  r.taps.clear();
  r.logits->positions.clear();
  for (Format f : {Format::text, Format::markdown, Format::json, Format::junit, Format::html})
    EXPECT_NE(render(r, f).find("blk.0.attn.probs"), std::string::npos) << format_name(f);
}

}  // namespace
}  // namespace tapdiff::reports
