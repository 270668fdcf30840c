// The model hypothesis replay reads (diff/replay_model.hpp): another model's weights are never
// replayed (its sha256 differs from the traces'), and where the traces' hyperparameters are the
// file's, the config is read without hashing the file and the hash waits for the first weight.
#include <filesystem>
#include <functional>
#include <gtest/gtest.h>
#include <unistd.h>

#include "diff/replay_model.hpp"
#include "fixtures/tiny_model.hpp"
#include "model/error.hpp"
#include "model/sha256.hpp"

namespace tapdiff::diff {
namespace {

std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "tapdiff_replay_model_" + std::to_string(getpid()) + "_" + name;
}

// Two fixtures of one shape and different weights (seeds), removed at the end.
class TwoModels : public ::testing::Test {
protected:
  void SetUp() override {
    FixtureSpec spec;
    write_fixture(spec, recorded_);
    spec.seed = 2;
    write_fixture(spec, other_);
    const GgufFile file = GgufFile::open(recorded_);
    recorded_sha256_ = sha256_hex(file.bytes(), file.file_size());
    hparams_ = trace_hparams(load_model_config(file));
  }
  void TearDown() override {
    std::filesystem::remove(recorded_);
    std::filesystem::remove(other_);
  }
  const std::string recorded_ = temp_file("recorded.gguf"), other_ = temp_file("other.gguf");
  std::string recorded_sha256_;
  HParams hparams_;
};

void expect_sha256_error(const std::function<void()>& read, const std::string& path) {
  try {
    read();
    ADD_FAILURE() << "another model's tensors were read";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.field(), "sha256");
  }
}

TEST_F(TwoModels, AnotherModelsWeightsAreRefusedAtTheFirstRead) {
  ReplayModel model(other_, recorded_sha256_, hparams_);  // the same hyperparameters: no hash yet
  EXPECT_EQ(trace_hparams(model.config()), hparams_);
  expect_sha256_error([&] { model.weight("blk.0.attn_q.weight"); }, other_);
  expect_sha256_error([&] { model.tensor("blk.0.attn_q.weight"); }, other_);
  expect_sha256_error([&] { model.file(); }, other_);
}

TEST_F(TwoModels, TheRecordedModelsWeightsAreRead) {
  ReplayModel model(recorded_, recorded_sha256_, hparams_);
  EXPECT_FALSE(model.weight("blk.0.attn_q.weight").empty());
  EXPECT_NE(model.tensor("blk.0.ffn_down.weight"), nullptr);
}

TEST_F(TwoModels, OtherHyperparametersHashTheFileAtOnce) {
  HParams wider = hparams_;
  wider["n_ff"] = std::get<std::int64_t>(wider["n_ff"]) + 1;
  for (const HParams& recorded : {HParams{}, wider}) {
    expect_sha256_error([&] { ReplayModel(other_, recorded_sha256_, recorded); }, other_);
    EXPECT_NO_THROW(ReplayModel(recorded_, recorded_sha256_, recorded));
  }
}

}  // namespace
}  // namespace tapdiff::diff
