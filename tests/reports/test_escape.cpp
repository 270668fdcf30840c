// Escaping: table-driven, one case per hazard a trace from an arbitrary engine can carry.
#include <gtest/gtest.h>

#include "reports/escape.hpp"

namespace tapdiff::reports {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

struct CleanCase {
  const char* what;
  std::string input, expected;
};

TEST(ReportsEscape, CleanUtf8ReplacesWhatXmlCannotHold) {
  const CleanCase cases[] = {
      {"ascii", "blk.0.attn_q", "blk.0.attn_q"},
      {"multibyte kept", "\xC3\xA9\xE2\x80\x94\xF0\x9F\x98\x80",
       "\xC3\xA9\xE2\x80\x94\xF0\x9F\x98\x80"},
      {"lone continuation",
       "a\x80"
       "b",
       "a" + kFffd + "b"},
      {"truncated sequence", "a\xE2\x80", "a" + kFffd + kFffd},
      {"overlong slash", "\xC0\xAF", kFffd + kFffd},
      {"surrogate", "\xED\xA0\x80", kFffd + kFffd + kFffd},
      {"beyond U+10FFFF", "\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},
      {"C0 control",
       std::string("a\x01"
                   "b"),
       "a" + kFffd + "b"},
      {"escape", "\x1b[31m", kFffd + "[31m"},
      {"NUL", std::string("a\0b", 3), "a" + kFffd + "b"},
      {"DEL", "a\x7f", "a" + kFffd},
      {"U+FFFE", "\xEF\xBF\xBE", kFffd},
      {"whitespace kept", "a\tb\nc\rd", "a\tb\nc\rd"},
  };
  for (const auto& c : cases) EXPECT_EQ(clean_utf8(c.input), c.expected) << c.what;
  EXPECT_EQ(clean_utf8("a\tb\nc", true), "a b c");
}

TEST(ReportsEscape, XmlEscapesMarkupAndAttributeWhitespace) {
  EXPECT_EQ(xml_escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(xml_escape("a\nb"), "a\nb");
  EXPECT_EQ(xml_attr("a\nb\tc"), "a&#10;b&#9;c");
  EXPECT_EQ(xml_escape("]]> --"), "]]&gt; --");
}

TEST(ReportsEscape, MarkdownStaysInItsTableCell) {
  EXPECT_EQ(md_escape("a|b"), "a\\|b");
  EXPECT_EQ(md_escape("<script>&"), "&lt;script&gt;&amp;");
  EXPECT_EQ(md_escape("*bold* _it_ `code` [link]"), "\\*bold\\* \\_it\\_ \\`code\\` \\[link\\]");
  EXPECT_EQ(md_escape("line\nbreak"), "line break");
  EXPECT_EQ(md_code("blk.0.attn_q"), "`blk.0.attn_q`");
  EXPECT_EQ(md_code("a|b`c"), "a\\|b\\`c");
  EXPECT_EQ(md_code(""), "");
}

TEST(ReportsEscape, TerminalTextCannotCarryEscapeSequences) {
  const std::string out = terminal_safe("red\x1b[31m\x07 line\nnext");
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(out.find('\x07'), std::string::npos);
  EXPECT_EQ(out.find('\n'), std::string::npos);
}

TEST(ReportsEscape, PadCountsCodePoints) {
  EXPECT_EQ(pad("ab", 4), "ab  ");
  EXPECT_EQ(pad("ab", 4, true), "  ab");
  EXPECT_EQ(pad("\xC3\xA9", 3), "\xC3\xA9  ");
  EXPECT_EQ(pad("abcdef", 3), "abcdef");
}

}  // namespace
}  // namespace tapdiff::reports
