// attn.probs.summary: the reduction itself, and the writer deriving it from attn.probs rows
// (kept where the filter drops attn.probs, not derived where the producer records it).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/temp_dir.hpp"
#include "tapdiff/attn_summary.hpp"
#include "tapdiff/tap_layout.hpp"
#include "trace_test_util.hpp"

namespace tapdiff {
namespace {

using test::all_values;
using test::TempDir;
using test::sample_metadata;

// Two heads over a width of 5 keys, at position 2: head 0 on key 2 alone, head 1 spread over
// keys 0..2 evenly with 0.25 of its weight on future key 4 (a missing mask).
std::vector<float> two_heads() {
  return {0, 0, 1, 0, 0,  //
          0.25f, 0.25f, 0.25f, 0, 0.25f};
}

TEST(AttnSummary, MissingMaxMeanKeyAndFutureWeight) {
  const std::vector<float> probs = two_heads();
  std::vector<float> s(2 * kAttnSummaryFields);
  summarize_attention_row(probs.data(), 2, 5, 2, s.data());
  EXPECT_EQ(s, (std::vector<float>{0, 1, 1, 0,  // on key p: mean_key 1
                                   0, 0.25f, (0.25f * (0 + 1 + 2 + 4)) / 2, 0.25f}));
  // Position 0: the mean key is not divided by 0.
  std::vector<float> first(kAttnSummaryFields);
  const std::vector<float> on_key_one = {0, 1, 0};
  summarize_attention_row(on_key_one.data(), 1, 3, 0, first.data());
  EXPECT_EQ(first, (std::vector<float>{0, 1, 1, 1}));
  // A row that does not sum to 1 (a softmax over more keys than it keeps) misses the rest.
  const std::vector<float> short_row = {0.5f, 0.25f, 0};
  summarize_attention_row(short_row.data(), 1, 3, 1, first.data());
  EXPECT_EQ(first[0], 0.25f);
  // A NaN weight makes every field it enters NaN, the largest weight included (as numpy's max,
  // which the Python writer uses); the weight after p it does not enter stays.
  const std::vector<float> with_nan = {std::numeric_limits<float>::quiet_NaN(), 0.5f, 0, 0.25f};
  summarize_attention_row(with_nan.data(), 1, 4, 1, first.data());
  EXPECT_TRUE(std::isnan(first[0]) && std::isnan(first[1]) && std::isnan(first[2])) << first[1];
  EXPECT_EQ(first[3], 0.25f);
}

TEST(AttnSummary, LongRowsAgreeWithADirectSum) {
  // Wide enough for the vector lanes and their tail; weights that are not sums of powers of 2.
  const std::int64_t width = 1000, p = 700;
  std::vector<float> probs(width);
  double mass = 0, key = 0, future = 0;
  float max = 0;
  for (std::int64_t j = 0; j < width; ++j) {
    probs[std::size_t(j)] = float((j * 37) % 101) / 5000.0f;
    mass += probs[std::size_t(j)];
    key += double(probs[std::size_t(j)]) * double(j);
    if (j > p) future += probs[std::size_t(j)];
    max = std::max(max, probs[std::size_t(j)]);
  }
  std::vector<float> s(kAttnSummaryFields);
  summarize_attention_row(probs.data(), 1, width, p, s.data());
  EXPECT_NEAR(s[0], 1 - mass, 1e-5 * mass);
  EXPECT_EQ(s[1], max);
  EXPECT_NEAR(s[2], key / p, 1e-5 * key / p);
  EXPECT_NEAR(s[3], future, 1e-5 * future);
}

TEST(AttnSummary, TheWriterKeepsItWhereTheFilterDropsTheProbabilities) {
  TempDir dir;
  const std::string path = dir.file("summary.h5");
  WriterOptions o;
  o.filter = TapFilter::parse("!*.attn.probs");
  const std::vector<float> probs = two_heads();
  {
    TraceWriter w(path, sample_metadata(), o);
    // Producers ask before computing attn.probs: wanted, for its summary.
    EXPECT_TRUE(w.enabled("attn.probs", 0, 2));
    EXPECT_FALSE(w.filter().enabled("attn.probs", 0, 2));
    w.record("attn.probs", 0, 2, 1, RowShape({2, 5}), probs.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(path);
  EXPECT_EQ(r.find("attn.probs", 0), nullptr);
  std::vector<float> expected(2 * kAttnSummaryFields);
  summarize_attention_row(probs.data(), 2, 5, 2, expected.data());
  EXPECT_EQ(r.tap("attn.probs.summary", 0).row_shape, (std::vector<std::int64_t>{2, kAttnSummaryFields}));
  EXPECT_EQ(all_values(r, "attn.probs.summary", 0), expected);
}

TEST(AttnSummary, AProducerThatRecordsItIsNotOverwritten) {
  TempDir dir;
  const std::string path = dir.file("own.h5");
  const std::vector<float> probs = two_heads();
  const std::vector<float> own(2 * kAttnSummaryFields, 0.5f);
  {
    TraceWriter w(path, sample_metadata());
    // In trace order, as a copy of a trace records them: attn.probs first.
    w.record("attn.probs", 1, 2, 1, RowShape({2, 5}), probs.data());
    w.record("attn.probs.summary", 1, 2, 1, RowShape({2, kAttnSummaryFields}), own.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(path);
  EXPECT_EQ(all_values(r, "attn.probs.summary", 1), own);
  EXPECT_EQ(all_values(r, "attn.probs", 1), probs);
}

TEST(AttnSummary, UnavailableWithTheProbabilitiesOrTheirLayout) {
  TempDir dir;
  TraceMetadata m = sample_metadata();
  m.unavailable["attn.probs"] = "a fused kernel";
  {
    TraceWriter w(dir.file("fused.h5"), m);
    w.close();
  }
  EXPECT_NE(TraceReader(dir.file("fused.h5")).metadata().unavailable.at("attn.probs.summary").find("a fused kernel"),
            std::string::npos);

  TraceMetadata laid = sample_metadata();
  TapDims dims;
  dims.n_layer = 2, dims.n_embd = 8, dims.n_head = 2, dims.n_head_kv = 2, dims.head_dim = 4, dims.n_ff = 16;
  dims.n_vocab = 32, dims.n_ctx = 5;
  laid.dims = dims;
  laid.layouts["attn.probs"] = TapLayout::parse("axes=n_ctx,n_head");
  const std::vector<float> stored(10, 0.1f);
  {
    TraceWriter w(dir.file("laid.h5"), laid);
    w.record("attn.probs", 0, 0, 1, RowShape({5, 2}), stored.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(dir.file("laid.h5"));
  EXPECT_EQ(r.find("attn.probs.summary", 0), nullptr);
  EXPECT_NE(r.metadata().unavailable.at("attn.probs.summary").find("layout"), std::string::npos);
}

}  // namespace
}  // namespace tapdiff
