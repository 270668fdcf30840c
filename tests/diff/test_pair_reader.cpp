// PairReader (diff/pair_reader.hpp): every row of every pair arrives once, a pair's rows in
// increasing positions, whatever the batch size and through both ways of reading (a stack's
// slots in one read, a tap alone).
#include <gtest/gtest.h>

#include <map>

#include "diff/pair_reader.hpp"
#include "support/temp_dir.hpp"
#include "support/test_values.hpp"
#include "trace_test_util.hpp"

namespace tapdiff::diff {
namespace {

constexpr int kLayers = 6;
constexpr std::int64_t kSteps = 20, kWidth = 24, kVocab = 50;

// Trace `which` (0 or 1): attn_q at every layer and step; kv.k likewise but, in trace 1, layer
// 3 only from position 5 on (other rows than its stack's other slots); ffn_up at every layer
// in trace 0 and only at layer 2 in trace 1 (a tap alone in its stack); output every step.
void write_trace(const std::string& path, int which) {
  TraceWriter w(path, test::sample_metadata());
  const float shift = which == 0 ? 0.0f : 0.5f;
  auto record = [&](const char* name, int tap, int layer, std::int64_t p, std::int64_t width) {
    std::vector<float> row = test::tap_row(tap, layer, p, width);
    for (float& v : row) v += shift;
    w.record(name, layer, p, 1, {width}, row.data());
  };
  for (std::int64_t p = 0; p < kSteps; ++p) {
    for (int l = 0; l < kLayers; ++l) {
      record("attn_q", 1, l, p, kWidth);
      if (which == 0 || l != 3 || p >= 5) record("kv.k", 2, l, p, kWidth);
      if (which == 0 || l == 2) record("ffn_up", 3, l, p, 2 * kWidth);
    }
    record("output", 4, -1, p, kVocab);
    w.end_step();
  }
  w.close();
}

// Each pair's rows as the reader delivers them: (positions, values) of a, then of b.
struct Delivered {
  std::vector<std::int64_t> positions_a, positions_b;
  std::vector<float> a, b;
  int parts = 0;
};

std::vector<Delivered> read_all(const TraceReader& a, const TraceReader& b, const std::vector<TapPair>& pairs,
                                std::int64_t last_position, std::int64_t batch_bytes) {
  std::vector<Delivered> out(pairs.size());
  PairReader reader(a, b, pairs, last_position, batch_bytes);
  while (const PairRows* rows = reader.next()) {
    Delivered& d = out.at(rows->pair);
    ++d.parts;
    if (!d.positions_a.empty() && !rows->positions_a.empty()) {
      EXPECT_LT(d.positions_a.back(), rows->positions_a.front());
    }
    for (std::size_t i = 0; i < rows->positions_a.size(); ++i) {
      d.positions_a.push_back(rows->positions_a[i]);
      d.a.insert(d.a.end(), rows->a + i * rows->stride_a, rows->a + i * rows->stride_a + rows->row_size);
    }
    for (std::size_t i = 0; i < rows->positions_b.size(); ++i) {
      d.positions_b.push_back(rows->positions_b[i]);
      d.b.insert(d.b.end(), rows->b + i * rows->stride_b, rows->b + i * rows->stride_b + rows->row_size);
    }
  }
  return out;
}

TEST(PairReader, EveryRowOfEveryPairOnceInPositionOrderWhateverTheBatch) {
  test::TempDir dir;
  write_trace(dir.file("a.h5"), 0);
  write_trace(dir.file("b.h5"), 1);
  const TraceReader a(dir.file("a.h5"));
  const TraceReader b(dir.file("b.h5"));
  std::vector<TapPair> pairs;  // stack by stack, as diff reads them
  for (const char* name : {"output", "attn_q", "ffn_up", "kv.k"})
    for (const TapInfo& t : a.taps())
      if (t.name == name && b.find(t.name, t.layer)) pairs.emplace_back(&t, b.find(t.name, t.layer));
  ASSERT_EQ(pairs.size(), 1u + kLayers + 1u + kLayers);

  for (const std::int64_t last : {kSteps - 1, std::int64_t{12}}) {
    for (const std::int64_t batch_bytes : {std::int64_t{1}, std::int64_t{3000}, std::int64_t{1} << 20}) {
      SCOPED_TRACE("last position " + std::to_string(last) + ", batches of " + std::to_string(batch_bytes) + " bytes");
      const std::vector<Delivered> got = read_all(a, b, pairs, last, batch_bytes);
      for (std::size_t k = 0; k < pairs.size(); ++k) {
        const auto& [ta, tb] = pairs[k];
        SCOPED_TRACE(ta->full_name);
        const TapRows ra = a.read(*ta, 0, last), rb = b.read(*tb, 0, last);
        EXPECT_EQ(got[k].positions_a, ra.positions);
        EXPECT_EQ(got[k].positions_b, rb.positions);
        EXPECT_EQ(got[k].a, ra.values);
        EXPECT_EQ(got[k].b, rb.values);
        // One position a batch, or every pair whole in one.
        if (batch_bytes == 1) {
          EXPECT_EQ(got[k].parts, std::int64_t(ra.positions.size()));
        } else if (batch_bytes == std::int64_t{1} << 20) {
          EXPECT_EQ(got[k].parts, 1);
        }
      }
    }
  }
}

// A prompt recorded in one step goes to each stack's slot-major `batch`: read as a stack, a few
// positions of every slot at a time, each of its chunks would be read again for every few
// positions. Where both traces batched their prompt its rows come pair by pair, whole batches of
// one pair before the next. Where trace 1 recorded its prompt a row a step (no batch, as the
// reference does), trace 0's prompt comes pair by pair and trace 1's as a stack (each of its
// chunks holds every slot), as many positions at a time as trace 0's batch chunks hold. A prompt
// whose chunks a few reads of the stack hold comes as a stack, as the decode rows after it do.
TEST(PairReader, ThePromptsBatchedRowsComePairByPair) {
  constexpr std::int64_t kPrompt = 40, kDecode = 4;
  struct Variant {
    const char* what;
    bool both_batched;
    std::int64_t read_positions;  // of every pair in both traces, a read (diff's batch_bytes)
  };
  for (const Variant& v : {Variant{"both batched: ", true, 2}, Variant{"trace 1 a row a step: ", false, 2},
                           Variant{"a prompt a few reads hold: ", true, kPrompt}}) {
    const bool both_batched = v.both_batched;
    const bool pair_by_pair = v.read_positions * PairReader::kChunkRereads < kPrompt;
    test::TempDir dir;
    TraceMetadata metadata = test::sample_metadata();
    metadata.prompt_length = kPrompt;
    metadata.tokens.assign(std::size_t(kPrompt), 7);
    for (const int which : {0, 1}) {
      TraceWriter w(dir.file(which == 0 ? "a.h5" : "b.h5"), metadata);
      const auto step = [&](std::int64_t first, std::int64_t n) {
        for (int l = 0; l < kLayers; ++l) {
          std::vector<float> rows;
          for (std::int64_t p = first; p < first + n; ++p) {
            const std::vector<float> row = test::tap_row(1, l, p, kWidth);
            rows.insert(rows.end(), row.begin(), row.end());
          }
          w.record("attn_q", l, first, n, {kWidth}, rows.data());
        }
        w.end_step();
      };
      if (which == 0 || both_batched) {
        step(0, kPrompt);
      } else {
        for (std::int64_t p = 0; p < kPrompt; ++p) step(p, 1);
      }
      for (std::int64_t p = kPrompt; p < kPrompt + kDecode; ++p) step(p, 1);
      w.close();
    }
    const TraceReader a(dir.file("a.h5"));
    const TraceReader b(dir.file("b.h5"));
    ASSERT_EQ(a.tap("attn_q", 0).batch_rows, kPrompt);
    ASSERT_EQ(a.tap("attn_q", 0).batch_chunk_rows, kPrompt);  // a chunk holds a slot's whole prompt
    ASSERT_EQ(b.tap("attn_q", 0).batch_rows, both_batched ? kPrompt : 0);
    std::vector<TapPair> pairs;
    for (int l = 0; l < kLayers; ++l) pairs.emplace_back(&a.tap("attn_q", l), &b.tap("attn_q", l));

    // Two positions of every pair a batch as a stack; more of one pair alone.
    const std::int64_t batch_bytes = v.read_positions * 2 * kLayers * kWidth * std::int64_t(sizeof(float));
    std::vector<std::pair<std::size_t, std::int64_t>> order;  // (pair, first position) of each part
    std::map<std::size_t, std::vector<std::int64_t>> positions;
    PairReader reader(a, b, pairs, kPrompt + kDecode - 1, batch_bytes);
    const std::string what = v.what;
    while (const PairRows* rows = reader.next()) {
      ASSERT_FALSE(rows->positions_a.empty());
      order.emplace_back(rows->pair, rows->positions_a.front());
      const bool prompt = pair_by_pair && rows->positions_a.front() < kPrompt;
      EXPECT_EQ(rows->stride_a, std::size_t(prompt ? kWidth : kLayers * kWidth)) << what << rows->pair;
      EXPECT_EQ(rows->stride_b, std::size_t(prompt && both_batched ? kWidth : kLayers * kWidth)) << what << rows->pair;
      for (std::size_t i = 0; i < rows->positions_a.size(); ++i) {
        const std::int64_t p = rows->positions_a[i];
        positions[rows->pair].push_back(p);
        const std::vector<float> want = test::tap_row(1, int(rows->pair), p, kWidth);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), rows->a + i * rows->stride_a)) << what << rows->pair << " @ " << p;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), rows->b + i * rows->stride_b)) << what << rows->pair << " @ " << p;
      }
    }
    for (std::size_t k = 0; k < pairs.size(); ++k) {
      std::vector<std::int64_t> all(kPrompt + kDecode);
      for (std::size_t p = 0; p < all.size(); ++p) all[p] = std::int64_t(p);
      EXPECT_EQ(positions[k], all) << what << "pair " << k;
    }
    std::size_t prompt_parts = 0, last_pair = 0;
    for (const auto& [pair, first] : order) {
      if (first >= kPrompt) continue;
      EXPECT_GE(pair, last_pair) << what << "a part of pair " << pair << "'s prompt after pair " << last_pair << "'s";
      last_pair = pair;
      ++prompt_parts;
    }
    if (both_batched && pair_by_pair) {
      EXPECT_LT(prompt_parts, std::size_t(kLayers) * kPrompt / 2) << what << "the prompt's rows came a few positions at a time";
    } else {
      EXPECT_EQ(prompt_parts, std::size_t(kLayers)) << what << "the prompt came in more than one read of a chunk's rows";
    }
  }
}

TEST(PairReader, NoPairsNoRows) {
  test::TempDir dir;
  write_trace(dir.file("a.h5"), 0);
  const TraceReader a(dir.file("a.h5"));
  PairReader reader(a, a, {}, kSteps - 1);
  EXPECT_EQ(reader.next(), nullptr);
}

}  // namespace
}  // namespace tapdiff::diff
