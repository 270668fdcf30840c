#include "model/tokenizer.hpp"

#include <fmt/format.h>
#include <queue>

#include "model/error.hpp"

namespace tapdiff {
namespace {

const std::string kSpace = "\xe2\x96\x81";  // U+2581 "▁"
constexpr int kTypeControl = 3, kTypeByte = 6;

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;  // a stray continuation byte stands alone (byte fallback covers it)
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  Tokenizer t;
  t.source_ = f.path();
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "llama" && model != "gpt2")
    throw InputError(f.path(), "tokenizer.ggml.model",
                     fmt::format("tokenizer \"{}\" is not supported (SentencePiece \"llama\" or byte-level BPE \"gpt2\")", model));
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type() != GgufValueType::ARRAY || tokens->array_type() != GgufValueType::STRING)
    throw InputError(f.path(), "tokenizer.ggml.tokens", "expected an array of strings");
  for (const auto& v : tokens->as_array()) t.tokens_.push_back(v.as_string());
  const std::size_t n = t.tokens_.size();
  if (const GgufValue* scores = f.find("tokenizer.ggml.scores")) {
    if (scores->type() != GgufValueType::ARRAY || scores->as_array().size() != n)
      throw InputError(f.path(), "tokenizer.ggml.scores", fmt::format("expected an array of {} numbers", n));
    for (const auto& v : scores->as_array()) t.scores_.push_back(float(v.as_float()));
  } else {
    t.scores_.assign(n, 0.0f);
  }
  if (const GgufValue* types = f.find("tokenizer.ggml.token_type")) {
    if (types->type() != GgufValueType::ARRAY || types->as_array().size() != n)
      throw InputError(f.path(), "tokenizer.ggml.token_type", fmt::format("expected an array of {} integers", n));
    for (const auto& v : types->as_array()) t.types_.push_back(int(v.as_int()));
  } else {
    t.types_.assign(n, 1);
  }
  for (std::size_t i = 0; i < n; ++i) t.ids_.emplace(t.tokens_[i], int(i));
  if (model == "gpt2") t.bpe_ = BpeTokenizer::from_gguf(f, t.tokens_, t.types_);

  auto special_id = [&](const char* key, int fallback) {
    const auto id = f.get_uint_opt(key);
    if (id && *id >= n) throw InputError(f.path(), key, fmt::format("expected a token id below {}, got {}", n, *id));
    return id ? int(*id) : fallback;
  };
  t.bos_ = special_id("tokenizer.ggml.bos_token_id", t.bpe_ ? -1 : 1);
  t.eos_ = special_id("tokenizer.ggml.eos_token_id", t.bpe_ ? -1 : 2);
  t.add_bos_ = t.bpe_ ? t.bpe_->adds_bos_by_default() : true;
  if (const GgufValue* add = f.find("tokenizer.ggml.add_bos_token")) t.add_bos_ = add->as_bool();
  if (const GgufValue* add = f.find("tokenizer.ggml.add_eos_token")) t.add_eos_ = add->as_bool();
  if (t.add_bos_ && t.bos_ < 0)
    throw InputError(f.path(), "tokenizer.ggml.bos_token_id", "add_bos_token is true, but no BOS id is set");
  if (t.add_eos_ && t.eos_ < 0)
    throw InputError(f.path(), "tokenizer.ggml.eos_token_id", "add_eos_token is true, but no EOS id is set");
  return t;
}

int Tokenizer::byte_token(unsigned char byte) const {
  auto it = ids_.find(fmt::format("<0x{:02X}>", byte));
  if (it == ids_.end())
    throw InputError(source_, "tokenizer.ggml.tokens", fmt::format("no byte token <0x{:02X}> for byte fallback", byte));
  return it->second;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> out;
  if (add_bos_) out.push_back(bos_);
  if (bpe_) {
    const std::vector<int> ids = bpe_->encode(text, ids_);
    out.insert(out.end(), ids.begin(), ids.end());
  } else {
    encode_spm(text, out);
  }
  if (add_eos_) out.push_back(eos_);
  return out;
}

void Tokenizer::encode_spm(std::string_view text, std::vector<int>& out) const {
  if (text.empty()) return;
  std::string s = kSpace;
  for (char c : text) s += c == ' ' ? kSpace : std::string(1, c);

  // Symbols: one per UTF-8 character, as a doubly linked list over `s`.
  struct Symbol {
    std::size_t at, len;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = std::min(utf8_length(static_cast<unsigned char>(s[i])), s.size() - i);
    sym.push_back({i, len, int(sym.size()) - 1, int(sym.size()) + 1});
    i += len;
  }
  sym.back().next = -1;

  struct Bigram {
    int left, right;
    float score;
    std::size_t len;
  };
  // Highest score first; on ties the leftmost pair (llama.cpp's order).
  auto worse = [](const Bigram& a, const Bigram& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::size_t len = sym[std::size_t(l)].len + sym[std::size_t(r)].len;
    auto it = ids_.find(s.substr(sym[std::size_t(l)].at, len));
    if (it != ids_.end()) queue.push({l, r, scores_[std::size_t(it->second)], len});
  };
  for (std::size_t i = 1; i < sym.size(); ++i) try_pair(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[std::size_t(b.left)];
    Symbol& r = sym[std::size_t(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[std::size_t(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[std::size_t(i)].next) {
    const Symbol& x = sym[std::size_t(i)];
    auto it = ids_.find(s.substr(x.at, x.len));
    if (it != ids_.end()) {
      out.push_back(it->second);
    } else {
      for (std::size_t k = 0; k < x.len; ++k) out.push_back(byte_token(static_cast<unsigned char>(s[x.at + k])));
    }
  }
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  for (int id : ids)
    if (id < 0 || id >= n_vocab()) throw std::out_of_range(fmt::format("token id {} outside the vocabulary", id));
  std::size_t first = 0, last = ids.size();
  if (add_bos_ && last > first && ids[first] == bos_) ++first;
  if (add_eos_ && last > first && ids[last - 1] == eos_) --last;
  if (!bpe_) return decode_spm(ids, first, last);
  std::string out;
  for (std::size_t k = first; k < last; ++k) {
    const std::size_t i = static_cast<std::size_t>(ids[k]);
    out += BpeTokenizer::decode_piece(tokens_[i], types_[i]);
  }
  return out;
}

std::string Tokenizer::decode_spm(const std::vector<int>& ids, std::size_t first, std::size_t last) const {
  std::string out;
  for (std::size_t n = first; n < last; ++n) {
    const std::size_t i = static_cast<std::size_t>(ids[n]);
    if (types_[i] == kTypeControl) continue;
    const std::string& p = tokens_[i];
    if (types_[i] == kTypeByte && p.size() == 6) {
      out += static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16));
      continue;
    }
    for (std::size_t k = 0; k < p.size();) {
      if (p.compare(k, kSpace.size(), kSpace) == 0) {
        out += ' ';
        k += kSpace.size();
      } else {
        out += p[k++];
      }
    }
  }
  if (!out.empty() && out.front() == ' ') out.erase(0, 1);  // the prefix space encode() added
  return out;
}

}  // namespace tapdiff
