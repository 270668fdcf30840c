#include "app/token_list.hpp"

#include <charconv>
#include <fmt/format.h>
#include <stdexcept>

namespace tapdiff {

std::vector<int> parse_token_list(std::string_view text, std::string_view option) {
  std::vector<int> out;
  std::size_t start = 0;
  int index = 1;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int value = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0)
      throw std::invalid_argument(fmt::format(
          "{}: item {} \"{}\": expected a token id (non-negative integer)", option, index, item));
    out.push_back(value);
    start = end + 1;
    ++index;
  }
  return out;
}

}  // namespace tapdiff
