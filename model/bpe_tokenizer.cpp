#include "model/bpe_tokenizer.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <queue>

#include "model/bpe_bytes.hpp"
#include "model/error.hpp"
#include "model/unicode.hpp"

namespace tapdiff {
namespace {

constexpr int kTypeControl = 3, kTypeUserDefined = 4;

bool is_special(int type) { return type == kTypeControl || type == kTypeUserDefined; }

}  // namespace

BpeTokenizer BpeTokenizer::from_gguf(const GgufFile& f, const std::vector<std::string>& tokens,
                                     const std::vector<int>& types) {
  BpeTokenizer t;
  t.source_ = f.path();
  const std::string pre = f.get_string_opt("tokenizer.ggml.pre").value_or("default");
  const auto kind = pre_tokenizer_named(pre);
  if (!kind)
    throw InputError(f.path(), "tokenizer.ggml.pre",
                     fmt::format("unknown pre-tokenizer \"{}\" (supported: {})", pre, supported_pre_tokenizers()));
  t.pre_ = *kind;
  t.ignore_merges_ = t.pre_ == PreTokenizer::llama3;

  const GgufValue* merges = f.find("tokenizer.ggml.merges");
  if (!merges || merges->type() != GgufValueType::ARRAY || merges->array_type() != GgufValueType::STRING)
    throw InputError(f.path(), "tokenizer.ggml.merges", "expected an array of strings \"left right\"");
  const auto& list = merges->as_array();
  t.ranks_.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string& m = list[i].as_string();
    const std::size_t space = m.find(' ', 1);
    if (space == std::string::npos || space + 1 >= m.size())
      throw InputError(f.path(), fmt::format("tokenizer.ggml.merges[{}]", i),
                       fmt::format("expected \"left right\", got \"{}\"", m));
    t.ranks_.emplace(m, int(i));  // the first of duplicate merges keeps its rank
  }

  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (is_special(types[i]) && !tokens[i].empty()) t.specials_.push_back({tokens[i], int(i)});
  std::stable_sort(t.specials_.begin(), t.specials_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
  return t;
}

std::vector<int> BpeTokenizer::encode(std::string_view text, const Ids& ids) const {
  std::vector<int> out;
  std::size_t plain = 0;  // start of the text not yet encoded
  for (std::size_t i = 0; i < text.size();) {
    const Special* hit = nullptr;
    for (const Special& s : specials_)
      if (text.compare(i, s.text.size(), s.text) == 0) {
        hit = &s;  // the longest, since specials_ is sorted by length
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain, i - plain), ids, out);
    out.push_back(hit->id);
    i += hit->text.size();
    plain = i;
  }
  encode_plain(text.substr(plain), ids, out);
  return out;
}

void BpeTokenizer::encode_plain(std::string_view text, const Ids& ids, std::vector<int>& out) const {
  for (std::string_view word : pretokenize(text, pre_)) encode_word(bytes_to_symbols(word), ids, out);
}

void BpeTokenizer::encode_word(std::string_view word, const Ids& ids, std::vector<int>& out) const {
  if (ignore_merges_) {
    auto it = ids.find(std::string(word));
    if (it != ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols: one per byte symbol (one UTF-8 character each), as a doubly linked list.
  struct Symbol {
    std::size_t at, len;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (const unicode::Char& ch : unicode::decode_utf8(word))
    sym.push_back({ch.offset, ch.length, int(sym.size()) - 1, int(sym.size()) + 1});
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Pair {
    int rank, left, right;
    std::size_t left_len, right_len;  // the symbols' lengths when queued: stale if either grew
  };
  auto later = [](const Pair& a, const Pair& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  std::priority_queue<Pair, std::vector<Pair>, decltype(later)> queue(later);
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Symbol& a = sym[std::size_t(l)];
    const Symbol& b = sym[std::size_t(r)];
    std::string key(word.substr(a.at, a.len));
    key += ' ';
    key += word.substr(b.at, b.len);
    auto it = ranks_.find(key);
    if (it != ranks_.end()) queue.push({it->second, l, r, a.len, b.len});
  };
  for (std::size_t i = 1; i < sym.size(); ++i) try_pair(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = sym[std::size_t(p.left)];
    Symbol& r = sym[std::size_t(p.right)];
    if (l.len != p.left_len || r.len != p.right_len || l.next != p.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[std::size_t(r.next)].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[std::size_t(i)].next) {
    const Symbol& s = sym[std::size_t(i)];
    auto it = ids.find(std::string(word.substr(s.at, s.len)));
    if (it != ids.end()) {
      out.push_back(it->second);
      continue;
    }
    // A merge result missing from the vocabulary: its byte symbols one by one.
    for (const unicode::Char& ch : unicode::decode_utf8(word.substr(s.at, s.len))) {
      const std::string one(word.substr(s.at + ch.offset, ch.length));
      auto byte = ids.find(one);
      if (byte == ids.end())
        throw InputError(source_, "tokenizer.ggml.tokens",
                         fmt::format("no token for the byte symbol \"{}\" (a byte-level vocabulary has all 256)", one));
      out.push_back(byte->second);
    }
  }
}

std::string BpeTokenizer::decode_piece(const std::string& piece, int type) {
  if (is_special(type)) return piece;
  if (auto bytes = symbols_to_bytes(piece)) return *bytes;
  return piece;  // not byte-level symbols (some vocabularies carry such tokens): as written
}

}  // namespace tapdiff
