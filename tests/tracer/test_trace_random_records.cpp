// Randomized round trips through the public API only (docs/trace-schema.md): seeded record
// sequences (a prefill of many positions, then decode steps of one, layers and positions
// sometimes skipped, layers in either order) under varied WriterOptions, read back bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <utility>

#include "support/temp_dir.hpp"
#include "tapdiff/attn_summary.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"
#include "trace_test_util.hpp"

namespace tapdiff {
namespace {

using test::TempDir;

struct TapSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t row_size() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
  }
};

struct Record {
  int tap = 0;  // index into Plan::taps
  int layer = 0;
  std::int64_t first_position = 0;
  std::int64_t n_rows = 0;
  std::vector<float> rows;
};

struct Step {
  std::vector<Record> records;
  std::vector<std::int32_t> tokens;  // appended before end_step()
};

struct Plan {
  std::uint32_t seed = 0;
  int layers = 0;
  std::vector<TapSpec> taps;  // the last is attn.probs, [n_head, n_keys]
  WriterOptions options;
  std::vector<std::int32_t> prompt;
  std::vector<Step> steps;  // steps[0] is the prefill
};

std::string describe(const Plan& plan) {
  std::ostringstream s;
  s << "seed " << plan.seed << ", " << plan.layers << " layers, taps";
  for (const TapSpec& t : plan.taps) s << " " << t.name << shape_string(t.shape);
  s << ", commit_every " << plan.options.commit_every << ", stage_limit_bytes "
    << plan.options.stage_limit_bytes << ", compress " << plan.options.compress << ", prefill "
    << plan.prompt.size() << ", " << plan.steps.size() - 1 << " decode steps";
  return s.str();
}

// Mostly ordinary values; one in eight an arbitrary bit pattern (NaN payloads, infinities,
// subnormals, -0.0), which must survive bit for bit too.
float random_value(std::mt19937& rng) {
  if (rng() % 8 == 0) {
    const std::uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  return std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
}

std::vector<float> random_row(std::mt19937& rng, const TapSpec& tap) {
  std::vector<float> row(static_cast<std::size_t>(tap.row_size()));
  if (tap.name != "attn.probs") {
    for (float& v : row) v = random_value(rng);
    return row;
  }
  // Zero past the keys the row uses, as attention probabilities: the writer may leave those
  // blocks unwritten, so -0.0 there (or a row of only +0.0) tests that it tells them apart.
  const std::int64_t heads = tap.shape[0], keys = tap.shape[1];
  const std::int64_t used = std::uniform_int_distribution<std::int64_t>(0, keys)(rng);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t k = 0; k < used; ++k) row[static_cast<std::size_t>(h * keys + k)] = random_value(rng);
  if (used < keys && rng() % 4 == 0) {
    const std::int64_t h = std::uniform_int_distribution<std::int64_t>(0, heads - 1)(rng);
    const std::int64_t k = std::uniform_int_distribution<std::int64_t>(used, keys - 1)(rng);
    row[static_cast<std::size_t>(h * keys + k)] = -0.0f;
  }
  if (rng() % 8 == 0) row.back() = -0.0f;  // in the very last block
  return row;
}

