// Spaces around a piece of a user's text (a tap filter, a layout clause) are not part of it.
#pragma once

#include <string_view>

namespace tapdiff {

inline std::string_view trim_spaces(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace tapdiff
