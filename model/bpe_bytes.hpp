// GPT-2's byte-to-unicode mapping: byte-level BPE vocabularies spell every byte as one visible
// character, printable bytes as themselves and the others (space, controls, 0x7f-0xa0, 0xad)
// as code points 256, 257, ... in byte order, so that " " becomes "Ġ" (U+0120).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tapdiff {

// The text with each byte replaced by its symbol (UTF-8).
std::string bytes_to_symbols(std::string_view bytes);
// The bytes a symbol string spells; nullopt when a character is not a byte symbol.
std::optional<std::string> symbols_to_bytes(std::string_view symbols);

}  // namespace tapdiff
