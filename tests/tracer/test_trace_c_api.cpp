// The C ABI: statuses and messages, the handle lifecycle, and the C example engine whose
// trace the C++ reader must accept (complete catalogue, attn.probs layout, tokens).
#include <gtest/gtest.h>

#include <cmath>

#include "support/child_process.hpp"
#include "support/temp_dir.hpp"
#include "tapdiff/trace.h"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {
namespace {

using test::TempDir;

tapdiff_trace* open_or_fail(const std::string& path, tapdiff_trace_config* cfg = nullptr) {
  tapdiff_trace_config defaults;
  tapdiff_trace_config_init(&defaults);
  tapdiff_trace* t = nullptr;
  const tapdiff_status s = tapdiff_trace_open(path.c_str(), cfg ? cfg : &defaults, &t);
  EXPECT_EQ(s, TAPDIFF_OK) << tapdiff_last_error();
  return t;
}

TEST(TraceCApi, WritesWhatTheReaderReads) {
  TempDir dir;
  const std::string path = dir.file("c.h5");
  tapdiff_trace_config cfg;
  tapdiff_trace_config_init(&cfg);
  const int32_t prompt[] = {7, 8};
  const tapdiff_hparam hp[] = {{"n_layer", TAPDIFF_HPARAM_INT, 2, 0.0, nullptr},
                               {"eps", TAPDIFF_HPARAM_FLOAT, 0, 1e-5, nullptr},
                               {"arch", TAPDIFF_HPARAM_STRING, 0, 0.0, "qwen2"}};
  cfg.producer = "engine-cuda";
  cfg.git_commit = "feedface";
  cfg.precision = "f16";
  cfg.fault = "bias-dropped";
  cfg.prompt_length = 2;
  cfg.tokens = prompt;
  cfg.n_tokens = 2;
  cfg.hparams = hp;
  cfg.n_hparams = 3;
  cfg.dims.n_layer = 2;
  cfg.filter_names = "blk.*.attn_*";
  cfg.filter_layers = "1";
  tapdiff_trace* t = open_or_fail(path, &cfg);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(tapdiff_trace_enabled(t, "attn_q", 1, 0), 1);
  EXPECT_EQ(tapdiff_trace_enabled(t, "attn_q", 0, 0), 0);
  EXPECT_EQ(tapdiff_trace_enabled(t, "ffn_up", 1, 0), 0);
  EXPECT_EQ(tapdiff_trace_enabled_range(t, "attn_q", 1, 0, 2), 1);
  const float rows[2][3] = {{1, 2, 3}, {4, 5, 6}};
  const int64_t shape[] = {3};
  EXPECT_EQ(tapdiff_trace_record(t, "attn_q", 1, 0, 2, shape, 1, &rows[0][0]), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_record(t, "attn_q", 0, 0, 2, shape, 1, &rows[0][0]), TAPDIFF_OK)
      << "a disabled tap is accepted and dropped";
  EXPECT_EQ(tapdiff_trace_end_step(t), TAPDIFF_OK);
  const int32_t next = 9;
  EXPECT_EQ(tapdiff_trace_append_tokens(t, &next, 1), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_record(t, "attn_q", 1, 2, 1, shape, 1, rows[1]), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_end_step(t), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_close(t), TAPDIFF_OK) << tapdiff_last_error();

  const TraceReader r(path);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.metadata().producer, Producer::engine_cuda);
  EXPECT_EQ(r.metadata().precision, "f16");
  EXPECT_EQ(r.metadata().fault, "bias-dropped");
  EXPECT_EQ(r.metadata().tokens, (std::vector<std::int32_t>{7, 8, 9}));
  EXPECT_EQ(std::get<std::string>(r.metadata().hparams.at("arch")), "qwen2");
  EXPECT_EQ(std::get<double>(r.metadata().hparams.at("eps")), 1e-5);
  ASSERT_TRUE(r.metadata().dims.has_value());
  EXPECT_EQ(r.metadata().dims->n_layer, 2);
  EXPECT_EQ(r.filter().layers, "1");
  ASSERT_EQ(r.taps().size(), 1u);
  const TapRows got = r.read(r.tap("attn_q", 1));
  EXPECT_EQ(got.positions, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(got.values, (std::vector<float>{1, 2, 3, 4, 5, 6, 4, 5, 6}));
}

TEST(TraceCApi, DeclaresALockstepRun) {
  TempDir dir;
  for (const char* source : {"ref.h5", static_cast<const char*>(nullptr)}) {
    const std::string path = dir.file(source ? "lockstep.h5" : "normal.h5");
    tapdiff_trace_config cfg;
    tapdiff_trace_config_init(&cfg);
    cfg.lockstep_source = source;
    tapdiff_trace* t = open_or_fail(path, &cfg);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(tapdiff_trace_close(t), TAPDIFF_OK) << tapdiff_last_error();
    EXPECT_EQ(TraceReader(path).metadata().lockstep_source, source ? source : "");
  }
}

TEST(TraceCApi, DeclaresALayoutTheReaderAligns) {
  TempDir dir;
  const std::string path = dir.file("layout.h5");
  tapdiff_trace_config cfg;
  tapdiff_trace_config_init(&cfg);
  const int32_t prompt[] = {7};
  cfg.prompt_length = 1;
  cfg.tokens = prompt;
  cfg.n_tokens = 1;
  cfg.dims = {1, 6, 2, 1, 3, 4, 5, 1};  // n_layer n_embd n_head n_head_kv head_dim n_ff n_vocab n_ctx
  const tapdiff_layout layouts[] = {{"attn_q", "axes=head_dim,n_head"}, {"output", "pad=n_vocab:8"}};
  cfg.layouts = layouts;
  cfg.n_layouts = 2;
  cfg.filter_names = "blk.*.attn_q,output";
  tapdiff_trace* t = open_or_fail(path, &cfg);
  ASSERT_NE(t, nullptr);
  const float q[3][2] = {{0, 3}, {1, 4}, {2, 5}};  // (head_dim, n_head): head h, dim d = h * 3 + d
  const int64_t q_shape[] = {3, 2};
  EXPECT_EQ(tapdiff_trace_record(t, "attn_q", 0, 0, 1, q_shape, 2, &q[0][0]), TAPDIFF_OK) << tapdiff_last_error();
  const float logits[8] = {1, 2, 3, 4, 5, -1, -1, -1};
  const int64_t logits_shape[] = {8};
  EXPECT_EQ(tapdiff_trace_record(t, "output", -1, 0, 1, logits_shape, 1, logits), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_end_step(t), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_close(t), TAPDIFF_OK) << tapdiff_last_error();

  const TraceReader r(path);
  EXPECT_EQ(r.read(r.tap("attn_q", 0)).values, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(r.read(r.tap("output", -1)).values, (std::vector<float>{1, 2, 3, 4, 5}));

  const tapdiff_layout bad[] = {{"attn_q", "axes=n_vocab"}};
  cfg.layouts = bad;
  cfg.n_layouts = 1;
  tapdiff_trace* refused = nullptr;
  EXPECT_EQ(tapdiff_trace_open(dir.file("bad.h5").c_str(), &cfg, &refused), TAPDIFF_ERR_TRACE);
  EXPECT_EQ(refused, nullptr);
  EXPECT_NE(std::string(tapdiff_last_error()).find("layouts[\"attn_q\"]"), std::string::npos) << tapdiff_last_error();
}

// A longer run's attn.probs read as a shorter run holds them: its first keys, whatever the
// stored layout; nothing else, and nothing at or past the trace's own context.
TEST(TraceCApi, ReadsTheContextAsAShorterRunHoldsIt) {
  TempDir dir;
  for (const char* layout : {"", "axes=n_ctx,n_head"}) {
    SCOPED_TRACE(layout);
    const std::string path = dir.file(std::string("ctx") + (*layout ? "-axes" : "") + ".h5");
    tapdiff_trace_config cfg;
    tapdiff_trace_config_init(&cfg);
    const int32_t prompt[] = {7, 8};
    cfg.prompt_length = 2;
    cfg.tokens = prompt;
    cfg.n_tokens = 2;
    cfg.dims = {1, 6, 2, 1, 3, 4, 5, 4};  // n_layer n_embd n_head n_head_kv head_dim n_ff n_vocab n_ctx
    const tapdiff_layout declared[] = {{"attn.probs", layout}};
    cfg.layouts = declared;
    cfg.n_layouts = *layout ? 1 : 0;
    cfg.filter_names = "blk.*.attn.probs,blk.*.attn_q";
    tapdiff_trace* t = open_or_fail(path, &cfg);
    ASSERT_NE(t, nullptr);
    // Two positions of [n_head 2, n_ctx 4], head h's key j holding 10 h + j (+ 100 at position 1).
    float probs[2][8];
    for (int p = 0; p < 2; ++p)
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 4; ++j) probs[p][*layout ? j * 2 + h : h * 4 + j] = float(100 * p + 10 * h + j);
    const int64_t shape[] = {2, 4}, stored[] = {4, 2};
    EXPECT_EQ(tapdiff_trace_record(t, "attn.probs", 0, 0, 2, *layout ? stored : shape, 2, &probs[0][0]), TAPDIFF_OK)
        << tapdiff_last_error();
    const float q[2][6] = {};
    const int64_t q_shape[] = {6};
    EXPECT_EQ(tapdiff_trace_record(t, "attn_q", 0, 0, 2, q_shape, 1, &q[0][0]), TAPDIFF_OK);
    EXPECT_EQ(tapdiff_trace_end_step(t), TAPDIFF_OK);
    EXPECT_EQ(tapdiff_trace_close(t), TAPDIFF_OK) << tapdiff_last_error();

    TraceReader r(path);
    EXPECT_TRUE(r.read_context_as(4).empty());
    EXPECT_TRUE(r.read_context_as(9).empty());
    EXPECT_EQ(r.tap("attn.probs", 0).row_shape, (std::vector<std::int64_t>{2, 4}));
    const std::vector<const TapInfo*> cut = r.read_context_as(3);
    ASSERT_EQ(cut.size(), 1u);
    EXPECT_EQ(cut[0]->full_name, "blk.0.attn.probs");
    const TapRows rows = r.read(r.tap("attn.probs", 0));
    EXPECT_EQ(rows.row_shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(rows.values, (std::vector<float>{0, 1, 2, 10, 11, 12, 100, 101, 102, 110, 111, 112}));
    EXPECT_EQ(r.tap("attn_q", 0).row_shape, (std::vector<std::int64_t>{6}));
  }
}

TEST(TraceCApi, ErrorsComeBackAsStatusesWithMessages) {
  TempDir dir;
  tapdiff_trace* t = nullptr;
  tapdiff_trace_config cfg;
  tapdiff_trace_config_init(&cfg);

  EXPECT_EQ(tapdiff_trace_open(nullptr, &cfg, &t), TAPDIFF_ERR_ARGUMENT);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::string(tapdiff_last_error()).find("null"), std::string::npos);

  const std::string nowhere = dir.file("no/such/dir/t.h5");
  EXPECT_EQ(tapdiff_trace_open(nowhere.c_str(), &cfg, &t), TAPDIFF_ERR_TRACE);
  EXPECT_NE(std::string(tapdiff_last_error()).find(nowhere), std::string::npos)
      << tapdiff_last_error();

  cfg.producer = "gpu";
  EXPECT_EQ(tapdiff_trace_open(dir.file("p.h5").c_str(), &cfg, &t), TAPDIFF_ERR_ARGUMENT);
  EXPECT_NE(std::string(tapdiff_last_error()).find("producer"), std::string::npos);
  tapdiff_trace_config_init(&cfg);
  cfg.filter_layers = "a-b";
  EXPECT_EQ(tapdiff_trace_open(dir.file("f.h5").c_str(), &cfg, &t), TAPDIFF_ERR_ARGUMENT);
  EXPECT_NE(std::string(tapdiff_last_error()).find("layers"), std::string::npos);

  const std::string path = dir.file("e.h5");
  t = open_or_fail(path);
  ASSERT_NE(t, nullptr);
  const float row[4] = {1, 2, 3, 4};
  const int64_t shape4[] = {4};
  const int64_t shape2x2[] = {2, 2};
  EXPECT_EQ(tapdiff_trace_record(t, "attn_v", 0, 0, 1, shape4, 1, row), TAPDIFF_OK);
  EXPECT_EQ(tapdiff_trace_record(t, "attn_v", 0, 1, 1, shape2x2, 2, row), TAPDIFF_ERR_ARGUMENT);
  EXPECT_NE(std::string(tapdiff_last_error()).find("/taps/attn_v: layer 0: row shape [2, 2] differs"),
            std::string::npos)
      << tapdiff_last_error();
  EXPECT_EQ(tapdiff_trace_record(t, "attn_v", 0, 1, 1, shape4, 9, row), TAPDIFF_ERR_ARGUMENT);
  EXPECT_EQ(tapdiff_trace_record(t, nullptr, 0, 1, 1, shape4, 1, row), TAPDIFF_ERR_ARGUMENT);
  EXPECT_EQ(tapdiff_trace_record(t, "attn_v", 0, 1, 1, shape4, 1, nullptr), TAPDIFF_ERR_ARGUMENT);
  EXPECT_EQ(tapdiff_trace_end_step(nullptr), TAPDIFF_ERR_ARGUMENT);
  EXPECT_EQ(tapdiff_trace_enabled(nullptr, "attn_v", 0, 0), 0);
  EXPECT_EQ(tapdiff_trace_end_step(t), TAPDIFF_OK) << "rejected records leave the handle usable";
  tapdiff_trace_abandon(t);

  const TraceReader r(path);
  EXPECT_FALSE(r.complete()) << "abandon leaves the trace incomplete";
  EXPECT_EQ(r.tap("attn_v", 0).n_rows, 1);
  EXPECT_STREQ(tapdiff_status_name(TAPDIFF_ERR_TRACE), "trace error");
}

TEST(CExample, ItsTraceHoldsTheWholeCatalogue) {
  TempDir dir;
  const std::string path = dir.file("c_engine.h5");
  std::string output;
  ASSERT_EQ(test::run_program({C_ENGINE_TAP, path}, &output), 0) << output;

  const TraceReader r(path);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.metadata().producer, Producer::external);
  EXPECT_EQ(r.metadata().prompt_length, 3);
  ASSERT_EQ(r.metadata().tokens.size(), 7u);
  EXPECT_EQ(r.metadata().tokens[0], 5);
  ASSERT_TRUE(r.metadata().dims.has_value());
  const TapDims dims = *r.metadata().dims;
  const CatalogueReport report = check_catalogue(r.emitted_taps(), dims);
  EXPECT_TRUE(report.ok()) << report.describe();

