// Byte-level BPE: ids and pre-tokenizer pieces pinned from Hugging Face `tokenizers`
// (tests/model/tokenizer_cases/*.json, written by tests/model/tools/pin_bpe_ids.py with the
// command recorded in each file) on SmolLM2's real vocabulary and on the qwen2 fixture
// vocabulary under every supported pre-tokenizer; round trips; clear errors.
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <set>

#include "fixtures/tiny_model.hpp"
#include "model/bpe_bytes.hpp"
#include "model/error.hpp"
#include "model/pretokenize.hpp"
#include "model/tokenizer.hpp"
#include "model/unicode.hpp"

namespace tapdiff {
namespace {

const std::filesystem::path kSource = TAPDIFF_SOURCE_DIR;
const std::filesystem::path kCases = kSource / "tests" / "model" / "tokenizer_cases";

nlohmann::json read_cases(const std::string& name) {
  std::ifstream in(kCases / name);
  if (!in) throw std::runtime_error("cannot open " + (kCases / name).string());
  return nlohmann::json::parse(in);
}

std::vector<std::string> symbol_pieces(std::string_view text, PreTokenizer pre) {
  std::vector<std::string> out;
  for (std::string_view w : pretokenize(text, pre)) out.push_back(bytes_to_symbols(w));
  return out;
}

// The qwen2 fixture vocabulary (n_vocab 1024, the pins' size) under pre-tokenizer `pre`.
GgufFile fixture_vocab(const std::string& pre, bool add_bos = false) {
  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  spec.n_vocab = 1024;
  GgufWriter w = build_fixture(spec);
  w.set("tokenizer.ggml.pre", GgufValue::string(pre));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(add_bos));
  return GgufFile::from_bytes("bpe.gguf", w.to_bytes());
}

void expect_pinned(const Tokenizer& t, const nlohmann::json& c) {
  const std::string text = c.at("text");
  const std::string pre = c.at("pre");
  SCOPED_TRACE("pre " + pre + ", text " + nlohmann::json(text).dump());
  EXPECT_EQ(t.encode(text), c.at("ids").get<std::vector<int>>());
  EXPECT_EQ(symbol_pieces(text, *pre_tokenizer_named(pre)), c.at("pieces").get<std::vector<std::string>>());
  EXPECT_EQ(t.decode(c.at("ids").get<std::vector<int>>()), text);
}

TEST(BpeTokenizer, SmolLM2MatchesHuggingFaceTokenizers) {
  const std::filesystem::path model = kSource / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: scripts/fetch-models.sh puts it there";
  const nlohmann::json pins = read_cases("smollm2.json");
  const GgufFile f = GgufFile::open(model.string());
  ASSERT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  const Tokenizer t = Tokenizer::from_gguf(f);
  ASSERT_EQ(t.n_vocab(), pins.at("n_vocab").get<int>()) << "not the file the pins were made from";
  ASSERT_GE(pins.at("cases").size(), 30u);
  for (const auto& c : pins.at("cases")) expect_pinned(t, c);
}

TEST(BpeTokenizer, FixtureVocabMatchesHuggingFaceTokenizersForEveryPreTokenizer) {
  const nlohmann::json pins = read_cases("fixture_qwen2_1024.json");
  std::map<std::string, std::size_t> per_pre;
  std::map<std::string, Tokenizer> tokenizers;
  for (const auto& c : pins.at("cases")) {
    const std::string pre = c.at("pre");
    auto it = tokenizers.find(pre);
    if (it == tokenizers.end()) it = tokenizers.emplace(pre, Tokenizer::from_gguf(fixture_vocab(pre))).first;
    ASSERT_EQ(it->second.n_vocab(), pins.at("n_vocab").get<int>()) << "the fixture vocabulary changed: re-pin";
    expect_pinned(it->second, c);
    ++per_pre[pre];
  }
  for (const char* pre : {"default", "gpt2", "smollm", "qwen2", "llama-bpe"})
    EXPECT_GE(per_pre[pre], 30u) << pre;
}

// Random text from a pool of ASCII, punctuation, digits, whitespace, accents, CJK, emoji and
// the special token; decode(encode(s)) == s under every pre-tokenizer.
TEST(BpeTokenizer, DecodeInvertsEncode) {
  const std::vector<std::string> pool = {"a", "Z", "q", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "7", "42",
                                         ".", "?!", "(", "é", "ß", "Ω", "東", "京", "🤗", "\u00a0", "\u3000",
                                         "<|endoftext|>", "<|", "|>", "x²", "١"};
  std::mt19937 rng(7);
  for (const char* pre : {"default", "gpt2", "smollm", "qwen2", "llama-bpe"}) {
    const Tokenizer t = Tokenizer::from_gguf(fixture_vocab(pre));
    for (int n = 0; n < 200; ++n) {
      std::string s;
      for (int k = int(rng() % 24); k > 0; --k) s += pool[rng() % pool.size()];
      EXPECT_EQ(t.decode(t.encode(s)), s) << pre << ": " << nlohmann::json(s).dump();
    }
  }
}

TEST(BpeTokenizer, AnyBytesRoundTripIncludingInvalidUtf8) {
  const Tokenizer t = Tokenizer::from_gguf(fixture_vocab("qwen2"));
  std::string all;
  for (int b = 255; b >= 0; --b) all += char(b);
  EXPECT_EQ(t.decode(t.encode(all)), all);
  EXPECT_EQ(t.decode(t.encode("\xc3(\xe2\x82 \xff ok")), "\xc3(\xe2\x82 \xff ok");
}

TEST(BpeTokenizer, SpecialTokensMatchBeforeSplitting) {
  const Tokenizer t = Tokenizer::from_gguf(fixture_vocab("qwen2"));
  const int eot = t.n_vocab() - 1;
  ASSERT_EQ(t.piece(eot), "<|endoftext|>");
  const auto ids = t.encode("a<|endoftext|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], eot);
  // Without the whole special token, "<|" is plain punctuation: a word of its own.
  std::vector<int> split = t.encode("a");
  for (int id : t.encode("<|endoftext")) split.push_back(id);
  EXPECT_EQ(t.encode("a<|endoftext"), split);
  for (int id : split) EXPECT_NE(id, eot);
}

TEST(BpeTokenizer, BosAndEosFollowTheMetadata) {
  const Tokenizer plain = Tokenizer::from_gguf(fixture_vocab("qwen2", false));
  const Tokenizer with_bos = Tokenizer::from_gguf(fixture_vocab("qwen2", true));
  const int eot = plain.n_vocab() - 1;  // the fixture's BOS and EOS
  const auto a = plain.encode("the cat"), b = with_bos.encode("the cat");
  ASSERT_EQ(b.size(), a.size() + 1);
  EXPECT_EQ(b.front(), eot);
  EXPECT_EQ(std::vector<int>(b.begin() + 1, b.end()), a);
  EXPECT_EQ(with_bos.decode(b), "the cat");

  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  GgufWriter w = build_fixture(spec);
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(true));
  const Tokenizer with_eos = Tokenizer::from_gguf(GgufFile::from_bytes("eos.gguf", w.to_bytes()));
  const auto c = with_eos.encode("the cat");
  EXPECT_EQ(c.back(), with_eos.n_vocab() - 1);
  EXPECT_EQ(with_eos.decode(c), "the cat");
}

// A hand-made vocabulary: only tokenizer keys, no tensors.
Tokenizer tiny_bpe(const std::string& pre, const std::vector<std::string>& merges) {
  const std::vector<std::string> tokens = {"a", "b", "c", "ab", "bc", "abc"};
  GgufWriter w;
  w.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::string(pre));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::int32s(std::vector<std::int32_t>(tokens.size(), 1)));
  w.set("tokenizer.ggml.merges", GgufValue::strings(merges));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  return Tokenizer::from_gguf(GgufFile::from_bytes("tiny.gguf", w.to_bytes()));
}

