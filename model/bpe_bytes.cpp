#include "model/bpe_bytes.hpp"

#include <array>
#include <unordered_map>

#include "model/unicode.hpp"

namespace tapdiff {
namespace {

struct ByteSymbols {
  std::array<std::string, 256> symbol;
  std::unordered_map<char32_t, unsigned char> byte;

  ByteSymbols() {
    char32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      const char32_t cp = printable ? char32_t(b) : shifted++;
      symbol[std::size_t(b)] = unicode::encode_utf8(cp);
      byte.emplace(cp, static_cast<unsigned char>(b));
    }
  }
};

const ByteSymbols& byte_symbols() {
  static const ByteSymbols table;
  return table;
}

}  // namespace

std::string bytes_to_symbols(std::string_view bytes) {
  const ByteSymbols& t = byte_symbols();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.symbol[static_cast<unsigned char>(c)];
  return out;
}

std::optional<std::string> symbols_to_bytes(std::string_view symbols) {
  const ByteSymbols& t = byte_symbols();
  std::string out;
  for (const unicode::Char& ch : unicode::decode_utf8(symbols)) {
    auto it = t.byte.find(ch.cp);
    if (it == t.byte.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

}  // namespace tapdiff
