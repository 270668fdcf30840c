// Writer -> reader round trips: every metadata field, every row shape, positions with gaps,
// chunk boundaries, commit intervals, compression, and rejected records.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "support/temp_dir.hpp"
#include "support/test_values.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_summary.hpp"
#include "tapdiff/trace_writer.hpp"
#include "trace_test_util.hpp"

namespace tapdiff {
namespace {

// Catalogue taps a dense model without optional ops has (qwen3 adds its per-head q/k norms).
std::size_t every_model_taps() {
  return std::size_t(std::count_if(tap_catalogue().begin(), tap_catalogue().end(),
                                   [](const TapSpec& s) { return emitted_by(s, TapModelFeatures{}); }));
}

using test::sample_metadata;
using test::TempDir;

std::vector<float> iota_rows(std::int64_t n, float start) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(TraceRoundTrip, EveryMetadataField) {
  TempDir dir;
  const std::string path = dir.file("meta.h5");
  TraceMetadata m = sample_metadata();
  m.producer = Producer::engine_cuda;
  m.precision = "bf16";
  m.fault = "kv-stuck-length";
  m.hparams["tied_output"] = std::int64_t{1};
  m.hparams["rms_eps"] = 1e-6;
  m.hparams["rope_pairing"] = std::string("neox");
  m.settings = {{"kv_type", std::string("q8_0")}, {"flash_attn", std::int64_t{1}}, {"scale", 0.5}};
  m.unavailable = {{"kv.k", "no node holds it"}, {"attn.probs", "fused kernel"}};
  TapDims dims;
  dims.n_layer = 2;
  dims.n_embd = 8;
  dims.n_head = 4;
  dims.n_head_kv = 2;
  dims.head_dim = 2;
  dims.n_ff = 12;
  dims.n_vocab = 32;
  dims.n_ctx = 5;
  m.dims = dims;
  WriterOptions options;
  options.filter = TapFilter::parse("blk.*,output", "0-1", "0-");
  {
    TraceWriter w(path, m, options);
    w.end_step();
    w.append_tokens(std::vector<std::int32_t>{13, 14}.data(), 2);
    w.end_step();
    w.append_token(15);
    w.end_step();
    w.close();
  }
  const TraceReader r(path);
  EXPECT_EQ(r.format_version().to_string(), "3.0");
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.committed_steps(), 3);
  const TraceMetadata& got = r.metadata();
  EXPECT_EQ(got.producer, Producer::engine_cuda);
  EXPECT_EQ(got.producer_version, m.producer_version);
  EXPECT_EQ(got.git_commit, m.git_commit);
  EXPECT_EQ(got.model_path, m.model_path);
  EXPECT_EQ(got.model_sha256, m.model_sha256);
  EXPECT_EQ(got.hparams, m.hparams);
  EXPECT_EQ(got.settings, m.settings);
  // The writer adds that attn.probs.summary, derived from attn.probs, is missing too.
  auto unavailable = m.unavailable;
  unavailable["attn.probs.summary"] = "derived from attn.probs, which this producer does not record: " +
                                      m.unavailable.at("attn.probs");
  EXPECT_EQ(got.unavailable, unavailable);
  EXPECT_EQ(got.precision, "bf16");
  EXPECT_EQ(got.fault, "kv-stuck-length");
  EXPECT_EQ(got.prompt_length, 2);
  EXPECT_EQ(got.tokens, (std::vector<std::int32_t>{11, 12, 13, 14, 15}));
  ASSERT_TRUE(got.dims.has_value());
  EXPECT_EQ(*got.dims, dims);
  EXPECT_EQ(r.filter().names, "blk.*,output");
  EXPECT_EQ(r.filter().layers, "0-1");
  EXPECT_EQ(r.filter().positions, "0-");
  EXPECT_TRUE(r.taps().empty());
}

TEST(TraceRoundTrip, EveryRowShapeAndScope) {
  TempDir dir;
  const std::string path = dir.file("shapes.h5");
  struct Tap {
    const char* name;
    int layer;
    RowShape shape;
  };
  const std::vector<Tap> taps = {{"token_embd", -1, {8}},   {"attn_q", 0, {8}},
                                 {"attn.probs", 0, {4, 6}}, {"my.cube", 1, {2, 3, 4}},
                                 {"my.scalar", 1, {1}},     {"my.rank4", 0, {2, 1, 2, 3}},
                                 {"output", -1, {32}}};
  {
    TraceWriter w(path, sample_metadata());
    // Prefill: positions 0..1 in one record, then two decode steps of one position.
    for (const Tap& t : taps) {
      const std::vector<float> rows = iota_rows(2 * t.shape.elements(), 0.5f);
      w.record(t.name, t.layer, 0, 2, t.shape, rows.data());
    }
    w.end_step();
    for (std::int64_t p = 2; p < 4; ++p) {
      for (const Tap& t : taps) {
        const std::vector<float> row =
            iota_rows(t.shape.elements(), 100.0f * static_cast<float>(p));
        w.record(t.name, t.layer, p, 1, t.shape, row.data());
      }
      w.end_step();
    }
    w.close();
  }
  const TraceReader r(path);
  ASSERT_EQ(r.taps().size(), taps.size() + 1);  // attn.probs brings attn.probs.summary
  for (const Tap& t : taps) {
    const TapInfo& info = r.tap(t.name, t.layer);
    EXPECT_EQ(info.row_shape, t.shape.to_vector()) << t.name;
    EXPECT_EQ(info.n_rows, 4) << t.name;
    EXPECT_EQ(info.positions(), (std::vector<std::int64_t>{0, 1, 2, 3})) << t.name;
    const TapRows rows = r.read(info);
    ASSERT_EQ(rows.values.size(), static_cast<std::size_t>(4 * t.shape.elements()));
    const std::vector<float> prefill = iota_rows(2 * t.shape.elements(), 0.5f);
    EXPECT_TRUE(std::equal(prefill.begin(), prefill.end(), rows.values.begin())) << t.name;
    EXPECT_EQ(rows.row(2)[0], 200.0f) << t.name;
    EXPECT_EQ(rows.row(3)[t.shape.elements() - 1],
              300.0f + static_cast<float>(t.shape.elements() - 1))
        << t.name;
    EXPECT_EQ(test::raw_dims(path, "/taps/" + info.stack + "/data")[0], 4u)
        << "a closed trace's datasets have their exact size";
  }
  // Catalogue taps come in execution order, then the others.
  EXPECT_EQ(r.taps().front().name, "token_embd");
  EXPECT_EQ(r.taps()[1].name, "attn_q");
  EXPECT_EQ(r.taps()[2].name, "attn.probs");
  EXPECT_EQ(r.taps()[3].name, "attn.probs.summary");
  EXPECT_EQ(r.taps()[4].name, "output");
}

TEST(TraceRoundTrip, PositionsWithGapsAndRangeReads) {
  TempDir dir;
  const std::string path = dir.file("gaps.h5");
  WriterOptions options;
  options.filter = TapFilter::parse("", "", "0-1,4-6,9-");
  {
    TraceWriter w(path, sample_metadata(), options);
    const std::vector<float> batch = iota_rows(8 * 2, 0.0f);  // positions 0..7, width 2
    w.record("attn_q", 0, 0, 8, {2}, batch.data());
    w.end_step();
    const std::vector<float> row = {-1.0f, -2.0f};
    w.record("attn_q", 0, 8, 1, {2}, row.data());  // filtered out
    w.end_step();
    w.record("attn_q", 0, 12, 1, {2}, row.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(path);
  const TapInfo& tap = r.tap("attn_q", 0);
  EXPECT_EQ(tap.positions(), (std::vector<std::int64_t>{0, 1, 4, 5, 6, 12}));
  ASSERT_EQ(tap.runs.size(), 3u);
  EXPECT_EQ(tap.runs[1].first_row, 2);
  EXPECT_EQ(tap.runs[1].first_position, 4);
  EXPECT_EQ(tap.runs[1].n_rows, 3);

  const TapRows middle = r.read(tap, 1, 5);
  EXPECT_EQ(middle.positions, (std::vector<std::int64_t>{1, 4, 5}));
  EXPECT_EQ(middle.values, (std::vector<float>{2, 3, 8, 9, 10, 11}));
  EXPECT_TRUE(r.read(tap, 2, 3).positions.empty());
  const TapRows tail = r.read(tap, 7, 100);
  EXPECT_EQ(tail.positions, std::vector<std::int64_t>{12});
  EXPECT_EQ(tail.values, (std::vector<float>{-1, -2}));
}

// A slot's batched steps (the prompt, in chunks) go to its stack's batch, its later steps to
// data; reads cross that boundary and see one sequence, slot by slot and a stack at a time.
TEST(TraceRoundTrip, BatchedStepsThenDecodeStepsReadAsOneSequence) {
  TempDir dir;
  const std::string path = dir.file("batched.h5");
  TraceMetadata metadata = sample_metadata();
  metadata.prompt_length = 6;
  metadata.tokens = {1, 2, 3, 4, 5, 6};
  const auto record = [](TraceWriter& w, int layer, std::int64_t p0, std::int64_t n) {
    std::vector<float> rows;
    for (std::int64_t p = p0; p < p0 + n; ++p) {
      const std::vector<float> row = test::tap_row(0, layer, static_cast<int>(p), 5);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    w.record("attn_q", layer, p0, n, {5}, rows.data());
  };
  for (const bool compress : {false, true}) {
    WriterOptions options;
    options.compress = compress;
    {
      TraceWriter w(path, metadata, options);
      for (int layer = 0; layer < 2; ++layer) record(w, layer, 0, 3);  // the prompt in two chunks
      w.end_step();
      for (int layer = 0; layer < 2; ++layer) record(w, layer, 3, 3);
      w.end_step();
      for (int p = 6; p < 10; ++p) {  // decode steps; layer 2 starts here
        for (int layer = 0; layer < 3; ++layer) record(w, layer, p, 1);
        w.end_step();
      }
      for (int layer = 0; layer < 3; ++layer) record(w, layer, 10, 2);  // batched again: after decode, data
      w.end_step();
      w.close();
    }
    const TraceReader r(path);
    EXPECT_EQ(r.tap("attn_q", 0).batch_rows, 6);  // the compressed copy keeps the batch
    EXPECT_EQ(r.tap("attn_q", 2).batch_rows, 0);
    const nlohmann::json summary = trace_summary(r);  // tapdiff inspect says where rows are
    EXPECT_EQ(summary["taps"][0].value("batch_rows", 0), 6);
    EXPECT_FALSE(summary["taps"][2].contains("batch_rows"));
    EXPECT_EQ(test::raw_dims(path, "/taps/attn_q/batch"), (std::vector<hsize_t>{3, 6, 5}));
    for (int layer = 0; layer < 3; ++layer) {
      const TapInfo& tap = r.tap("attn_q", layer);
      const std::int64_t first = layer == 2 ? 6 : 0;
      EXPECT_EQ(tap.positions().front(), first);
      EXPECT_EQ(tap.positions().back(), 11);
      const TapRows rows = r.read(tap, 4, 7);  // across the batch's end
      ASSERT_EQ(rows.size(), layer == 2 ? 2u : 4u);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(std::vector<float>(rows.row(i), rows.row(i) + 5),
                  test::tap_row(0, layer, static_cast<int>(rows.positions[i]), 5))
            << "layer " << layer << " position " << rows.positions[i] << (compress ? " compressed" : "");
      }
    }
    // Rows 0..11 of every slot in one read: slot 2's first rows are its decode steps.
    const TapInfo& tap0 = r.tap("attn_q", 0);
    const auto slots = static_cast<std::size_t>(r.stack_slots(tap0));
    ASSERT_EQ(slots, 3u);
    std::vector<float> stack(12 * slots * 5);
    r.read_stack_into(tap0, 0, 11, stack.data());
    for (std::size_t s = 0; s < 3; ++s) {
      const TapInfo& tap = r.tap("attn_q", static_cast<int>(s));
      const TapRows all = r.read(tap);
      for (std::size_t i = 0; i < all.size(); ++i)
        EXPECT_EQ(std::vector<float>(all.row(i), all.row(i) + 5),
                  std::vector<float>(&stack[(i * slots + tap.slot) * 5], &stack[(i * slots + tap.slot) * 5] + 5))
            << "slot " << s << " row " << i << (compress ? " compressed" : "");
    }
  }
}

TEST(TraceRoundTrip, ManyChunksAndTinyChunkBytes) {
  TempDir dir;
  const std::string path = dir.file("chunks.h5");
  WriterOptions options;
  options.chunk_bytes = 64;  // two rows of 8 floats per chunk
  const int steps = 70;      // also past one chunk of runs/tokens bookkeeping? runs: 1
  {
    TraceWriter w(path, sample_metadata(), options);
    for (int s = 0; s < steps; ++s) {
      const std::vector<float> row = test::tap_row(0, 0, s, 8);
      w.record("attn_q", 0, s, 1, {8}, row.data());
      w.append_token(test::token_at(s));
      w.end_step();
    }
    w.close();
  }
  const TraceReader r(path);
  const TapRows rows = r.read(r.tap("attn_q", 0));
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(std::vector<float>(rows.row(static_cast<std::size_t>(s)),
                                 rows.row(static_cast<std::size_t>(s)) + 8),
              test::tap_row(0, 0, s, 8))
        << "position " << s;
  }
  EXPECT_EQ(r.metadata().tokens.size(), static_cast<std::size_t>(2 + steps));
  EXPECT_EQ(test::raw_dims(path, "/tokens")[0], static_cast<hsize_t>(2 + steps));
}

TEST(TraceRoundTrip, DiscontiguousRecordsMakeRuns) {
  TempDir dir;
  const std::string path = dir.file("runs.h5");
  {
    TraceWriter w(path, sample_metadata());
    for (std::int64_t p : {0, 1, 5, 6, 7, 20}) {
      const std::vector<float> row = {static_cast<float>(p)};
      w.record("output", -1, p, 1, {1}, row.data());
      w.end_step();
    }
    w.close();
  }
  const TraceReader r(path);
  const TapInfo& tap = r.tap("output", -1);
  EXPECT_EQ(tap.runs.size(), 3u);
  const TapRows rows = r.read(tap);
  EXPECT_EQ(rows.positions, (std::vector<std::int64_t>{0, 1, 5, 6, 7, 20}));
  EXPECT_EQ(rows.values, (std::vector<float>{0, 1, 5, 6, 7, 20}));
}

TEST(TraceRoundTrip, CommitEveryAndRecordsAfterTheLastStep) {
  TempDir dir;
  const std::string path = dir.file("commit.h5");
  WriterOptions options;
  options.commit_every = 4;
  TraceWriter w(path, sample_metadata(), options);
  for (int s = 0; s < 10; ++s) {
    const std::vector<float> row = test::tap_row(1, 0, s, 4);
    w.record("attn_k", 0, s, 1, {4}, row.data());
    w.end_step();
  }
  EXPECT_EQ(w.steps(), 10);
  EXPECT_EQ(w.committed_steps(), 8);
  const std::vector<float> last = test::tap_row(1, 0, 10, 4);
  w.record("attn_k", 0, 10, 1, {4}, last.data());  // no end_step: close commits it
  w.close();
  const TraceReader r(path);
  EXPECT_EQ(r.committed_steps(), 10);
  EXPECT_EQ(r.tap("attn_k", 0).n_rows, 11);
  EXPECT_EQ(test::all_values(r, "attn_k", 0).back(), last.back());
}

TEST(TraceRoundTrip, CompressedTracesReadTheSame) {
  TempDir dir;
  const std::string path = dir.file("gzip.h5");
  WriterOptions options;
  options.compress = true;
  {
    TraceWriter w(path, sample_metadata(), options);
    for (int s = 0; s < 5; ++s) {
      const std::vector<float> row = test::tap_row(2, 1, s, 64);
      w.record("ffn_up", 1, s, 1, {64}, row.data());
      w.end_step();
    }
    w.close();
  }
  const TraceReader r(path);
  const std::vector<float> values = test::all_values(r, "ffn_up", 1);
  ASSERT_EQ(values.size(), 5u * 64u);
  EXPECT_EQ(std::vector<float>(values.begin() + 4 * 64, values.end()), test::tap_row(2, 1, 4, 64));
  const hid_t f = test::open_raw(path, H5F_ACC_RDONLY);
  const hid_t d = H5Dopen2(f, "/taps/ffn_up/data", H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(d);
  EXPECT_EQ(H5Pget_nfilters(dcpl), 2) << "shuffle + deflate";
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(TraceRoundTrip, DisabledTapsLeaveNothing) {
  TempDir dir;
  const std::string path = dir.file("filtered.h5");
  WriterOptions options;
  options.filter = TapFilter::parse("blk.*.attn_q", "1");
  {
    TraceWriter w(path, sample_metadata(), options);
    const std::vector<float> row = {1, 2};
    EXPECT_FALSE(w.enabled("attn_k", 1, 0));
    EXPECT_FALSE(w.enabled("attn_q", 0, 0));
    EXPECT_TRUE(w.enabled("attn_q", 1, 0));
    for (int l = 0; l < 3; ++l) {
      w.record("attn_q", l, 0, 1, {2}, row.data());
      w.record("attn_k", l, 0, 1, {2}, row.data());
    }
    w.record("output", -1, 0, 1, {2}, row.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(path);
  ASSERT_EQ(r.taps().size(), 1u);
  EXPECT_EQ(r.taps()[0].full_name, "blk.1.attn_q");
}

TEST(TraceRoundTrip, RejectedRecordsNameTheTapAndChangeNothing) {
  TempDir dir;
  const std::string path = dir.file("rejected.h5");
  TraceWriter w(path, sample_metadata());
  const std::vector<float> row(8, 1.0f);
  w.record("attn_q", 0, 0, 1, {8}, row.data());
  w.end_step();
  struct Case {
    std::function<void()> call;
    std::string object;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[&] {
         w.record("attn_q", 0, 1, 1, {4, 2}, row.data());
       },
       "/taps/attn_q", "layer 0: row shape [4, 2] differs from [8]"},
      {[&] { w.record("attn_q", 0, 0, 1, {8}, row.data()); }, "/taps/attn_q",
       "layer 0: position 0 recorded after position 0: positions of a tap must increase"},
      {[&] { w.record("attn q", 0, 1, 1, {8}, row.data()); }, "/taps/attn q", "may only use"},
      {[&] { w.record("", 0, 1, 1, {8}, row.data()); }, "/taps/", "empty tap name"},
      {[&] { w.record("blk.0.attn_q", -1, 1, 1, {8}, row.data()); }, "/taps/blk.0.attn_q",
       "global tap"},
      {[&] { w.record("attn_q", -2, 1, 1, {8}, row.data()); }, "/taps/attn_q", "layer -2"},
      {[&] { w.record("attn_q", 0, -1, 1, {8}, row.data()); }, "/taps/attn_q", "< 0"},
      {[&] { w.record("attn_q", 0, 1, 0, {8}, row.data()); }, "/taps/attn_q", "n_rows 0"},
      {[&] {
         w.record("attn_q", 0, 1, 1, {8, 0}, row.data());
       },
       "/taps/attn_q", "dimension < 1"},
      {[&] { w.record("attn_q", 0, 1, 1, {8}, nullptr); }, "/taps/attn_q", "rows is null"},
  };
  for (const Case& c : cases) {
    try {
      c.call();
      ADD_FAILURE() << "accepted a record expected to fail with: " << c.needle;
    } catch (const TraceError& e) {
      EXPECT_EQ(e.file(), path);
      EXPECT_EQ(e.object(), c.object) << e.what();
      EXPECT_NE(e.problem().find(c.needle), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(w.failed());
  w.record("attn_q", 0, 1, 1, {8}, row.data());
  w.end_step();
  w.close();
  EXPECT_THROW(w.end_step(), TraceError);
  const TraceReader r(path);
  EXPECT_EQ(r.tap("attn_q", 0).n_rows, 2);
}

TEST(TraceRoundTrip, BadMetadataIsRejectedAtOpen) {
  TempDir dir;
  TraceMetadata m = sample_metadata();
  m.model_sha256 = "ABC";
  EXPECT_THROW(TraceWriter(dir.file("a.h5"), m), TraceError);
  m = sample_metadata();
  m.prompt_length = -1;
  EXPECT_THROW(TraceWriter(dir.file("b.h5"), m), TraceError);
  WriterOptions options;
  options.commit_every = 0;
  EXPECT_THROW(TraceWriter(dir.file("c.h5"), sample_metadata(), options), TraceError);
}

std::vector<float> wrong_width_values() { return {1, 2, 3, 4, 5, 6, 7, 8}; }

// With dims, every catalogue tap the filter enables exists before the first step (see
// precreate_catalogue); a producer recording another shape than the catalogue's still gets
// its rows traced, and taps it never records stay invisible to readers.
TEST(TraceRoundTrip, PrecreatedCatalogueTapsTakeTheRecordedShape) {
  TempDir dir;
  const std::string path = dir.file("precreated.h5");
  TraceMetadata m = sample_metadata();
  TapDims dims;
  dims.n_layer = 2;
  dims.n_embd = 8;
  dims.n_head = 2;
  dims.n_head_kv = 1;
  dims.head_dim = 4;
  dims.n_ff = 16;
  dims.n_vocab = 32;
  dims.n_ctx = 4;
  m.dims = dims;
  WriterOptions options;
  options.filter = TapFilter::parse("!blk.1.*");
  {
    TraceWriter w(path, m, options);
    // One stack per name, a slot per enabled layer (blk.1 is filtered out).
    EXPECT_EQ(test::raw_dims(path, "/taps/ffn_up/data"), (std::vector<hsize_t>{0, 1, 16}));
    const std::vector<float> wrong_width = wrong_width_values();  // n_embd wide: a shape bug
    w.record("ffn_up", 0, 0, 1, {8}, wrong_width.data());
    const std::vector<float> q(8, 2.0f);
    w.record("attn_q", 0, 0, 1, {8}, q.data());
    w.end_step();
    w.close();
  }
  const TraceReader r(path);
  ASSERT_EQ(r.taps().size(), 2u);
  EXPECT_EQ(r.tap("ffn_up", 0).row_shape, std::vector<std::int64_t>{8});
  EXPECT_EQ(r.tap("ffn_up", 0).stack, "ffn_up#2") << "the catalogue's shape keeps /taps/ffn_up";
  EXPECT_EQ(test::all_values(r, "ffn_up", 0), wrong_width_values());
  EXPECT_EQ(r.tap("attn_q", 0).row_shape, std::vector<std::int64_t>{8});
  const CatalogueReport report =
      check_catalogue(r.emitted_taps(), dims, TapFilter::parse(r.filter()));
  EXPECT_EQ(report.wrong_shape.size(), 1u) << report.describe();
  EXPECT_EQ(report.missing.size(), every_model_taps() - 2);  // blk.1.* filtered out
}

TEST(TraceRoundTrip, WithoutCloseTheTraceIsIncompleteButReadable) {
  TempDir dir;
  const std::string path = dir.file("unclosed.h5");
  {
    TraceWriter w(path, sample_metadata());
    for (int s = 0; s < 3; ++s) {
      const std::vector<float> row = test::tap_row(0, 0, s, 4);
      w.record("attn_norm", 0, s, 1, {4}, row.data());
      w.end_step();
    }
    const std::vector<float> row = test::tap_row(0, 0, 3, 4);
    w.record("attn_norm", 0, 3, 1, {4}, row.data());  // never committed
  }
  const TraceReader r(path);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.committed_steps(), 3);
  EXPECT_EQ(r.tap("attn_norm", 0).n_rows, 3);
}

// The writer finds a record's tap by its name's length and first and last 8 bytes, then the
// whole name: taps that agree in all but the middle keep their own rows.
TEST(TraceRoundTrip, TapsWhoseNamesDifferOnlyInTheMiddleKeepTheirRows) {
  TempDir dir;
  const std::string path = dir.file("names.h5");
  const auto name = [](int i) { return "my_taps_" + std::to_string(100 + i) + "__x.rope"; };
  const RowShape shape({3});
  {
    TraceWriter w(path, sample_metadata());
    for (std::int64_t p = 0; p < 3; ++p) {
      for (int i = 0; i < 40; ++i) {
        const std::vector<float> row = iota_rows(3, 1000.0f * float(i) + 10.0f * float(p));
        w.record(name(i), 1, p, 1, shape, row.data());
      }
      w.end_step();
    }
    w.close();
  }
  const TraceReader r(path);
  for (int i = 0; i < 40; ++i) {
    const TapRows rows = r.read(r.tap(name(i), 1));
    ASSERT_EQ(rows.values.size(), 9u) << name(i);
    EXPECT_EQ(rows.row(2)[1], 1000.0f * float(i) + 21.0f) << name(i);
  }
}

TEST(TraceRoundTrip, UnknownTapLookups) {
  TempDir dir;
  const std::string path = dir.file("lookup.h5");
  TraceWriter(path, sample_metadata()).close();
  const TraceReader r(path);
  EXPECT_EQ(r.find("attn_q", 0), nullptr);
  try {
    r.tap("attn_q", 0);
    ADD_FAILURE();
  } catch (const TraceError& e) {
    EXPECT_EQ(e.object(), "/taps/attn_q");
    EXPECT_EQ(e.problem(), "layer 0: no such tap in the trace");
  }
}

TEST(TraceSummary, DescribesTheTrace) {
  TempDir dir;
  const std::string path = dir.file("summary.h5");
  TraceMetadata m = sample_metadata();
  TapDims dims;
  dims.n_layer = 1;
  dims.n_embd = 2;
  dims.n_head = 1;
  dims.n_head_kv = 1;
  dims.head_dim = 2;
  dims.n_ff = 3;
  dims.n_vocab = 4;
  dims.n_ctx = 8;
  m.dims = dims;
  {
    TraceWriter w(path, m);
    const std::vector<float> row = {1, 2};
    for (std::int64_t p : {0, 1, 2, 5}) {
      w.record("attn_norm", 0, p, 1, {2}, row.data());
      w.end_step();
    }
    w.close();
  }
  const nlohmann::json s = trace_summary(TraceReader(path));
  EXPECT_EQ(s["format"], "tapdiff-trace");
  EXPECT_EQ(s["complete"], true);
  EXPECT_EQ(s["producer"]["kind"], "engine-host");
  EXPECT_EQ(s["model"]["hparams"]["arch"], "llama");
  EXPECT_EQ(s["model"]["hparams"]["n_layer"], 2);
  EXPECT_EQ(s["tokens"], nlohmann::json({11, 12}));
  EXPECT_EQ(s["n_taps"], 1);
  EXPECT_EQ(s["taps"][0]["positions"], "0-2,5");
  EXPECT_EQ(s["taps"][0]["row_shape"], nlohmann::json({2}));
  EXPECT_EQ(s["taps"][0]["stack"], "/taps/attn_norm");
  EXPECT_EQ(s["taps"][0]["slot"], 0);
  EXPECT_EQ(s["catalogue"]["ok"], false);
  EXPECT_EQ(s["catalogue"]["missing"].size(), every_model_taps() - 1);
  EXPECT_EQ(position_ranges({}), "");
  EXPECT_EQ(position_ranges({3}), "3");
}

}  // namespace
}  // namespace tapdiff