  // Prefill wrote rows 0..2 in one record, decode one row per step.
  const TapRows embd = r.read(r.tap("token_embd", -1));
  ASSERT_EQ(embd.positions, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  for (std::size_t p = 0; p < embd.size(); ++p) {
    EXPECT_EQ(embd.row(p)[1], static_cast<float>(r.metadata().tokens[p]) + 1.0f / 8.0f);
  }
  // Logits: the last prompt position, then every generated one.
  EXPECT_EQ(r.tap("output", -1).positions(), (std::vector<std::int64_t>{2, 3, 4, 5, 6}));

  // attn.probs: [n_head, n_ctx]; each head sums to 1 over 0..p and is 0 after p.
  const TapRows probs = r.read(r.tap("attn.probs", 1));
  ASSERT_EQ(probs.row_shape, (std::vector<std::int64_t>{dims.n_head, dims.n_ctx}));
  for (std::size_t i = 0; i < probs.size(); ++i) {
    const std::int64_t p = probs.positions[i];
    for (std::int64_t h = 0; h < dims.n_head; ++h) {
      const float* w = probs.row(i) + h * dims.n_ctx;
      double visible = 0;
      for (std::int64_t j = 0; j <= p; ++j) visible += w[j];
      EXPECT_NEAR(visible, 1.0, 1e-5) << "position " << p << " head " << h;
      for (std::int64_t j = p + 1; j < dims.n_ctx; ++j) EXPECT_EQ(w[j], 0.0f);
    }
  }
}

TEST(CExample, HonoursAFilter) {
  TempDir dir;
  const std::string path = dir.file("filtered.h5");
  std::string output;
  ASSERT_EQ(test::run_program({C_ENGINE_TAP, path, "!*.attn.probs,!blk.1.*"}, &output), 0)
      << output;
  const TraceReader r(path);
  EXPECT_EQ(r.find("attn.probs", 0), nullptr);
  EXPECT_EQ(r.find("attn_q", 1), nullptr);
  EXPECT_NE(r.find("attn_q", 0), nullptr);
  const CatalogueReport report =
      check_catalogue(r.emitted_taps(), *r.metadata().dims, TapFilter::parse(r.filter()));
  EXPECT_TRUE(report.ok()) << report.describe();
}

// The trace is self-describing: h5dump (hdf5-tools) reads its header with no tapdiff code.
TEST(TraceFile, H5dumpReadsTheHeader) {
  const std::string h5dump = H5DUMP_PROGRAM;
  // scripts/bootstrap.sh installs hdf5-tools: a missing h5dump is a broken setup, not a skip.
  ASSERT_FALSE(h5dump.empty()) << "h5dump not found: install hdf5-tools (scripts/bootstrap.sh does)";
  TempDir dir;
  const std::string path = dir.file("dump.h5");
  std::string output;
  ASSERT_EQ(test::run_program({C_ENGINE_TAP, path}, &output), 0) << output;
  ASSERT_EQ(test::run_program({h5dump, "-H", path}, &output), 0) << output;
  EXPECT_NE(output.find("GROUP \"attn.probs\""), std::string::npos);
  EXPECT_NE(output.find("ATTRIBUTE \"layers\""), std::string::npos);
  EXPECT_NE(output.find("ATTRIBUTE \"format\""), std::string::npos);
  EXPECT_NE(output.find("DATASET \"committed\""), std::string::npos);
  ASSERT_EQ(test::run_program({h5dump, "-a", "/format_version", path}, &output), 0) << output;
  EXPECT_NE(output.find("\"3.0\""), std::string::npos) << output;
}

}  // namespace
}  // namespace tapdiff
