// Parses the CLI's token lists: "1,2,3" (spaces allowed around commas).
#pragma once

#include <string_view>
#include <vector>

namespace tapdiff {

// Throws std::invalid_argument naming the option and the offending item, e.g.
// "--tokens: item 3 \"x7\": expected a token id (non-negative integer)".
std::vector<int> parse_token_list(std::string_view text, std::string_view option = "--tokens");

}  // namespace tapdiff
