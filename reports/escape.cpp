#include "reports/escape.hpp"

#include <cstdint>

namespace tapdiff::reports {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates,
// at most U+10FFFF), or 0 when it is not one; *cp receives the code point.
std::size_t decode(std::string_view s, std::size_t i, std::uint32_t* cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  std::size_t n = 0;
  std::uint32_t min = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
    *cp = c & 0x1Fu;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
    *cp = c & 0x0Fu;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
    *cp = c & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b(k) & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return n;
}

bool forbidden(std::uint32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  return cp < 0x20 || cp == 0x7F || cp == 0xFFFE || cp == 0xFFFF;
}

}  // namespace

std::string clean_utf8(std::string_view text, bool one_line) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = decode(text, i, &cp);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (forbidden(cp))
      out += kReplacement;
    else if (one_line && (cp == '\t' || cp == '\n' || cp == '\r'))
      out += ' ';
    else
      out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

namespace {

std::string xml_references(std::string_view text, bool whitespace) {
  std::string out;
  for (char c : clean_utf8(text)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t': out += whitespace ? "&#9;" : "\t"; break;
      case '\n': out += whitespace ? "&#10;" : "\n"; break;
      case '\r': out += whitespace ? "&#13;" : "\r"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string xml_escape(std::string_view text) { return xml_references(text, false); }
std::string xml_attr(std::string_view text) { return xml_references(text, true); }

std::string terminal_safe(std::string_view text) { return clean_utf8(text, true); }

std::string md_escape(std::string_view text) {
  std::string out;
  for (char c : clean_utf8(text, true)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '|':
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '#':
      case '~':
      case '!':
        out += '\\';
        out += c;
        break;
      default: out += c;
    }
  }
  return out;
}

std::string md_code(std::string_view text) {
  bool plain = !text.empty();
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '/' || c == ':' || c == '+' ||
                    c == '=' || c == ',';
    if (!ok) plain = false;
  }
  if (!plain) return md_escape(text);
  return "`" + std::string(text) + "`";
}

std::size_t display_width(std::string_view text) {
  std::size_t width = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++width;
  return width;
}

std::string pad(std::string_view text, std::size_t width, bool right_align) {
  const std::size_t w = display_width(text);
  if (w >= width) return std::string(text);
  const std::string fill(width - w, ' ');
  return right_align ? fill + std::string(text) : std::string(text) + fill;
}

}  // namespace tapdiff::reports
