// Fixture models: deterministic bytes, every tensor type, valid tokenizers, clear errors.
#include <cmath>
#include <gtest/gtest.h>
#include <set>

#include "fixtures/tiny_model.hpp"
#include "model/config.hpp"
#include "model/dequantize.hpp"

namespace tapdiff {
namespace {

TEST(Fixture, SameSpecSameBytes) {
  FixtureSpec spec;
  spec.seed = 42;
  spec.weight_type = GgmlType::Q8_0;
  EXPECT_EQ(build_fixture(spec).to_bytes(), build_fixture(spec).to_bytes());
  FixtureSpec other = spec;
  other.seed = 43;
  EXPECT_NE(build_fixture(spec).to_bytes(), build_fixture(other).to_bytes());
}

TEST(Fixture, SeedAndNameGiveEachTensorItsOwnValues) {
  const GgufFile f = GgufFile::from_bytes("f.gguf", build_fixture(FixtureSpec{}).to_bytes());
  const auto q = dequantize_tensor(*f.find_tensor("blk.0.attn_q.weight"));
  const auto out = dequantize_tensor(*f.find_tensor("blk.0.attn_output.weight"));
  ASSERT_EQ(q.size(), out.size());
  EXPECT_NE(q, out);
  double sum = 0, sq = 0;
  for (float x : q) sum += x, sq += double(x) * x;
  const double mean = sum / q.size();
  const double stddev = std::sqrt(sq / q.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(stddev, 0.02, 0.002);
  const auto norm = dequantize_tensor(*f.find_tensor("blk.0.attn_norm.weight"));
  for (float x : norm) EXPECT_NEAR(x, 1.0f, 0.6f);
}

TEST(Fixture, EveryTypeBuildsAndParses) {
  for (const auto& t : kGgmlTypes) {
    FixtureSpec spec;
    spec.n_embd = 256;  // k-quants need rows that are multiples of 256
    spec.n_head = 4;
    spec.n_head_kv = 4;
    spec.n_ff = 512;
    spec.n_layer = 1;
    spec.weight_type = t.type;
    const GgufFile f = GgufFile::from_bytes("f.gguf", build_fixture(spec).to_bytes());
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, t.type) << t.name;
    EXPECT_EQ(f.find_tensor("blk.0.ffn_norm.weight")->type, GgmlType::F32) << t.name;
    EXPECT_NO_THROW(load_model_config(f)) << t.name;
  }
}

TEST(Fixture, PerTensorTypeOverridesByGlob) {
  FixtureSpec spec;
  spec.weight_type = GgmlType::F16;
  spec.type_overrides = {{"blk.*.ffn_*.weight", GgmlType::Q8_0}, {"blk.1.ffn_up.weight", GgmlType::Q4_0}};
  const GgufFile f = GgufFile::from_bytes("f.gguf", build_fixture(spec).to_bytes());
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_up.weight")->type, GgmlType::Q4_0);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->type, GgmlType::Q8_0);
}

TEST(Fixture, IncompatibleTypeNamesTheTensor) {
  FixtureSpec spec;  // n_embd 64
  spec.weight_type = GgmlType::Q4_K;
  try {
    build_fixture(spec);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "type of token_embd.weight: Q4_K needs the row width ne[0] = 64 to be a "
                 "multiple of 256");
  }
}

TEST(Fixture, BadShapesAreRejected) {
  FixtureSpec spec;
  spec.n_head = 5;
  EXPECT_THROW(build_fixture(spec), std::invalid_argument);
  spec = FixtureSpec{};
  spec.n_head_kv = 3;
  EXPECT_THROW(build_fixture(spec), std::invalid_argument);
  spec = FixtureSpec{};
  spec.n_vocab = 100;
  EXPECT_THROW(build_fixture(spec), std::invalid_argument);
  spec = FixtureSpec{};
  spec.arch = Arch::phi3;
  for (int n_rot : {7, 18, -2}) {
    spec.n_rot = n_rot;
    EXPECT_THROW(build_fixture(spec), std::invalid_argument) << n_rot;
  }
  spec.n_rot = 12;
  EXPECT_NO_THROW(build_fixture(spec));
  spec.arch = Arch::llama;  // llama.cpp refuses a partial rotation for llama
  EXPECT_THROW(build_fixture(spec), std::invalid_argument);
}

std::vector<std::string> strings(const GgufFile& f, const char* key) {
  std::vector<std::string> out;
  for (const auto& v : f.find(key)->as_array()) out.push_back(v.as_string());
  return out;
}

TEST(Fixture, LlamaVocabIsSentencePieceShaped) {
  const GgufFile f = GgufFile::from_bytes("f.gguf", build_fixture(FixtureSpec{}).to_bytes());
  const auto tokens = strings(f, "tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 320u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[3 + 0x41], "<0x41>");
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), tokens.size());
  EXPECT_EQ(f.find("tokenizer.ggml.scores")->as_array().size(), 320u);
  EXPECT_EQ(f.find("tokenizer.ggml.token_type")->as_array()[3].as_int(), 6);  // byte
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
}

TEST(Fixture, Gpt2VocabMergesAreConsistent) {
  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  spec.n_vocab = 400;
  const GgufFile f = GgufFile::from_bytes("f.gguf", build_fixture(spec).to_bytes());
  const auto tokens = strings(f, "tokenizer.ggml.tokens");
  const auto merges = strings(f, "tokenizer.ggml.merges");
  ASSERT_EQ(tokens.size(), 400u);
  EXPECT_EQ(tokens.back(), "<|endoftext|>");
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 399u);
  EXPECT_EQ(tokens['A'], "A");
  EXPECT_EQ(tokens[' '], "\xc4\xa0");  // byte 0x20 is shown as U+0120 "Ġ"
  const std::set<std::string> vocab(tokens.begin(), tokens.end());
  EXPECT_EQ(vocab.size(), tokens.size());
  ASSERT_EQ(merges.size(), 400u - 257u);
  for (const auto& m : merges) {
    const auto space = m.find(' ');
    ASSERT_NE(space, std::string::npos) << m;
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    EXPECT_TRUE(vocab.count(left)) << m;
    EXPECT_TRUE(vocab.count(right)) << m;
    EXPECT_TRUE(vocab.count(left + right)) << m;
  }
}

}  // namespace
}  // namespace tapdiff