Plan make_plan(std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  Plan plan;
  plan.seed = seed;
  plan.layers = static_cast<int>(uniform(1, 8));
  const char* const names[] = {"attn_q", "ffn_up", "l_out", "attn_norm"};
  const std::int64_t n_narrow = uniform(0, 3);  // plus attn.probs: 1..4 tap names
  for (std::int64_t i = 0; i < n_narrow; ++i) plan.taps.push_back({names[i], {uniform(1, 16)}});
  plan.taps.push_back({"attn.probs", {uniform(1, 4), uniform(65, 200)}});

  const int commit_every[] = {1, 2, 3, 7};
  plan.options.commit_every = commit_every[uniform(0, 3)];
  switch (uniform(0, 2)) {
    case 0: plan.options.stage_limit_bytes = 1; break;  // every record goes to the file directly
    case 1: {
      const TapSpec& t = plan.taps[static_cast<std::size_t>(uniform(0, std::int64_t(plan.taps.size()) - 1))];
      plan.options.stage_limit_bytes = static_cast<std::size_t>(uniform(1, 4) * t.row_size()) * sizeof(float);
      break;
    }
    default: break;  // the default limit
  }
  plan.options.compress = uniform(0, 3) == 0;

  const std::int64_t prefill = uniform(1, 40);
  for (std::int64_t p = 0; p < prefill; ++p) plan.prompt.push_back(static_cast<std::int32_t>(uniform(0, 32000)));
  const std::int64_t decode_steps = uniform(0, 20);

  // Records of one step in a random order: tap-major or layer-major, layers up or down.
  const auto record_order = [&] {
    const bool layer_major = uniform(0, 1) == 1, descending = uniform(0, 2) == 0;
    std::vector<std::pair<int, int>> order;  // (tap, layer)
    for (int a = 0; a < (layer_major ? plan.layers : int(plan.taps.size())); ++a)
      for (int b = 0; b < (layer_major ? int(plan.taps.size()) : plan.layers); ++b) {
        const int tap = layer_major ? b : a, layer = layer_major ? a : b;
        order.emplace_back(tap, descending ? plan.layers - 1 - layer : layer);
      }
    return order;
  };

  Step prefill_step;
  for (const auto& [tap, layer] : record_order()) {
    Record r{tap, layer, 0, prefill, {}};
    for (std::int64_t p = 0; p < prefill; ++p) {
      const std::vector<float> row = random_row(rng, plan.taps[std::size_t(tap)]);
      r.rows.insert(r.rows.end(), row.begin(), row.end());
    }
    prefill_step.records.push_back(std::move(r));
  }
  plan.steps.push_back(std::move(prefill_step));

  std::int64_t position = prefill;
  for (std::int64_t s = 0; s < decode_steps; ++s) {
    Step step;
    if (uniform(0, 9) == 0) step.tokens.push_back(static_cast<std::int32_t>(uniform(0, 32000)));  // a skipped position
    step.tokens.push_back(static_cast<std::int32_t>(uniform(0, 32000)));
    position += std::int64_t(step.tokens.size()) - 1;
    for (const auto& [tap, layer] : record_order()) {
      if (uniform(0, 6) == 0) continue;  // this tap skips this position
      step.records.push_back({tap, layer, position, 1, random_row(rng, plan.taps[std::size_t(tap)])});
    }
    plan.steps.push_back(std::move(step));
    ++position;
  }
  return plan;
}

// Writes the first n_steps steps of the plan; closes the trace or just drops the writer.
// Returns the writer's committed_steps() just before it went away.
std::int64_t write(const Plan& plan, const std::string& path, std::size_t n_steps, bool close) {
  TraceMetadata metadata = test::sample_metadata();
  metadata.hparams["n_layer"] = std::int64_t{plan.layers};
  metadata.prompt_length = std::int64_t(plan.prompt.size());
  metadata.tokens = plan.prompt;
  TraceWriter w(path, metadata, plan.options);
  for (std::size_t s = 0; s < n_steps; ++s) {
    for (const Record& r : plan.steps[s].records) {
      const TapSpec& t = plan.taps[std::size_t(r.tap)];
      w.record(t.name, r.layer, r.first_position, r.n_rows, RowShape(t.shape), r.rows.data());
    }
    w.append_tokens(plan.steps[s].tokens.data(), plan.steps[s].tokens.size());
    w.end_step();
  }
  if (close) w.close();
  return w.committed_steps();
}

struct ExpectedTap {
  std::vector<std::int64_t> positions;
  std::vector<float> values;  // (positions, row_size)
};

