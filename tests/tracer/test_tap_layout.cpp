// Declared layouts (format 2.2): parsing, aligning a row to the catalogue's layout, and the
// writer and reader carrying them through a trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <unistd.h>

#include "tapdiff/tap_layout.hpp"
#include "trace_test_util.hpp"

namespace tapdiff {
namespace {

TapDims small_dims() {
  TapDims d;
  d.n_layer = 1;
  d.n_embd = 12;
  d.n_head = 4;
  d.n_head_kv = 2;
  d.head_dim = 3;
  d.n_ff = 8;
  d.n_vocab = 10;
  d.n_ctx = 5;
  return d;
}

const TapSpec& spec(const char* name) { return *find_tap_spec(name); }

std::vector<float> iota_row(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(TapLayout, ParsesAndPrintsEveryClause) {
  const TapLayout l = TapLayout::parse(" axes=head_dim, n_head ; shard=n_head:1/4;pad=n_vocab:32064 ");
  EXPECT_EQ(l.axes, (std::vector<DimSymbol>{DimSymbol::head_dim, DimSymbol::n_head}));
  ASSERT_TRUE(l.shard);
  EXPECT_EQ(l.shard->axis, DimSymbol::n_head);
  EXPECT_EQ(l.shard->rank, 1);
  EXPECT_EQ(l.shard->count, 4);
  EXPECT_EQ(l.padded.at(DimSymbol::n_vocab), 32064);
  EXPECT_EQ(l.to_string(), "axes=head_dim,n_head; shard=n_head:1/4; pad=n_vocab:32064");
  EXPECT_EQ(TapLayout::parse(l.to_string()).to_string(), l.to_string());
}

TEST(TapLayout, RefusesWhatItCannotRead) {
  for (const char* bad : {"", "axes", "axes=", "order=n_head", "axes=heads", "shard=n_head:4/4", "shard=n_head:1",
                          "shard=n_head:x/2", "pad=n_vocab", "pad=n_vocab:-3"}) {
    EXPECT_THROW(TapLayout::parse(bad), std::invalid_argument) << bad;
  }
  try {
    TapLayout::parse("axes=head_dim,heads");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"heads\""), std::string::npos) << e.what();
  }
}

TEST(TapLayout, PermutedAxesGatherTheCatalogueOrder) {
  // attn_q's row is [n_head * head_dim], head-major; this producer stores (head_dim, n_head).
  const RowAlignment a = align_row(spec("attn_q"), TapLayout::parse("axes=head_dim,n_head"), small_dims());
  EXPECT_EQ(a.stored_shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(a.row_shape, (std::vector<std::int64_t>{12}));
  EXPECT_FALSE(a.sharded());
  const std::vector<float> stored = iota_row(12);  // stored[d * 4 + h]
  std::vector<float> row(12);
  a.apply(stored.data(), row.data());
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 3; ++d) EXPECT_EQ(row[std::size_t(h * 3 + d)], stored[std::size_t(d * 4 + h)]);
  EXPECT_NE(a.description.find("stored as (head_dim, n_head), aligned to (n_head, head_dim)"), std::string::npos)
      << a.description;
}

TEST(TapLayout, PaddingIsDropped) {
  const RowAlignment a = align_row(spec("output"), TapLayout::parse("pad=n_vocab:16"), small_dims());
  EXPECT_EQ(a.stored_shape, (std::vector<std::int64_t>{16}));
  EXPECT_EQ(a.row_shape, (std::vector<std::int64_t>{10}));
  const std::vector<float> stored = iota_row(16);
  std::vector<float> row(10);
  a.apply(stored.data(), row.data());
  EXPECT_EQ(row, iota_row(10));
  EXPECT_NE(a.description.find("6 padding entries dropped"), std::string::npos) << a.description;
}

TEST(TapLayout, AShardCoversItsPartOfTheWholeRow) {
  // attn.probs [n_head, n_ctx]: rank 1 of 2 holds heads 2..3.
  const RowAlignment a = align_row(spec("attn.probs"), TapLayout::parse("shard=n_head:1/2"), small_dims());
  EXPECT_EQ(a.stored_shape, (std::vector<std::int64_t>{2, 5}));
  EXPECT_EQ(a.row_shape, (std::vector<std::int64_t>{2, 5}));
  EXPECT_EQ(a.whole_shape, (std::vector<std::int64_t>{4, 5}));
  ASSERT_TRUE(a.sharded());
  std::vector<std::int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 10);
  EXPECT_EQ(a.covers, expected);

