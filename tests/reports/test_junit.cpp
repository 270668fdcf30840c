// JUnit XML: one testcase per tap class plus the verdict; counts in the suite's attributes.
// (tests/reports/test_reports_xml.py parses the same output with a real XML parser.)
#include <gtest/gtest.h>

#include "reports/render.hpp"
#include "sample_results.hpp"

namespace tapdiff::reports {
namespace {

TEST(ReportsJunit, DivergedFailsEveryClassWithADivergedTapAndTheVerdict) {
  const std::string xml = render(testing::diverged_result(), Format::junit);
  // Nine tap classes (embedding, norm, projection, rope, cache, attention, residual,
  // activation, logits) + the verdict; everything but embedding diverges after attn.probs.
  EXPECT_NE(xml.find("<testsuite name=\"tapdiff\" tests=\"10\" failures=\"9\" errors=\"0\""),
            std::string::npos)
      << xml;
  EXPECT_EQ(testing::count_occurrences(xml, "<testcase "), 10);
  EXPECT_EQ(testing::count_occurrences(xml, "<failure "), 9);
  EXPECT_NE(xml.find("<testcase classname=\"tapdiff.taps\" name=\"embedding\" time=\"0\"/>"),
            std::string::npos);
  EXPECT_NE(xml.find("message=\"blk.0.attn.probs diverged at position 8: nmse"), std::string::npos);
  EXPECT_NE(xml.find("message=\"DIVERGED: blk.0.attn.probs at position 8; diagnosis kv-cache"),
            std::string::npos);
}

TEST(ReportsJunit, PassAndIncompatible) {
  const std::string pass = render(testing::passing_result(), Format::junit);
  EXPECT_NE(pass.find("tests=\"10\" failures=\"0\""), std::string::npos);
  EXPECT_EQ(testing::count_occurrences(pass, "<failure "), 0);
  const std::string inc = render(testing::incompatible_result(), Format::junit);
  EXPECT_NE(inc.find("tests=\"1\" failures=\"1\""), std::string::npos) << inc;
  EXPECT_NE(inc.find("type=\"incompatible\" message=\"INCOMPATIBLE: different models"),
            std::string::npos)
      << inc;
}

TEST(ReportsJunit, HostileContentIsEscaped) {
  const std::string xml = render(testing::hostile_result(), Format::junit);
  for (const char* raw : {"<script>", "<b>", "<&>", "\x1b", "\x01", "\xff"})
    EXPECT_EQ(xml.find(raw), std::string::npos) << raw;
  EXPECT_NE(xml.find("blk.1.attn_q&lt;&amp;&gt;&quot;&#39;"), std::string::npos);
}

}  // namespace
}  // namespace tapdiff::reports
