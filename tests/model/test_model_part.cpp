// Model parts: the stages a part holds, the config it keeps, and the errors of a broken part.
#include <cstdio>
#include <filesystem>
#include <gtest/gtest.h>

#include "fixtures/tiny_model.hpp"
#include "model/config.hpp"
#include "model/error.hpp"
#include "model/gguf_writer.hpp"
#include "model/model_part.hpp"

namespace tapdiff {
namespace {

namespace fs = std::filesystem;

struct TempFile {
  std::string path = (fs::temp_directory_path() /
                      (std::string("part_") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                         .string();
  ~TempFile() { std::remove(path.c_str()); }
};

GgufFile qwen2_model() {
  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  spec.n_layer = 3;
  spec.tied_output = true;
  return GgufFile::from_bytes("whole.gguf", build_fixture(spec).to_bytes());
}

TEST(ModelPart, AWholeModelHoldsEveryStage) {
  const ModelConfig c = load_model_config(qwen2_model());
  EXPECT_TRUE(c.whole());
  EXPECT_EQ(c.first_stage, -1);
  EXPECT_EQ(c.last_stage, 3);
}

TEST(ModelPart, ALayerKeepsItsTensorsAndTheConfigOfTheWholeModel) {
  const GgufFile whole = qwen2_model();
  const ModelConfig c = load_model_config(whole);
  TempFile f;
  write_model_part(whole, c, 1, 1, f.path);
  const GgufFile part = GgufFile::open(f.path);
  const ModelConfig p = load_model_config(part);
  EXPECT_FALSE(p.whole());
  EXPECT_EQ(p.first_stage, 1);
  EXPECT_EQ(p.last_stage, 1);
  EXPECT_EQ(p.n_vocab, c.n_vocab);
  EXPECT_TRUE(p.qkv_bias);     // blk.0.attn_q.bias is not in the part
  EXPECT_TRUE(p.tied_output);  // output.weight is absent either way
  for (const GgufTensorInfo& t : part.tensors()) EXPECT_EQ(t.name.rfind("blk.1.", 0), 0u) << t.name;
  EXPECT_EQ(part.find_tensor("blk.1.attn_q.bias")->n_bytes, whole.find_tensor("blk.1.attn_q.bias")->n_bytes);
}

TEST(ModelPart, ATiedHeadReadsTheEmbedding) {
  const GgufFile whole = qwen2_model();
  const ModelConfig c = load_model_config(whole);
  TempFile f;
  write_model_part(whole, c, 3, 3, f.path);
  const GgufFile part = GgufFile::open(f.path);
  EXPECT_NE(part.find_tensor("token_embd.weight"), nullptr);
  EXPECT_NE(part.find_tensor("output_norm.weight"), nullptr);
  EXPECT_EQ(part.find_tensor("blk.2.attn_q.weight"), nullptr);
  EXPECT_NO_THROW(load_model_config(part));
}

TEST(ModelPart, BrokenPartKeysNameTheKey) {
  const GgufFile whole = qwen2_model();
  GgufWriter w = GgufWriter::from(whole);
  w.set("tapdiff.part.stages", GgufValue::array(GgufValueType::INT32, {GgufValue::i32(2), GgufValue::i32(1)}));
  w.set("tapdiff.part.n_vocab", GgufValue::u32(320));
  try {
    load_model_config(GgufFile::from_bytes("bad.gguf", w.to_bytes()));
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tapdiff.part.stages"), std::string::npos) << e.what();
  }
  GgufWriter no_vocab = GgufWriter::from(whole);
  no_vocab.set("tapdiff.part.stages", GgufValue::array(GgufValueType::INT32, {GgufValue::i32(0), GgufValue::i32(0)}));
  try {
    load_model_config(GgufFile::from_bytes("bad.gguf", no_vocab.to_bytes()));
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tapdiff.part.n_vocab"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_model_part(whole, load_model_config(whole), 2, 5, "never.gguf"), std::invalid_argument);
}

}  // namespace
}  // namespace tapdiff
