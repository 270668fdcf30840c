// Each regex of a pre-tokenizer is a matcher: given the characters of one piece and a
// position, the length of the regex's leftmost match starting there (0 for none). Applying a
// regex splits every piece into its matches and the runs of characters between them
// (llama.cpp's unicode_regex_split; Hugging Face's Split with behavior "isolated"); the next
// regex then applies within each of those. Lookaheads see only the current piece.
#include "model/pretokenize.hpp"

#include "model/unicode.hpp"

namespace tapdiff {
namespace {

class Cursor {
public:
  Cursor(const std::vector<char32_t>& cps, const std::vector<std::uint8_t>& cls, std::size_t end)
      : cps_(cps), cls_(cls), end_(end) {}

  std::size_t end() const { return end_; }
  char32_t cp(std::size_t i) const { return i < end_ ? cps_[i] : 0; }
  bool has(std::size_t i, std::uint8_t flags) const { return i < end_ && (cls_[i] & flags); }
  bool letter(std::size_t i) const { return has(i, unicode::kLetter); }
  bool number(std::size_t i) const { return has(i, unicode::kNumber); }
  bool space(std::size_t i) const { return has(i, unicode::kWhitespace); }
  // [^\s\p{L}\p{N}]
  bool other(std::size_t i) const {
    return i < end_ && !has(i, unicode::kLetter | unicode::kNumber | unicode::kWhitespace);
  }
  bool newline(std::size_t i) const { return cp(i) == U'\r' || cp(i) == U'\n'; }

