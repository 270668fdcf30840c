// Escaping of names, paths and free text for each output format. Every renderer passes text it
// did not write itself through one of these: traces come from any engine, so a tap name or a
// path may hold markup characters, control characters or invalid UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tapdiff::reports {

// Valid UTF-8: invalid sequences and the control characters XML 1.0 forbids (all C0 but tab,
// LF, CR; DEL; U+FFFE/U+FFFF) become U+FFFD. With one_line, tab/LF/CR become a space too.
std::string clean_utf8(std::string_view text, bool one_line = false);

// XML/HTML element text: & < > " ' as references.
std::string xml_escape(std::string_view text);
// XML/HTML attribute values: as xml_escape, plus tab/LF/CR as references so they survive
// attribute-value normalization.
std::string xml_attr(std::string_view text);

// One line of terminal text: no escape sequences, no line breaks.
std::string terminal_safe(std::string_view text);

// Markdown (GitHub-flavoured), safe inside a table cell: one line, pipes and markup escaped.
std::string md_escape(std::string_view text);
// `text` as a code span when it is made of plain name characters, else md_escape(text).
std::string md_code(std::string_view text);

// Display width in columns, counting one per code point (enough for the names we print).
std::size_t display_width(std::string_view text);
// text padded with spaces on the right (left = false) or left to `width` columns.
std::string pad(std::string_view text, std::size_t width, bool right_align = false);

}  // namespace tapdiff::reports
