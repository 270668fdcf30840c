// Format 2.0's stacks (docs/trace-schema.md, "/taps/<stack>"): the layers of a tap name side by
// side, one block per step, and slots that each keep their own rows, runs and shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "support/temp_dir.hpp"
#include "support/test_values.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"
#include "trace_test_util.hpp"

namespace tapdiff {
namespace {

using test::sample_metadata;
using test::TempDir;

constexpr std::int64_t kWidth = 16;

std::vector<std::int64_t> read_int_array_attr(const std::string& file, const char* object,
                                              const char* name) {
  const hid_t f = test::open_raw(file, H5F_ACC_RDONLY);
  const hid_t a = H5Aopen_by_name(f, object, name, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t s = H5Aget_space(a);
  std::vector<std::int64_t> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  H5Aread(a, H5T_NATIVE_INT64, values.data());
  H5Sclose(s);
  H5Aclose(a);
  H5Fclose(f);
  return values;
}

std::vector<hsize_t> chunk_dims(const std::string& file, const char* dataset) {
  const hid_t f = test::open_raw(file, H5F_ACC_RDONLY);
  const hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(d);
  std::vector<hsize_t> dims(8);
  dims.resize(static_cast<std::size_t>(H5Pget_chunk(dcpl, 8, dims.data())));
  H5Pclose(dcpl);
  H5Dclose(d);
  H5Fclose(f);
  return dims;
}

// attn_q of every layer at every step, test::tap_row(1, layer, position) each.
void write_every_layer(const std::string& path, int layers, int steps) {
  TraceWriter w(path, sample_metadata());
  for (int p = 0; p < steps; ++p) {
    for (int l = 0; l < layers; ++l) {
      const std::vector<float> row = test::tap_row(1, l, p, kWidth);
      w.record("attn_q", l, p, 1, {kWidth}, row.data());
    }
    w.end_step();
  }
  w.close();
}

// Every layer of a step lands in one chunk row of its name's stack, so a decode step is one
// write per stack; the reader gives each layer back on its own.
TEST(TraceStacks, EveryLayerOfAStepSharesAChunkRow) {
  TempDir dir;
  const std::string path = dir.file("decode.h5");
  constexpr int kLayers = 5;
  constexpr int kSteps = 4;
  write_every_layer(path, kLayers, kSteps);
  EXPECT_EQ(test::raw_dims(path, "/taps/attn_q/data"),
            (std::vector<hsize_t>{kSteps, kLayers, kWidth}));
  const std::vector<hsize_t> chunk = chunk_dims(path, "/taps/attn_q/data");
  ASSERT_EQ(chunk.size(), 3u);
  EXPECT_EQ(chunk[1], static_cast<hsize_t>(kLayers)) << "a chunk holds every slot";
  EXPECT_EQ(read_int_array_attr(path, "/taps/attn_q", "layers"),
            (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  const TraceReader r(path);
  ASSERT_EQ(r.taps().size(), static_cast<std::size_t>(kLayers));
  for (int l = 0; l < kLayers; ++l) {
    const TapInfo& tap = r.tap("attn_q", l);
    EXPECT_EQ(tap.stack, "attn_q");
    EXPECT_EQ(tap.slot, static_cast<std::size_t>(l));
    std::vector<float> expected;
    for (int p = 0; p < kSteps; ++p) {
      const std::vector<float> row = test::tap_row(1, l, p, kWidth);
      expected.insert(expected.end(), row.begin(), row.end());
    }
    EXPECT_EQ(r.read(tap).values, expected) << "layer " << l;
  }
}

// A prompt (one batched step) goes to the stack's batch, a slot's rows side by side in chunks
// of the prompt's length; the decode steps after it still share a chunk row of every slot,
// though the stack was created by its first slot's prompt, before the others existed.
TEST(TraceStacks, APromptFillsBatchChunksAndDecodeStepsStillShareAChunkRow) {
  TempDir dir;
  const std::string path = dir.file("prompt.h5");
  constexpr int kLayers = 4;
  constexpr int kPrompt = 6;
  TraceMetadata metadata = sample_metadata();
  metadata.prompt_length = kPrompt;
  metadata.tokens.assign(kPrompt, 7);
  {
    TraceWriter w(path, metadata);
    for (int p = 0; p < kPrompt + 3; p += p == 0 ? kPrompt : 1) {
      const int n = p == 0 ? kPrompt : 1;
      for (int l = 0; l < kLayers; ++l) {
        std::vector<float> rows;
        for (int q = p; q < p + n; ++q) {
          const std::vector<float> row = test::tap_row(1, l, q, kWidth);
          rows.insert(rows.end(), row.begin(), row.end());
        }
        w.record("attn_q", l, p, n, {kWidth}, rows.data());
      }
      w.end_step();
    }
    w.close();
  }
  EXPECT_EQ(test::raw_dims(path, "/taps/attn_q/batch"), (std::vector<hsize_t>{kLayers, kPrompt, kWidth}));
  EXPECT_EQ(chunk_dims(path, "/taps/attn_q/batch"), (std::vector<hsize_t>{1, kPrompt, kWidth}));
  EXPECT_EQ(chunk_dims(path, "/taps/attn_q/data")[1], static_cast<hsize_t>(kLayers)) << "a chunk holds every slot";
  const TraceReader r(path);
  for (int l = 0; l < kLayers; ++l) {
    const TapRows rows = r.read(r.tap("attn_q", l));
    ASSERT_EQ(rows.size(), static_cast<std::size_t>(kPrompt + 3));
    for (std::size_t i = 0; i < rows.size(); ++i)
      EXPECT_EQ(std::vector<float>(rows.row(i), rows.row(i) + kWidth), test::tap_row(1, l, static_cast<int>(i), kWidth))
          << "layer " << l << " position " << i;
  }
}

// A range of positions read into the caller's memory: one tap's rows (read_into), or the rows
// of every slot of its stack in one read (read_stack_into), row by row as stored.
TEST(TraceStacks, RangesOfPositionsOfOneSlotOrOfTheWholeStack) {
  TempDir dir;
  const std::string path = dir.file("ranges.h5");
  constexpr int kLayers = 3;
  constexpr int kSteps = 6;
  write_every_layer(path, kLayers, kSteps);
  const TraceReader r(path);
  const TapInfo& tap = r.tap("attn_q", 1);
  ASSERT_EQ(r.stack_slots(tap), kLayers);
  EXPECT_EQ(r.positions_in(tap, 2, 4), (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_TRUE(r.positions_in(tap, kSteps, kSteps + 3).empty());

  std::vector<float> one(3 * kWidth);
  r.read_into(tap, 2, 4, one.data());
  std::vector<float> stack(3 * kLayers * kWidth);
  r.read_stack_into(tap, 2, 4, stack.data());
  for (int p = 2; p <= 4; ++p) {
    const std::vector<float> expected = test::tap_row(1, 1, p, kWidth);
    EXPECT_EQ(std::vector<float>(one.begin() + (p - 2) * kWidth, one.begin() + (p - 1) * kWidth), expected) << p;
    for (int l = 0; l < kLayers; ++l) {
      const auto at = stack.begin() + ((p - 2) * kLayers + l) * kWidth;
      EXPECT_EQ(std::vector<float>(at, at + kWidth), test::tap_row(1, l, p, kWidth)) << "layer " << l << " position " << p;
    }
  }
}

// Slots out of step with each other: a layer that starts late, one with a gap, one added to
// the stack after the stack was written (no dims declared), through every write path (one
// commit per step or batched, early write-outs past a tiny stage limit, gzip).
TEST(TraceStacks, SlotsKeepTheirOwnRowsRunsAndPositions) {
  // layer -> positions it records, in recording order, one step per position 0..7.
  const std::map<int, std::vector<std::int64_t>> recorded = {
      {0, {0, 1, 2, 3, 4, 5, 6, 7}},
      {1, {3, 4, 5, 6, 7}},  // joins late: its slot is added after the stack exists
      {2, {0, 1, 5, 6, 7}},  // a gap: two runs
      {7, {7}},              // one row, at the last step
  };
  struct Variant {
    const char* what;
    int commit_every;
    std::size_t stage_limit;
    bool compress;
  };
  const Variant variants[] = {{"commit every step", 1, 256u << 20, false},
                              {"commit every 3 steps", 3, 256u << 20, false},
                              {"stage limit of one row", 1, 1, false},
                              {"stage limit of two rows", 1, 2 * kWidth * sizeof(float), false},
                              {"gzip at close", 2, 256u << 20, true}};
  for (const Variant& v : variants) {
    TempDir dir;
    const std::string path = dir.file("slots.h5");
    WriterOptions options;
    options.commit_every = v.commit_every;
    options.stage_limit_bytes = v.stage_limit;
    options.compress = v.compress;
    {
      TraceWriter w(path, sample_metadata(), options);
      for (std::int64_t p = 0; p < 8; ++p) {
        for (const auto& [layer, positions] : recorded) {
          if (std::find(positions.begin(), positions.end(), p) == positions.end()) continue;
          const std::vector<float> row = test::tap_row(3, layer, p, kWidth);
          w.record("ffn_up", layer, p, 1, {kWidth}, row.data());
        }
        w.end_step();
      }
      w.close();
    }
    const TraceReader r(path);
    ASSERT_EQ(r.taps().size(), recorded.size()) << v.what;
    for (const auto& [layer, positions] : recorded) {
      const TapInfo& tap = r.tap("ffn_up", layer);
      EXPECT_EQ(tap.stack, "ffn_up") << v.what;
      EXPECT_EQ(tap.positions(), positions) << v.what << ", layer " << layer;
      const TapRows rows = r.read(tap);
      ASSERT_EQ(rows.size(), positions.size()) << v.what;
      for (std::size_t i = 0; i < positions.size(); ++i) {
        const std::vector<float> expected = test::tap_row(3, layer, positions[i], kWidth);
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), rows.row(i)))
            << v.what << ", layer " << layer << ", position " << positions[i];
      }
    }
    EXPECT_EQ(r.tap("ffn_up", 2).runs.size(), 2u) << v.what;
  }
}

// A prefill larger than the stage limit goes out a few layers at a time, each group staged in
// the window of slots the last one used; layers recorded in either order, then decode steps.
TEST(TraceStacks, APrefillWrittenAFewLayersAtATimeKeepsEveryRow) {
  constexpr int kLayers = 6;
  constexpr std::int64_t kPrefill = 16, kDecode = 3;
  // Committed every 2 steps, the first decode step's rows find the last group's prefill rows
  // staged: the writer writes those out first (TapStack::suits_staging).
  for (const int commit_every : {1, 2})
  for (const bool descending : {false, true}) {
    const std::string what = std::string(descending ? "layers descending" : "layers ascending") +
                             ", commit every " + std::to_string(commit_every);
    TempDir dir;
    const std::string path = dir.file("prefill.h5");
    WriterOptions options;
    options.stage_limit_bytes = 2 * kPrefill * kWidth * sizeof(float);  // two layers' prefill rows
    options.commit_every = commit_every;
    {
      TraceWriter w(path, sample_metadata(), options);
      const auto record_step = [&](std::int64_t first, std::int64_t n) {
        for (int i = 0; i < kLayers; ++i) {
          const int layer = descending ? kLayers - 1 - i : i;
          std::vector<float> rows;
          for (std::int64_t p = first; p < first + n; ++p) {
            const std::vector<float> row = test::tap_row(5, layer, p, kWidth);
            rows.insert(rows.end(), row.begin(), row.end());
          }
          w.record("attn_q", layer, first, n, {kWidth}, rows.data());
        }
        w.end_step();
      };
      record_step(0, kPrefill);
      for (std::int64_t p = kPrefill; p < kPrefill + kDecode; ++p) record_step(p, 1);
      w.close();
    }
    const TraceReader r(path);
    for (int layer = 0; layer < kLayers; ++layer) {
      const TapRows rows = r.read(r.tap("attn_q", layer));
      ASSERT_EQ(rows.size(), static_cast<std::size_t>(kPrefill + kDecode)) << what;
      for (std::int64_t p = 0; p < kPrefill + kDecode; ++p) {
        const std::vector<float> expected = test::tap_row(5, layer, p, kWidth);
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), rows.row(static_cast<std::size_t>(p))))
            << what << ", layer " << layer << ", position " << p;
      }
    }
  }
}

// A name recorded with two row shapes (here, every other layer a different width): one stack
// per shape, the second named "<name>#2".
TEST(TraceStacks, ASecondRowShapeGetsItsOwnStack) {
  TempDir dir;
  const std::string path = dir.file("shapes.h5");
  {
    TraceWriter w(path, sample_metadata());
    for (int l = 0; l < 4; ++l) {
      const std::int64_t width = l % 2 == 0 ? 8 : 12;
      const std::vector<float> row = test::tap_row(5, l, 0, width);
      w.record("ffn_gate", l, 0, 1, {width}, row.data());
    }
    w.end_step();
    w.close();
  }
  EXPECT_EQ(read_int_array_attr(path, "/taps/ffn_gate", "layers"),
            (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(read_int_array_attr(path, "/taps/ffn_gate#2", "layers"),
            (std::vector<std::int64_t>{1, 3}));
  const TraceReader r(path);
  for (int l = 0; l < 4; ++l) {
    const std::int64_t width = l % 2 == 0 ? 8 : 12;
    EXPECT_EQ(r.tap("ffn_gate", l).row_shape, std::vector<std::int64_t>{width});
    EXPECT_EQ(test::all_values(r, "ffn_gate", l), test::tap_row(5, l, 0, width));
  }
}

}  // namespace
}  // namespace tapdiff

namespace tapdiff {
namespace {

// The bytes a dataset occupies in the file, read with plain HDF5.
hsize_t raw_storage_size(const std::string& file, const std::string& dataset) {
  const hid_t f = test::open_raw(file, H5F_ACC_RDONLY);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const hsize_t bytes = H5Dget_storage_size(d);
  H5Dclose(d);
  H5Fclose(f);
  return bytes;
}

// attn.probs-shaped rows ([heads, keys]): position p's row holds values at keys 0..p and +0.0
// after, except two rows that end in -0.0 or NaN. Written as a prompt of 100 positions (in one
// record, or in records of 40 that split the batch's tiles of 64 positions) then one position a
// step, through staging, straight to the file (a stage limit below one record) and compressed,
// every row reads back bit for bit, and the uncompressed file holds about the keys the positions
// see, not whole rows.
TEST(TraceStacks, AttentionRowsAreStoredUpToTheirLastNonzeroBlock) {
  constexpr std::int64_t kHeads = 3, kKeys = 300, kPositions = 180, kPrompt = 100;
  auto row_at = [&](int layer, std::int64_t p) {
    std::vector<float> row(kHeads * kKeys, 0.0f);
    const std::vector<float> values = test::tap_row(7, layer, p, kHeads * (p + 1));
    for (std::int64_t h = 0; h < kHeads; ++h)
      for (std::int64_t k = 0; k <= p; ++k) row[std::size_t(h * kKeys + k)] = values[std::size_t(h * (p + 1) + k)];
    if (p == 120) row[std::size_t(kKeys - 1)] = -0.0f;                 // kept: not +0.0
    if (p == 150) row[std::size_t(2 * kKeys - 1)] = std::nanf("");  // kept
    return row;
  };
  struct Variant {
    const char* what;
    std::size_t stage_limit;
    bool compress;
    std::int64_t prompt_record;  // rows a record of the prompt holds
  };
  for (const Variant& v : {Variant{"staged", 256u << 20, false, kPrompt}, Variant{"direct", 1, false, kPrompt},
                           Variant{"prompt in records of 40", 256u << 20, false, 40},
                           Variant{"gzip at close", 256u << 20, true, 40}}) {
    TempDir dir;
    const std::string path = dir.file("probs.h5");
    WriterOptions options;
    options.stage_limit_bytes = v.stage_limit;
    options.compress = v.compress;
    TraceMetadata metadata = sample_metadata();
    metadata.prompt_length = kPrompt;
    {
      TraceWriter w(path, metadata, options);
      for (std::int64_t first = 0; first < kPrompt; first += v.prompt_record) {
        const std::int64_t n = std::min(v.prompt_record, kPrompt - first);
        for (int layer = 0; layer < 2; ++layer) {
          std::vector<float> rows;
          for (std::int64_t p = first; p < first + n; ++p) {
            const std::vector<float> row = row_at(layer, p);
            rows.insert(rows.end(), row.begin(), row.end());
          }
          w.record("attn.probs", layer, first, n, {kHeads, kKeys}, rows.data());
        }
        w.end_step();
      }
      for (std::int64_t p = kPrompt; p < kPositions; ++p) {
        for (int layer = 0; layer < 2; ++layer)
          w.record("attn.probs", layer, p, 1, {kHeads, kKeys}, row_at(layer, p).data());
        w.end_step();
      }
      w.close();
    }
    const TraceReader r(path);
    for (int layer = 0; layer < 2; ++layer) {
      const TapInfo& tap = r.tap("attn.probs", layer);
      EXPECT_EQ(tap.batch_rows, kPrompt) << v.what << ": the prompt's rows are in the stack's batch";
      const TapRows rows = r.read(tap);
      ASSERT_EQ(rows.size(), std::size_t(kPositions)) << v.what;
      for (std::int64_t p = 0; p < kPositions; ++p) {
        const std::vector<float> want = row_at(layer, p);
        ASSERT_EQ(0, std::memcmp(want.data(), rows.row(std::size_t(p)), want.size() * sizeof(float)))
            << v.what << ", layer " << layer << ", position " << p;
      }
    }
    if (!v.compress) {
      const double dense = 2.0 * kPositions * kHeads * kKeys * sizeof(float);
      EXPECT_LT(double(raw_storage_size(path, "/taps/attn.probs/data") +
                       raw_storage_size(path, "/taps/attn.probs/batch")),
                0.5 * dense)
          << v.what;
    }
  }
}

}  // namespace
}  // namespace tapdiff
