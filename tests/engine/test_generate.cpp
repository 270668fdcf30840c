// The generation loop and the harness contracts: taps never change results, runs are
// deterministic, the progress callback and token bookkeeping, and bad options are errors.
#include <cstring>
#include <gtest/gtest.h>

#include "engine_test_util.hpp"

namespace tapdiff::engine {
namespace {

using namespace test;

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Logits of every step and the tokens, bit for bit, with every tap recorded, with a filter
// that disables them all, and with no trace at all.
TEST(EngineGenerate, TapsDoNotChangeResults) {
  for (Precision p : {Precision::f32, Precision::bf16}) {
    for (const FixtureSpec& spec : {llama_spec(GgmlType::Q8_0), qwen2_spec()}) {
      const GgufFile model = fixture_file(spec);
      const std::vector<int> prompt = {2, 30, 31, 200};
      EngineOptions o;
      o.n_predict = 8;
      o.precision = p;
      std::vector<std::vector<float>> untraced, traced, filtered;
      const auto tokens = generate(model, prompt, o, nullptr, &untraced);
      const TempTrace all("taps_all"), none("taps_none");
      EXPECT_EQ(run_engine(model, prompt, o, all.path, &traced), tokens);
      WriterOptions nothing;
      nothing.filter = TapFilter::parse("no-such-tap");
      EXPECT_EQ(run_engine(model, prompt, o, none.path, &filtered, nothing), tokens);
      EXPECT_EQ(untraced.size(), 8u);
      EXPECT_TRUE(same_bits(untraced, traced)) << arch_name(spec.arch) << " " << precision_name(p);
      EXPECT_TRUE(same_bits(untraced, filtered))
          << arch_name(spec.arch) << " " << precision_name(p);
      EXPECT_TRUE(TraceReader(none.path).taps().empty());
    }
  }
}

// Two identical runs give bit-identical traces: every kernel computes each element on one
// thread in a fixed order (static OpenMP schedule), and OpenBLAS's sgemm is deterministic for
// a fixed thread count.
TEST(EngineGenerate, DeterministicTraces) {
  const GgufFile model = fixture_file(wide(qwen2_spec(GgmlType::Q4_K)));
  EngineOptions o;
  o.n_predict = 6;
  o.precision = Precision::f16;
  const TempTrace a("det_a"), b("det_b");
  EXPECT_EQ(run_engine(model, {9, 8, 7}, o, a.path), run_engine(model, {9, 8, 7}, o, b.path));
  const TraceReader ra(a.path), rb(b.path);
  ASSERT_EQ(ra.taps().size(), rb.taps().size());
  for (const TapInfo& t : ra.taps()) {
    const TapRows x = ra.read(t), y = rb.read(rb.tap(t.name, t.layer));
    ASSERT_EQ(x.positions, y.positions) << t.full_name;
    ASSERT_EQ(x.values.size(), y.values.size()) << t.full_name;
    EXPECT_EQ(0, std::memcmp(x.values.data(), y.values.data(), x.values.size() * sizeof(float)))
        << t.full_name;
  }
  EXPECT_EQ(ra.metadata().tokens, rb.metadata().tokens);
}

TEST(EngineGenerate, StepsPositionsAndProgress) {
  const GgufFile model = fixture_file(llama_spec());
  EngineOptions o;
  o.n_predict = 5;
  std::vector<std::vector<int>> calls;
  o.on_step = [&](int position, int token, int done, int total) {
    calls.push_back({position, token, done, total});
  };
  const auto tokens = generate(model, {4, 5, 6}, o, nullptr);
  ASSERT_EQ(tokens.size(), 8u);
  ASSERT_EQ(calls.size(), 5u);  // the prefill, then 4 decodes: the last token is not fed
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i][0], int(2 + i));
    EXPECT_EQ(calls[i][1], tokens[3 + i]);
    EXPECT_EQ(calls[i][2], int(i + 1));
    EXPECT_EQ(calls[i][3], 5);
  }
  o.n_predict = 0;
  o.on_step = nullptr;
  EXPECT_EQ(generate(model, {4, 5, 6}, o, nullptr), (std::vector<int>{4, 5, 6}));
}

TEST(EngineGenerate, RejectsBadOptions) {
  const GgufFile model = fixture_file(llama_spec());
  EngineOptions o;
  EXPECT_THROW(generate(model, {}, o, nullptr), std::invalid_argument);
  EXPECT_THROW(generate(model, {1, 320}, o, nullptr), std::invalid_argument);
  o.n_predict = -1;
  EXPECT_THROW(generate(model, {1}, o, nullptr), std::invalid_argument);
  o.n_predict = 4;
  o.fault = "no-such-fault";
  try {
    generate(model, {1}, o, nullptr);
    ADD_FAILURE() << "unknown fault accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kv-stuck-length"), std::string::npos) << e.what();
  }
  o.fault = "bias-dropped";  // llama has no q/k/v biases: the fault could not show
  EXPECT_THROW(generate(model, {1, 2}, o, nullptr), std::invalid_argument);
}

TEST(EngineGenerate, TraceMetadataDescribesTheRun) {
  const GgufFile model = fixture_file(qwen2_spec());
  EngineOptions o;
  o.n_predict = 7;
  o.precision = Precision::bf16;
  o.fault = "attn-scale";
  const TraceMetadata m = engine_metadata(model, {1, 2, 3}, o);
  EXPECT_EQ(m.producer, Producer::engine_host);
  EXPECT_EQ(m.precision, "bf16");
  EXPECT_EQ(m.fault, "attn-scale");
  EXPECT_EQ(m.prompt_length, 3);
  EXPECT_EQ(m.model_sha256.size(), 64u);
  ASSERT_TRUE(m.dims.has_value());
  EXPECT_EQ(m.dims->n_ctx, 10);
  EXPECT_TRUE(m.dims->complete());
  o.fault.clear();
  EXPECT_EQ(engine_metadata(model, {1}, o).fault, "none");
}

}  // namespace
}  // namespace tapdiff::engine
