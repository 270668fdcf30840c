// HTML: self-contained, carries the first divergence, two heatmaps, escapes everything.
// (test_reports_chromium.py renders it in a real browser.)
#include <gtest/gtest.h>

#include "reports/render.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

TEST(ReportsHtml, DivergedShowsFirstDivergenceDiagnosisAndHeatmaps) {
  const std::string html = render(testing::diverged_result(), Format::html);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* expected :
       {"<div class=\"verdict\">DIVERGED</div>",
        "<div class=\"headline\">blk.0.attn.probs at position 8</div>",
        "<code class=\"tap\">blk.0.attn.probs</code> at position <b>8</b>",
        "<span class=\"badge\">kv-cache</span>", "the correct computation",
        "<svg class=\"heatmap\" id=\"layer-tap\"", "<svg class=\"heatmap\" id=\"position-layer\"",
        "<rect class=\"first\"", ">prompt</text>", "id=\"logits\"", "class=\"differs\"",
        "3f9a0c1d2e4b5a6978c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d", "aaa0604c2f1e",
        "kv-stuck-length"})
    EXPECT_NE(html.find(expected), std::string::npos) << "missing: " << expected;
  EXPECT_EQ(testing::count_occurrences(html, "<svg class=\"heatmap\""), 2);
  EXPECT_EQ(testing::count_occurrences(html, "<title>first divergence</title></rect>"), 2)
      << "one outlined cell per heatmap";
}

TEST(ReportsHtml, SelfContained) {
  for (const auto& [name, result] : testing::all_results()) {
    const std::string html = render(result, Format::html);
    for (const char* banned :
         {"http://", "https://", "<script", "<link", "@import", "url(http", "<img", "<iframe"})
      EXPECT_EQ(html.find(banned), std::string::npos) << name << ": " << banned;
    EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
  }
}

TEST(ReportsHtml, NonFiniteCellsAreMarked) {
  const std::string html = render(testing::hostile_result(), Format::html);
  EXPECT_NE(html.find("fill=\"url(#layer-tap-nonfinite)\""), std::string::npos);
  EXPECT_NE(html.find("fill=\"url(#position-layer-nonfinite)\""), std::string::npos);
}

TEST(ReportsHtml, HostileContentIsEscaped) {
  const std::string html = render(testing::hostile_result(), Format::html);
  for (const char* raw :
       {"<script>", "<b>bold", "'<b>", "<&>", "<fault>", "<first>", "\x1b", "\x01", "\xff", "<!--"})
    EXPECT_EQ(html.find(raw), std::string::npos) << raw;
  EXPECT_NE(html.find("blk.1.attn_q&lt;&amp;&gt;&quot;&#39;"), std::string::npos);
  EXPECT_NE(html.find("/tmp/we&lt;i&gt;rd &amp; &quot;trace&quot; &#39;x&#39;.h5"),
            std::string::npos);
}

TEST(ReportsHtml, IncompatibleHasNoHeatmapsButExplainsWhy) {
  const std::string html = render(testing::incompatible_result(), Format::html);
  EXPECT_NE(html.find("<div class=\"verdict\">INCOMPATIBLE</div>"), std::string::npos);
  EXPECT_NE(html.find("different models"), std::string::npos);
  EXPECT_EQ(testing::count_occurrences(html, "<svg class=\"heatmap\""), 0);
}

}  // namespace
}  // namespace tapdiff::reports
