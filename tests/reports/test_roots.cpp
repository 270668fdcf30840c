// Independent roots (all and lockstep modes): every format shows every root with its tap, layer,
// class and variant, and the taps it explains.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "reports/render.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

using testing::count_occurrences;
using testing::lockstep_result;

TEST(ReportsRoots, TextHasTheLockstepTable) {
  const std::string text = render(lockstep_result(), Format::text);
  EXPECT_NE(text.find("findings: 4 independent roots · lockstep"), std::string::npos) << text;
  for (const char* line : {"   1  blk.0.attn_q ", "   2  blk.0.attn_q.rope ", "   3  blk.1.ffn_gate ",
                           "   4  output "})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_NE(text.find("also blk.0.attn_k"), std::string::npos);
  EXPECT_NE(text.find("shape [172] vs [64]"), std::string::npos);
  EXPECT_NE(text.find("n_embd used where n_ff belongs"), std::string::npos);
  EXPECT_NE(text.find("engine-host f32, fault bias-dropped,rope-wrong-pairing,lm-head-op-n, lockstep"),
            std::string::npos);
}

TEST(ReportsRoots, FirstModeWithoutShapesHasNoRootsSection) {
  const std::string text = render(testing::diverged_result(), Format::text);
  EXPECT_EQ(text.find("independent root"), std::string::npos);
}

TEST(ReportsRoots, JsonListsEveryRoot) {
  const auto j = nlohmann::json::parse(render(lockstep_result(), Format::json));
  EXPECT_EQ(j["mode"], "lockstep");
  EXPECT_EQ(j["actual"]["lockstep_source"], "build/demo/reference.h5");
  ASSERT_EQ(j["roots"].size(), 4u);
  EXPECT_EQ(j["roots"][0]["tap"], "blk.0.attn_q");
  EXPECT_EQ(j["roots"][0]["class"], "bias");
  EXPECT_EQ(j["roots"][0]["explained"], nlohmann::json::array({"blk.0.attn_k"}));
  EXPECT_EQ(j["roots"][1]["position"], 1);
  EXPECT_EQ(j["roots"][2]["kind"], "shape");
  EXPECT_TRUE(j["roots"][2]["metrics"].is_null());
  EXPECT_EQ(j["roots"][2]["expected_shape"], nlohmann::json::array({172}));
  EXPECT_EQ(j["roots"][2]["actual_shape"], nlohmann::json::array({64}));
  EXPECT_EQ(j["roots"][3]["diagnosis"]["class"], "matmul-layout");
  EXPECT_EQ(j["findings"][0]["expected_shape"], nlohmann::json::array({172}));
}

TEST(ReportsRoots, JunitHasOneFailingTestcasePerRoot) {
  const std::string xml = render(lockstep_result(), Format::junit);
  EXPECT_EQ(count_occurrences(xml, "classname=\"tapdiff.findings\""), 4);
  for (const char* name : {"name=\"1 blk.0.attn_q\"", "name=\"2 blk.0.attn_q.rope\"", "name=\"3 blk.1.ffn_gate\"",
                           "name=\"4 output\""})
    EXPECT_NE(xml.find(name), std::string::npos) << name;
  for (const char* type : {"type=\"bias\"", "type=\"rope\"", "type=\"shape\"", "type=\"matmul-layout\""})
    EXPECT_NE(xml.find(type), std::string::npos) << type;
}

TEST(ReportsRoots, MarkdownAndHtmlShowEveryRoot) {
  const std::string md = render(lockstep_result(), Format::markdown);
  const std::string html = render(lockstep_result(), Format::html);
  EXPECT_NE(md.find("**Findings: 4 independent roots**"), std::string::npos) << md;
  EXPECT_NE(html.find("id=\"roots\""), std::string::npos);
  for (const char* tap : {"blk.0.attn_q.rope", "blk.1.ffn_gate", "matmul-layout"}) {
    EXPECT_NE(md.find(tap), std::string::npos) << tap;
    EXPECT_NE(html.find(tap), std::string::npos) << tap;
  }
}

}  // namespace
}  // namespace tapdiff::reports