TEST(BpeTokenizer, LowestRankMergesFirst) {
  EXPECT_EQ(tiny_bpe("qwen2", {"b c", "a b"}).encode("abc"), (std::vector<int>{0, 4}));  // a bc
  EXPECT_EQ(tiny_bpe("qwen2", {"a b", "b c"}).encode("abc"), (std::vector<int>{3, 2}));  // ab c
  EXPECT_EQ(tiny_bpe("qwen2", {"a b", "ab c"}).encode("abc"), (std::vector<int>{5}));
  // Equal pairs: the leftmost merges first ("b b" never forms).
  EXPECT_EQ(tiny_bpe("gpt2", {"a b"}).encode("abab"), (std::vector<int>{3, 3}));
}

// llama3 (llama-bpe) takes a word that is itself a token whole, whatever the merges reach.
TEST(BpeTokenizer, LlamaBpeIgnoresMergesForWholeTokens) {
  EXPECT_EQ(tiny_bpe("llama-bpe", {"b c"}).encode("abc"), (std::vector<int>{5}));
  EXPECT_EQ(tiny_bpe("qwen2", {"b c"}).encode("abc"), (std::vector<int>{0, 4}));
}

// llama.cpp adds BOS for llama-bpe vocabularies that carry no add_bos_token key.
TEST(BpeTokenizer, LlamaBpeAddsBosWhenTheKeyIsAbsent) {
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    const GgufFile full = fixture_vocab(pre);
    GgufWriter w;
    for (const auto& [key, value] : full.metadata())
      if (key != "tokenizer.ggml.add_bos_token") w.set(key, value);
    const Tokenizer t = Tokenizer::from_gguf(GgufFile::from_bytes("nokey.gguf", w.to_bytes()));
    const bool bos_first = t.encode("x").front() == t.n_vocab() - 1;
    EXPECT_EQ(bos_first, std::string(pre) == "llama-bpe") << pre;
  }
}

