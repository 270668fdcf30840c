#include "model/unicode.hpp"

#include <algorithm>

namespace tapdiff::unicode {

std::uint8_t classes(char32_t cp) {
  if (cp > 0x10FFFF) return 0;
  const CodepointRun* end = kRuns + kRunCount;
  const CodepointRun* after =
      std::upper_bound(kRuns, end, cp, [](char32_t c, const CodepointRun& r) { return c < r.first; });
  return after == kRuns ? 0 : (after - 1)->flags;
}

std::vector<Char> decode_utf8(std::string_view s) {
  std::vector<Char> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    char32_t cp = 0;
    char32_t min = 0;  // the smallest code point of this length: shorter forms are overlong
    if (lead < 0x80) {
      len = 1, cp = lead;
    } else if ((lead & 0xe0) == 0xc0) {
      len = 2, cp = lead & 0x1f, min = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      len = 3, cp = lead & 0x0f, min = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      len = 4, cp = lead & 0x07, min = 0x10000;
    }
    bool valid = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; valid && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      valid = (c & 0xc0) == 0x80;
      cp = (cp << 6) | (c & 0x3f);
    }
    valid = valid && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (valid) {
      out.push_back({cp, i, len});
      i += len;
    } else {
      out.push_back({kInvalid, i, 1});
      ++i;
    }
  }
  return out;
}

std::string encode_utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3f));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

}  // namespace tapdiff::unicode
