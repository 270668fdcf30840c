// Unicode code point classes for the BPE pre-tokenizers (\p{L}, \p{N}, \p{P}, \s) and UTF-8
// decoding. The class table is generated: model/unicode_tables.cpp, by
// scripts/gen_unicode_tables.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tapdiff::unicode {

enum Class : std::uint8_t { kLetter = 1, kNumber = 2, kPunctuation = 4, kWhitespace = 8 };

struct CodepointRun {
  std::uint32_t first;  // the run lasts until the next run's first code point
  std::uint8_t flags;   // Class bits
};
extern const CodepointRun kRuns[];
extern const std::size_t kRunCount;
extern const char* const kTableVersion;  // the Unicode version the table was generated from

std::uint8_t classes(char32_t cp);

// One decoded character: its code point and where its bytes sit in the text. A byte that does
// not start a valid UTF-8 sequence is a character of its own with code point kInvalid (no class).
struct Char {
  char32_t cp;
  std::size_t offset, length;
};
constexpr char32_t kInvalid = 0xFFFFFFFF;
std::vector<Char> decode_utf8(std::string_view text);

std::string encode_utf8(char32_t cp);

}  // namespace tapdiff::unicode