  template <class Pred>
  std::size_t run(std::size_t i, Pred pred) const {
    while (pred(i)) ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d; with any_case, (?i:...) over the ASCII letters.
  std::size_t contraction(std::size_t i, bool any_case) const {
    if (cp(i) != U'\'') return 0;
    auto at = [&](std::size_t k) {
      const char32_t c = cp(k);
      return any_case && c >= U'A' && c <= U'Z' ? c + 32 : c;
    };
    const char32_t a = at(i + 1), b = at(i + 2);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at a whitespace character: the run, less its last character when a
  // non-space follows (that one starts the next word), but never empty.
  std::size_t trailing_space(std::size_t i) const {
    const std::size_t e = run(i, [this](std::size_t k) { return space(k); });
    if (e == end_ || e - i == 1) return e - i;
    return e - i - 1;
  }

private:
  const std::vector<char32_t>& cps_;
  const std::vector<std::uint8_t>& cls_;
  std::size_t end_;
};

using Match = std::size_t (*)(const Cursor&, std::size_t);

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t match_gpt2(const Cursor& c, std::size_t i) {
  if (std::size_t n = c.contraction(i, false)) return n;
  // " ?" takes the space only when the class follows it; the space itself is in none of them.
  const std::size_t p = c.cp(i) == U' ' ? i + 1 : i;
  if (c.letter(p)) return c.run(p, [&](std::size_t k) { return c.letter(k); }) - i;
  if (c.number(p)) return c.run(p, [&](std::size_t k) { return c.number(k); }) - i;
  if (c.other(p)) return c.run(p, [&](std::size_t k) { return c.other(k); }) - i;
  return c.space(i) ? c.trailing_space(i) : 0;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,kMaxDigits}
// | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <std::size_t kMaxDigits>
std::size_t match_llama3(const Cursor& c, std::size_t i) {
  if (std::size_t n = c.contraction(i, true)) return n;
  auto letters = [&](std::size_t k) { return c.letter(k); };
  if (c.letter(i)) return c.run(i, letters) - i;
  if (i < c.end() && !c.newline(i) && !c.number(i) && c.letter(i + 1)) return c.run(i + 1, letters) - i;
  if (c.number(i)) {
    std::size_t k = i;
    while (k - i < kMaxDigits && c.number(k)) ++k;
    return k - i;
  }
  const std::size_t p = c.cp(i) == U' ' && c.other(i + 1) ? i + 1 : i;
  if (c.other(p)) {
    const std::size_t e = c.run(p, [&](std::size_t k) { return c.other(k); });
    return c.run(e, [&](std::size_t k) { return c.newline(k); }) - i;
  }
  if (!c.space(i)) return 0;
  // \s*[\r\n]+: through the last line break of the whitespace run.
  const std::size_t e = c.run(i, [&](std::size_t k) { return c.space(k); });
  for (std::size_t k = e; k > i; --k)
    if (c.newline(k - 1)) return k - i;
  return c.trailing_space(i);
}

// \p{N}
std::size_t match_number(const Cursor& c, std::size_t i) { return c.number(i) ? 1 : 0; }

// \p{N}+
std::size_t match_numbers(const Cursor& c, std::size_t i) {
  return c.run(i, [&](std::size_t k) { return c.number(k); }) - i;
}

// [0-9][0-9][0-9]
std::size_t match_three_ascii_digits(const Cursor& c, std::size_t i) {
  for (std::size_t k = i; k < i + 3; ++k)
    if (c.cp(k) < U'0' || c.cp(k) > U'9') return 0;
  return 3;
}

// [\p{P}\$\+<=>\^~\|]+
std::size_t match_punctuation(const Cursor& c, std::size_t i) {
  auto punct = [&](std::size_t k) {
    if (c.has(k, unicode::kPunctuation)) return true;
    const char32_t cp = c.cp(k);
    return cp == U'$' || cp == U'+' || cp == U'<' || cp == U'=' || cp == U'>' || cp == U'^' ||
           cp == U'~' || cp == U'|';
  };
  return c.run(i, punct) - i;
}

std::vector<Match> regexes(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::llama_default:
      // GPT-2's regex without the final \s+ here: a lone space before a word is then left
      // unmatched, which splits the same.
      return {match_punctuation, match_gpt2, match_numbers, match_three_ascii_digits};
    case PreTokenizer::gpt2: return {match_gpt2};
    case PreTokenizer::smollm: return {match_number, match_gpt2};
    case PreTokenizer::qwen2: return {match_llama3<1>};
    case PreTokenizer::llama3: return {match_llama3<3>};
  }
  return {};
}

struct Span {
  std::size_t begin, end;  // character indices
};

std::vector<Span> split(const std::vector<Span>& pieces, Match match, const std::vector<char32_t>& cps,
                        const std::vector<std::uint8_t>& cls) {
  std::vector<Span> out;
  for (const Span& piece : pieces) {
    const Cursor cursor(cps, cls, piece.end);
    std::size_t unmatched = piece.begin;
    for (std::size_t i = piece.begin; i < piece.end;) {
      const std::size_t n = match(cursor, i);
      if (n == 0) {
        ++i;
        continue;
      }
      if (unmatched < i) out.push_back({unmatched, i});
      out.push_back({i, i + n});
      i += n;
      unmatched = i;
    }
    if (unmatched < piece.end) out.push_back({unmatched, piece.end});
  }
  return out;
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_named(std::string_view name) {
  if (name == "default") return PreTokenizer::llama_default;
  if (name == "gpt2" || name == "gpt-2") return PreTokenizer::gpt2;
  if (name == "smollm") return PreTokenizer::smollm;
  if (name == "qwen2") return PreTokenizer::qwen2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::llama3;
  return std::nullopt;
}

const char* supported_pre_tokenizers() { return "default, gpt2, gpt-2, smollm, qwen2, llama-bpe, llama3, llama-v3"; }

std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer pre) {
  const std::vector<unicode::Char> chars = unicode::decode_utf8(text);
  std::vector<char32_t> cps;
  std::vector<std::uint8_t> cls;
  cps.reserve(chars.size());
  cls.reserve(chars.size());
  for (const auto& ch : chars) {
    cps.push_back(ch.cp);
    cls.push_back(unicode::classes(ch.cp));
  }
  std::vector<Span> pieces;
  if (!chars.empty()) pieces.push_back({0, chars.size()});
  for (Match match : regexes(pre)) pieces = split(pieces, match, cps, cls);

  std::vector<std::string_view> words;
  words.reserve(pieces.size());
  for (const Span& s : pieces) {
    const std::size_t from = chars[s.begin].offset;
    const std::size_t to = chars[s.end - 1].offset + chars[s.end - 1].length;
    words.push_back(text.substr(from, to - from));
  }
  return words;
}

}  // namespace tapdiff
