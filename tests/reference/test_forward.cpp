// The reference forward pass: the tap catalogue, invariants every run must satisfy, f32 vs
// f64, and the real stories260K model's greedy tokens from an independent engine.
#include <cmath>
#include <filesystem>
#include <gtest/gtest.h>
#include <unistd.h>

#include "app/trace_metadata_for.hpp"
#include "fixtures/tiny_model.hpp"
#include "reference/forward.hpp"
#include "reference/generate.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::ref {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tapdiff_ref_" + std::to_string(getpid()) + "_" + name;
}

struct TracedRun {
  GgufFile file;  // the weights read from it
  Weights weights;
  std::vector<int> tokens;
  std::string path;
};

TracedRun traced_run(const FixtureSpec& spec, const std::vector<int>& prompt, int n_predict,
                     const std::string& name, Precision precision = Precision::f32) {
  TracedRun run{GgufFile::from_bytes(name, build_fixture(spec).to_bytes()), {}, {}, temp_path(name + ".h5")};
  run.weights = load_weights(run.file);
  TraceWriter trace(run.path, trace_metadata_for(run.file, Producer::reference, "f32", "none", prompt, n_predict));
  GenerateOptions o;
  o.n_predict = n_predict;
  o.precision = precision;
  run.tokens = generate(run.weights, prompt, o, &trace);
  trace.close();
  return run;
}

FixtureSpec qwen2_spec() {
  FixtureSpec s;
  s.arch = Arch::qwen2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.tied_output = true;
  return s;
}

TEST(ReferenceForward, EmitsExactlyTheCatalogue) {
  for (const FixtureSpec& spec : {FixtureSpec{}, qwen2_spec()}) {
    const auto run = traced_run(spec, {1, 5, 9}, 4, "catalogue");
    const TraceReader reader(run.path);
    const CatalogueReport report = check_catalogue(reader.emitted_taps(), *reader.metadata().dims);
    EXPECT_TRUE(report.ok()) << report.describe();
    // Logits only where a token is chosen: the last prompt position and after.
    EXPECT_EQ(reader.tap("output", -1).positions(), (std::vector<std::int64_t>{2, 3, 4, 5}));
    EXPECT_EQ(reader.tap("attn_q", 1).positions(), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(reader.metadata().tokens.size(), 7u);
    std::remove(run.path.c_str());
  }
}

// Invariants: attn.probs rows sum to 1 over the visible positions and are 0 beyond them;
// RoPE at position 0 is the identity; the cache read-back equals k after RoPE and v.
TEST(ReferenceForward, Invariants) {
  for (const FixtureSpec& spec : {FixtureSpec{}, qwen2_spec()}) {
    const auto run = traced_run(spec, {3, 4, 5, 6}, 3, "invariants");
    const TraceReader r(run.path);
    const ModelConfig& c = run.weights.config;
    for (int l = 0; l < c.n_layer; ++l) {
      const TapRows probs = r.read(r.tap("attn.probs", l));
      const std::int64_t n_ctx = probs.row_shape[1];
      for (std::size_t i = 0; i < probs.size(); ++i) {
        const std::int64_t p = probs.positions[i];
        for (int h = 0; h < c.n_head; ++h) {
          const float* row = probs.row(i) + h * n_ctx;
          double sum = 0;
          for (std::int64_t t = 0; t <= p; ++t) sum += row[t];
          EXPECT_NEAR(sum, 1.0, 1e-6) << "layer " << l << " pos " << p << " head " << h;
          for (std::int64_t t = p + 1; t < n_ctx; ++t) EXPECT_EQ(row[t], 0.0f);
        }
      }
      const TapRows q = r.read(r.tap("attn_q", l), 0, 0), q_rope = r.read(r.tap("attn_q.rope", l), 0, 0);
      EXPECT_EQ(q.values, q_rope.values) << "RoPE at position 0 is not the identity, layer " << l;
      EXPECT_EQ(r.read(r.tap("kv.k", l)).values, r.read(r.tap("attn_k.rope", l)).values) << l;
      EXPECT_EQ(r.read(r.tap("kv.v", l)).values, r.read(r.tap("attn_v", l)).values) << l;
    }
    std::remove(run.path.c_str());
  }
}

// The f64 run is the noise floor: honest f32 arithmetic stays within a few ulps of it.
TEST(ReferenceForward, Float32StaysNearFloat64) {
  const FixtureSpec spec = qwen2_spec();
  const GgufFile file = GgufFile::from_bytes("f.gguf", build_fixture(spec).to_bytes());
  const Weights w = load_weights(file);
  Forward<float> f32(w, 8, nullptr);
  Forward<double> f64(w, 8, nullptr);
  const int tokens[] = {7, 100, 42, 300, 2};
  for (int p = 0; p < 5; ++p) {
    const auto& a = f32.step(tokens[p], p);
    const auto& b = f64.step(tokens[p], p);
    double max_err = 0, max_ref = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      max_err = std::max(max_err, std::abs(double(a[i]) - b[i]));
      max_ref = std::max(max_ref, std::abs(b[i]));
    }
    EXPECT_LT(max_err, 1e-5 * max_ref) << "position " << p;
  }
}