std::string load_error(GgufWriter w) {
  try {
    Tokenizer::from_gguf(GgufFile::from_bytes("bad.gguf", w.to_bytes()));
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(BpeTokenizer, BadMetadataNamesTheFileAndField) {
  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  GgufWriter unknown_pre = build_fixture(spec);
  unknown_pre.set("tokenizer.ggml.pre", GgufValue::string("tekken"));
  EXPECT_NE(load_error(unknown_pre).find("bad.gguf: tokenizer.ggml.pre: unknown pre-tokenizer \"tekken\" (supported:"),
            std::string::npos)
      << load_error(unknown_pre);

  GgufWriter bad_merge = build_fixture(spec);
  bad_merge.set("tokenizer.ggml.merges", GgufValue::strings({"Ġ t", "nospace"}));
  EXPECT_NE(load_error(bad_merge).find("bad.gguf: tokenizer.ggml.merges[1]: expected \"left right\", got \"nospace\""),
            std::string::npos)
      << load_error(bad_merge);

  GgufWriter not_strings = build_fixture(spec);
  not_strings.set("tokenizer.ggml.merges", GgufValue::int32s({1, 2}));
  EXPECT_NE(load_error(not_strings).find("bad.gguf: tokenizer.ggml.merges: expected an array of strings"),
            std::string::npos)
      << load_error(not_strings);

  GgufWriter bad_bos = build_fixture(spec);
  bad_bos.set("tokenizer.ggml.bos_token_id", GgufValue::u32(5000));
  EXPECT_NE(load_error(bad_bos).find("bad.gguf: tokenizer.ggml.bos_token_id: expected a token id below 320, got 5000"),
            std::string::npos)
      << load_error(bad_bos);

  GgufWriter other_model = build_fixture(spec);
  other_model.set("tokenizer.ggml.model", GgufValue::string("bert"));
  EXPECT_NE(load_error(other_model).find("bad.gguf: tokenizer.ggml.model: tokenizer \"bert\" is not supported"),
            std::string::npos)
      << load_error(other_model);
}

TEST(Unicode, ClassesFromTheGeneratedTable) {
  using namespace unicode;
  EXPECT_EQ(classes(U'a'), kLetter);
  EXPECT_EQ(classes(U'\u4e2d'), kLetter);      // 中
  EXPECT_EQ(classes(U'\u01c5'), kLetter);      // ǅ, titlecase
  EXPECT_EQ(classes(U'7'), kNumber);
  EXPECT_EQ(classes(U'\u0661'), kNumber);      // Arabic-Indic one
  EXPECT_EQ(classes(U'\u00bd'), kNumber);      // ½, No
  EXPECT_EQ(classes(U'!'), kPunctuation);
  EXPECT_EQ(classes(U'\u3001'), kPunctuation);  // 、
  EXPECT_EQ(classes(U'$'), 0);                 // Sc: a symbol, not punctuation
  EXPECT_EQ(classes(U'\U0001F917'), 0);        // 🤗
  EXPECT_EQ(classes(U' '), kWhitespace);
  EXPECT_EQ(classes(U'\u3000'), kWhitespace);
  EXPECT_EQ(classes(U'\u0085'), kWhitespace);
  EXPECT_EQ(classes(U'\u001c'), 0);            // Python's isspace() says yes; White_Space says no
  EXPECT_EQ(classes(U'\u200b'), 0);            // zero width space: Cf
  EXPECT_EQ(classes(0x10FFFF), 0);
  EXPECT_EQ(classes(kInvalid), 0);
}

TEST(Unicode, DecodeKeepsInvalidBytesAsSingleCharacters) {
  const auto chars = unicode::decode_utf8("a\xc3\xa9\xe2\x82 \xf0\x9f\xa4\x97\xc0\xaf");
  std::vector<char32_t> cps;
  for (const auto& c : chars) cps.push_back(c.cp);
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', 0xe9, unicode::kInvalid, unicode::kInvalid, U' ', 0x1F917,
                                        unicode::kInvalid, unicode::kInvalid}));  // overlong "/" is invalid
  EXPECT_EQ(chars[5].offset, 6u);
  EXPECT_EQ(chars[5].length, 4u);
}

TEST(BpeBytes, EveryByteHasOneVisibleSymbol) {
  EXPECT_EQ(bytes_to_symbols(" "), "\xc4\xa0");  // "Ġ" U+0120
  EXPECT_EQ(bytes_to_symbols("\n"), "\xc4\x8a");  // "Ċ" U+010A
  EXPECT_EQ(bytes_to_symbols("A~"), "A~");
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    const std::string sym = bytes_to_symbols(one);
    EXPECT_TRUE(seen.insert(sym).second) << "byte " << b;
    EXPECT_EQ(symbols_to_bytes(sym), one) << "byte " << b;
  }
  EXPECT_EQ(symbols_to_bytes("Ġ\xe4\xb8\xad"), std::nullopt) << "中 is no byte symbol";
}

}  // namespace
}  // namespace tapdiff