// Asserts the reader holds exactly the rows and tokens of the plan's first n_steps steps: every
// recorded tap at its positions, bit for bit, and for each attn.probs row its summary.
void expect_reads_back(const Plan& plan, const std::string& path, std::size_t n_steps) {
  std::map<std::pair<int, int>, ExpectedTap> expected;  // (tap, layer)
  std::vector<std::int32_t> tokens = plan.prompt;
  for (std::size_t s = 0; s < n_steps; ++s) {
    for (const Record& r : plan.steps[s].records) {
      ExpectedTap& e = expected[{r.tap, r.layer}];
      for (std::int64_t i = 0; i < r.n_rows; ++i) e.positions.push_back(r.first_position + i);
      e.values.insert(e.values.end(), r.rows.begin(), r.rows.end());
    }
    tokens.insert(tokens.end(), plan.steps[s].tokens.begin(), plan.steps[s].tokens.end());
  }

  const TraceReader reader(path);
  EXPECT_EQ(reader.metadata().tokens, tokens);
  std::size_t n_summaries = 0;
  for (const auto& [key, e] : expected) {
    const TapSpec& spec = plan.taps[std::size_t(key.first)];
    const int layer = key.second;
    const TapInfo* tap = reader.find(spec.name, layer);
    ASSERT_NE(tap, nullptr) << spec.name << " layer " << layer;
    EXPECT_EQ(tap->row_shape, spec.shape) << spec.name << " layer " << layer;
    ASSERT_EQ(tap->positions(), e.positions) << spec.name << " layer " << layer;
    const TapRows rows = reader.read(*tap);
    ASSERT_EQ(rows.positions, e.positions) << spec.name << " layer " << layer;
    const std::size_t row_size = std::size_t(spec.row_size());
    for (std::size_t i = 0; i < e.positions.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(e.values.data() + i * row_size, rows.row(i), row_size * sizeof(float)))
          << spec.name << " layer " << layer << " position " << e.positions[i];
    }
    if (spec.name != "attn.probs") continue;
    // The writer derives attn.probs.summary from every attn.probs row (trace_writer.hpp).
    const TapInfo* summary = reader.find("attn.probs.summary", layer);
    ASSERT_NE(summary, nullptr) << "layer " << layer;
    ++n_summaries;
    const TapRows got = reader.read(*summary);
    ASSERT_EQ(got.positions, e.positions) << "attn.probs.summary layer " << layer;
    std::vector<float> want(std::size_t(spec.shape[0] * kAttnSummaryFields));
    for (std::size_t i = 0; i < e.positions.size(); ++i) {
      summarize_attention_row(e.values.data() + i * row_size, spec.shape[0], spec.shape[1], e.positions[i],
                              want.data());
      ASSERT_EQ(0, std::memcmp(want.data(), got.row(i), want.size() * sizeof(float)))
          << "attn.probs.summary layer " << layer << " position " << e.positions[i];
    }
  }
  EXPECT_EQ(reader.taps().size(), expected.size() + n_summaries) << "no tap that was not recorded";
}

TEST(TraceRandomRecords, EveryRecordedRowReadsBackBitForBit) {
  for (std::uint32_t seed = 1; seed <= 160; ++seed) {
    const Plan plan = make_plan(seed);
    SCOPED_TRACE(describe(plan));
    TempDir dir;
    const std::string path = dir.file("random.h5");
    write(plan, path, plan.steps.size(), /*close=*/true);
    const TraceReader reader(path);
    EXPECT_TRUE(reader.complete());
    EXPECT_EQ(reader.committed_steps(), std::int64_t(plan.steps.size()));
    expect_reads_back(plan, path, plan.steps.size());
  }
}

// A writer dropped without close() leaves a complete=0 trace holding exactly the steps it
// committed, every commit_every steps ("Commits: what a reader may trust"): rows written early
// (past the stage limit) of steps not committed must not show.
TEST(TraceRandomRecords, AnUnclosedTraceReadsBackExactlyItsCommittedSteps) {
  for (std::uint32_t seed = 1001; seed <= 1080; ++seed) {
    Plan plan = make_plan(seed);
    // At least one commit (before it there is no trace file, only <path>.partial), and steps
    // left uncommitted where the plan allows.
    for (const int every : {7, 3, 2, 1}) {
      if (std::size_t(every) <= plan.steps.size() && (every <= plan.options.commit_every || every == 2)) {
        plan.options.commit_every = every;
        break;
      }
    }
    const std::size_t every = std::size_t(plan.options.commit_every);
    std::mt19937 rng(seed + 7919);
    const std::size_t n_steps = std::uniform_int_distribution<std::size_t>(every, plan.steps.size())(rng);
    SCOPED_TRACE(describe(plan) + ", dropped after " + std::to_string(n_steps) + " steps");
    TempDir dir;
    const std::string path = dir.file("unclosed.h5");
    const std::int64_t committed = write(plan, path, n_steps, /*close=*/false);
    EXPECT_EQ(committed, std::int64_t(n_steps / every * every));
    const TraceReader reader(path);
    EXPECT_FALSE(reader.complete());
    // At least what the writer guaranteed; whatever it reports, exactly those steps.
    EXPECT_GE(reader.committed_steps(), committed);
    ASSERT_LE(reader.committed_steps(), std::int64_t(n_steps));
    expect_reads_back(plan, path, std::size_t(reader.committed_steps()));
  }
}

}  // namespace
}  // namespace tapdiff