// Matrices beyond the kept budget are dequantized row by row on every use: the same values
// through the same dot product, so the same logits bit for bit.
TEST(ReferenceForward, MatricesOutsideTheBudgetGiveTheSameLogits) {
  FixtureSpec q8;  // untied: the embedding rows are read from the file
  q8.weight_type = GgmlType::Q8_0;
  for (const FixtureSpec& spec : {qwen2_spec(), q8}) {
    const GgufFile file = GgufFile::from_bytes("f.gguf", build_fixture(spec).to_bytes());
    const Weights kept = load_weights(file), streamed = load_weights(file, 0);
    const Weights half = load_weights(file, kept.layers[0].wq.float_bytes() * 5);
    EXPECT_TRUE(kept.layers.back().w_down.kept());
    EXPECT_FALSE(streamed.layers[0].wq.kept());
    EXPECT_TRUE(half.layers[0].wq.kept());
    EXPECT_FALSE(half.layers.back().w_down.kept());
    Forward<float> a(kept, 4, nullptr), b(streamed, 4, nullptr), c(half, 4, nullptr);
    const int tokens[] = {7, 100, 42, 3};
    for (int p = 0; p < 4; ++p) {
      const std::vector<float> want = a.step(tokens[p], p);
      EXPECT_EQ(want, b.step(tokens[p], p)) << "position " << p;
      EXPECT_EQ(want, c.step(tokens[p], p)) << "position " << p;
    }
  }
}

TEST(ReferenceForward, RejectsTokensOutsideTheVocabulary) {
  const GgufFile file = GgufFile::from_bytes("f.gguf", build_fixture(FixtureSpec{}).to_bytes());
  const Weights w = load_weights(file);
  Forward<float> f(w, 4, nullptr);
  EXPECT_THROW(f.step(320, 0), std::out_of_range);
  EXPECT_THROW(f.step(1, 4), std::out_of_range);
}

TEST(ReferenceForward, SamplingIsSeededAndGreedyIsDefault) {
  const GgufFile file = GgufFile::from_bytes("f.gguf", build_fixture(FixtureSpec{}).to_bytes());
  const Weights w = load_weights(file);
  GenerateOptions greedy;
  greedy.n_predict = 6;
  const auto g1 = generate(w, {1, 2}, greedy, nullptr);
  EXPECT_EQ(g1, generate(w, {1, 2}, greedy, nullptr));
  GenerateOptions sampled = greedy;
  sampled.sampling.temperature = 1.5f;
  sampled.sampling.seed = 7;
  const auto s1 = generate(w, {1, 2}, sampled, nullptr);
  EXPECT_EQ(s1, generate(w, {1, 2}, sampled, nullptr));
  EXPECT_EQ(s1.size(), 8u);
}

// stories260K's greedy continuation of "Once upon a time", from llama.cpp (SOURCES.md).
TEST(ReferenceForward, Stories260KMatchesLlamaCpp) {
  const std::filesystem::path model =
      std::filesystem::path(TAPDIFF_SOURCE_DIR) / ".." / "shared" / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model << " (shared models absent)";
  const GgufFile file = GgufFile::open(model.string());
  const Weights w = load_weights(file);
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  const std::vector<int> expected = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                     338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                     265, 282, 295, 433, 426, 385, 328, 432, 358, 394};
  GenerateOptions o;
  o.n_predict = 32;
  const auto tokens = generate(w, prompt, o, nullptr);
  EXPECT_EQ(std::vector<int>(tokens.begin() + 5, tokens.end()), expected);
}

}  // namespace
}  // namespace tapdiff::ref