  // attn_q [n_head * head_dim] split over head_dim (an unusual split): strided elements.
  const RowAlignment q = align_row(spec("attn_q"), TapLayout::parse("shard=head_dim:2/3"), small_dims());
  EXPECT_EQ(q.row_shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(q.covers, (std::vector<std::int64_t>{2, 5, 8, 11}));
}

TEST(TapLayout, AShardOfAPaddedVocabulary) {
  // Vocabulary-parallel logits: 10 tokens padded to 12, three ranks of 4; the last holds 8..9.
  const RowAlignment a = align_row(spec("output"), TapLayout::parse("pad=n_vocab:12; shard=n_vocab:2/3"), small_dims());
  EXPECT_EQ(a.stored_shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(a.row_shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(a.covers, (std::vector<std::int64_t>{8, 9}));
  const std::vector<float> stored = {80, 90, -1, -1};
  std::vector<float> row(2);
  a.apply(stored.data(), row.data());
  EXPECT_EQ(row, (std::vector<float>{80, 90}));
}

TEST(TapLayout, RefusesALayoutTheRowCannotHave) {
  const TapDims d = small_dims();
  const auto fails = [&](const char* tap, const char* layout, const char* says) {
    try {
      align_row(spec(tap), TapLayout::parse(layout), d);
      ADD_FAILURE() << tap << " " << layout;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  fails("attn_q", "axes=n_head", "expected each of (n_head, head_dim) once");
  fails("attn_q", "axes=n_head,n_head", "expected each of (n_head, head_dim) once");
  fails("attn_q", "axes=n_vocab,n_head", "has the axes (n_head, head_dim)");
  fails("output", "pad=n_vocab:8", "smaller than the model's 10");
  fails("output", "shard=n_vocab:0/3", "does not split into 3 equal parts");
  fails("output", "pad=n_vocab:16; shard=n_vocab:3/4", "holds only padding");
}

class TapLayoutTrace : public ::testing::Test {
protected:
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("tap_layout_" + std::to_string(::getpid()) + ".h5")).string();
  void TearDown() override { std::filesystem::remove(path_); }

  TraceMetadata metadata(const char* layout) {
    TraceMetadata m = test::sample_metadata();
    m.dims = small_dims();
    m.layouts["attn_q"] = TapLayout::parse(layout);
    return m;
  }
};

TEST_F(TapLayoutTrace, TheReaderAlignsWhatTheWriterStoredInItsLayout) {
  {
    TraceWriter w(path_, metadata("axes=head_dim,n_head"));
    const std::vector<float> stored = iota_row(2 * 12);  // two positions of (head_dim, n_head)
    w.record("attn_q", 0, 0, 2, RowShape{3, 4}, stored.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(path_);
  EXPECT_EQ(r.format_version().to_string(), "3.0");
  EXPECT_EQ(r.metadata().layouts.at("attn_q").to_string(), "axes=head_dim,n_head");
  const TapInfo& t = r.tap("attn_q", 0);
  EXPECT_EQ(t.stored_shape, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(t.row_shape, (std::vector<std::int64_t>{12}));
  EXPECT_EQ(t.stack, "attn_q");  // the precreated stack has the stored shape: no second stack
  const TapRows rows = r.read(t);
  ASSERT_EQ(rows.size(), 2u);
  for (std::size_t p = 0; p < 2; ++p)
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < 3; ++d)
        EXPECT_EQ(rows.row(p)[h * 3 + d], float(p * 12 + std::size_t(d * 4 + h)));
  for (const EmittedTap& e : r.emitted_taps()) {
    if (e.name != "attn_q") continue;
    EXPECT_EQ(e.row_shape, (std::vector<std::int64_t>{12}));
  }
}

TEST_F(TapLayoutTrace, ALayoutTheRowsContradictIsNotApplied) {
  {
    TraceWriter w(path_, metadata("axes=head_dim,n_head"));
    const std::vector<float> flat = iota_row(12);
    w.record("attn_q", 0, 0, 1, RowShape{12}, flat.data());  // a producer bug: rows as the catalogue's
    w.end_step();
    w.close();
  }
  const TraceReader r(path_);
  const TapInfo& t = r.tap("attn_q", 0);
  EXPECT_FALSE(t.alignment);
  EXPECT_EQ(t.row_shape, (std::vector<std::int64_t>{12}));
  EXPECT_NE(t.layout_note.find("the trace holds [12]: read as stored"), std::string::npos) << t.layout_note;
}

TEST_F(TapLayoutTrace, TheWriterRefusesALayoutThatDoesNotFit) {
  try {
    TraceWriter w(path_, metadata("axes=n_vocab,n_head"));
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("layouts[\"attn_q\"]"), std::string::npos) << e.what();
  }
  TraceMetadata no_dims = metadata("axes=head_dim,n_head");
  no_dims.dims.reset();
  EXPECT_THROW(TraceWriter(path_, no_dims), TraceError);
  TraceMetadata unknown = test::sample_metadata();
  unknown.dims = small_dims();
  unknown.layouts["my_tap"] = TapLayout::parse("pad=n_vocab:16");
  EXPECT_THROW(TraceWriter(path_, unknown), TraceError);
}

}  // namespace
}  // namespace tapdiff
