// A writer in another process: rows are readable after each commit while it runs, a SIGKILL
// leaves complete=0 and every committed step intact, and a file size limit (standing in for
// a full disk) gives a clear error, exit code 2 and a readable trace.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/child_process.hpp"
#include "support/temp_dir.hpp"
#include "support/test_values.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff {
namespace {

using test::ChildProcess;
using test::TempDir;

struct WriterShape {
  int layers = 2;
  int taps = 3;
  int width = 16;
};

std::vector<std::string> writer_args(const std::string& out, const WriterShape& shape,
                                     std::vector<std::string> extra) {
  std::vector<std::string> args = {TRACE_TEST_WRITER,
                                   "--out",
                                   out,
                                   "--layers",
                                   std::to_string(shape.layers),
                                   "--taps",
                                   std::to_string(shape.taps),
                                   "--width",
                                   std::to_string(shape.width)};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Every tap written by trace_test_writer holds positions 0..n-1 with the expected values,
// n >= min_rows; returns the smallest n seen.
std::int64_t check_writer_trace(const TraceReader& r, const WriterShape& shape,
                                std::int64_t min_rows) {
  std::vector<std::string> names;
  for (const TapSpec& spec : tap_catalogue()) {
    if (spec.scope == TapScope::layer && static_cast<int>(names.size()) < shape.taps) {
      names.emplace_back(spec.name);
    }
  }
  std::int64_t fewest = -1;
  auto check_tap = [&](const std::string& name, int tap_index, int layer) {
    const TapInfo* tap = r.find(name, layer);
    if (tap == nullptr) {
      ADD_FAILURE() << "missing " << full_tap_name(name, layer);
      return;
    }
    EXPECT_GE(tap->n_rows, min_rows) << tap->full_name;
    fewest = fewest < 0 ? tap->n_rows : std::min(fewest, tap->n_rows);
    const TapRows rows = r.read(*tap);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(rows.positions[i], static_cast<std::int64_t>(i)) << tap->full_name;
      const std::vector<float> expected =
          test::tap_row(tap_index, layer, static_cast<std::int64_t>(i), shape.width);
      ASSERT_TRUE(std::equal(expected.begin(), expected.end(), rows.row(i)))
          << tap->full_name << " row " << i;
    }
  };
  for (int t = 0; t < shape.taps; ++t) {
    for (int l = 0; l < shape.layers; ++l) check_tap(names[static_cast<std::size_t>(t)], t, l);
  }
  check_tap("output", shape.taps, -1);
  const std::vector<std::int32_t>& tokens = r.metadata().tokens;
  for (std::size_t p = 0; p < tokens.size(); ++p)
    EXPECT_EQ(tokens[p], test::token_at(static_cast<std::int64_t>(p)));
  EXPECT_GE(static_cast<std::int64_t>(tokens.size()), min_rows);
  return fewest;
}

void wait_for(ChildProcess& child, const std::string& wanted) {
  std::string line;
  while (child.read_line(line)) {
    if (line == wanted) return;
  }
  FAIL() << "the writer ended before printing '" << wanted << "'";
}

TEST(TraceStreaming, CommittedStepsAreReadableWhileTheWriterRuns) {
  TempDir dir;
  const std::string path = dir.file("live.h5");
  const WriterShape shape;
  ChildProcess writer(writer_args(path, shape, {"--steps", "6", "--pause-after", "3"}));
  wait_for(writer, "paused");
  {
    const TraceReader live(path);
    EXPECT_FALSE(live.complete());
    EXPECT_EQ(live.committed_steps(), 3);
    EXPECT_EQ(check_writer_trace(live, shape, 3), 3);
  }
  writer.write_line("go");
  wait_for(writer, "closed");
  EXPECT_EQ(writer.wait(), 0);
  const TraceReader done(path);
  EXPECT_TRUE(done.complete());
  EXPECT_EQ(check_writer_trace(done, shape, 6), 6);
}

// In one process HDF5 shares the writer's open file with the reader.
TEST(TraceStreaming, AReaderInTheWritersProcessSeesCommittedSteps) {
  TempDir dir;
  const std::string path = dir.file("same_process.h5");
  TraceWriter w(path, TraceMetadata{});
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> row = test::tap_row(0, 0, s, 4);
    w.record("attn_q", 0, s, 1, {4}, row.data());
    w.end_step();
  }
  const std::vector<float> uncommitted = test::tap_row(0, 0, 3, 4);
  w.record("attn_q", 0, 3, 1, {4}, uncommitted.data());
  {
    const TraceReader live(path);
    EXPECT_FALSE(live.complete());
    const TapRows rows = live.read(live.tap("attn_q", 0));
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(std::vector<float>(rows.row(2), rows.row(2) + 4), test::tap_row(0, 0, 2, 4));
  }
  w.end_step();
  w.close();
  EXPECT_EQ(TraceReader(path).tap("attn_q", 0).n_rows, 4);
}

TEST(TraceStreaming, ReadersSeeWholeCommitIntervalsOnly) {
  TempDir dir;
  const std::string path = dir.file("interval.h5");
  const WriterShape shape;
  ChildProcess writer(
      writer_args(path, shape, {"--steps", "4", "--pause-after", "3", "--commit-every", "2"}));
  wait_for(writer, "paused");
  {
    const TraceReader live(path);
    EXPECT_EQ(live.committed_steps(), 2);
    EXPECT_EQ(check_writer_trace(live, shape, 2), 2);
  }
  writer.write_line("go");
  EXPECT_EQ(writer.wait(), 0);
  EXPECT_EQ(check_writer_trace(TraceReader(path), shape, 4), 4);
}

// Lets the writer report `steps` steps done, then kills it with SIGKILL.
void kill_after_steps(ChildProcess& writer, int steps) {
  std::string line;
  for (int i = 0; i < steps; ++i) ASSERT_TRUE(writer.read_line(line));
  ASSERT_EQ(line, "step " + std::to_string(steps - 1));
  writer.kill_hard();
  ASSERT_EQ(writer.wait(), -SIGKILL);
}

// kill -9 at arbitrary points (the writer runs flat out between our reading its progress
// and the kill): the trace opens, says complete=0, and every step reported done is intact.
TEST(TraceKill, SigkillLeavesEveryCommittedStep) {
  const WriterShape shape{4, 6, 1024};
  for (int reported : {1, 2, 5, 9, 14, 20}) {
    TempDir dir;
    const std::string path = dir.file("killed.h5");
    ChildProcess writer(writer_args(path, shape, {"--steps", "100000"}));
    kill_after_steps(writer, reported);
    if (HasFatalFailure()) return;

    const TraceReader r(path);
    EXPECT_FALSE(r.complete());
    EXPECT_GE(r.committed_steps(), reported);
    const std::int64_t rows = check_writer_trace(r, shape, reported);
    // The step counter and the row counts are committed together: at most one apart.
    EXPECT_LE(std::abs(rows - r.committed_steps()), 1) << "after " << reported << " steps";
  }
}

// A prompt of 12 positions in one batched step (each stack's batch), then decode steps.
TEST(TraceKill, SigkillAfterABatchedPromptLeavesEveryCommittedStep) {
  const WriterShape shape{3, 4, 256};
  const int prompt = 12;
  for (int reported : {1, 2, 6, 11}) {
    TempDir dir;
    const std::string path = dir.file("prompt.h5");
    ChildProcess writer(writer_args(path, shape, {"--steps", "100000", "--prompt", std::to_string(prompt)}));
    kill_after_steps(writer, reported);
    if (HasFatalFailure()) return;
    const TraceReader r(path);
    EXPECT_FALSE(r.complete());
    const std::int64_t rows = check_writer_trace(r, shape, prompt + reported - 1);
    EXPECT_LE(std::abs(rows - (prompt - 1) - r.committed_steps()), 1) << "after " << reported << " steps";
    for (const TapInfo& tap : r.taps()) EXPECT_EQ(tap.batch_rows, prompt) << tap.full_name;
  }
}

// Taps outside a declared catalogue are created when first written.
TEST(TraceKill, SigkillWithTapsCreatedDuringTheRun) {
  const WriterShape shape{2, 4, 512};
  for (int reported : {2, 7, 12}) {
    TempDir dir;
    const std::string path = dir.file("lazy.h5");
    ChildProcess writer(writer_args(path, shape, {"--steps", "100000", "--lazy-taps"}));
    kill_after_steps(writer, reported);
    if (HasFatalFailure()) return;
    const TraceReader r(path);
    EXPECT_FALSE(r.complete());
    check_writer_trace(r, shape, reported);
  }
}

TEST(TraceKill, AnUnclosedWriterProcessLeavesAReadableTrace) {
  TempDir dir;
  const std::string path = dir.file("exited.h5");
  const WriterShape shape;
  ChildProcess writer(writer_args(path, shape, {"--steps", "5", "--no-close"}));
  EXPECT_EQ(writer.wait(), 0);
  const TraceReader r(path);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.committed_steps(), 5);
  check_writer_trace(r, shape, 5);
}

TEST(TraceWriteFailure, UnwritablePathsAreReportedAtOpen) {
  TempDir dir;
  const std::string missing_dir = dir.file("no/such/dir/t.h5");
  const std::string a_directory = dir.path().string();
  const std::filesystem::path read_only = dir.path() / "read_only";
  std::filesystem::create_directory(read_only);
  std::filesystem::permissions(
      read_only, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  struct Case {
    std::string path;
    const char* needle;
    bool skip_as_root;
  };
  const Case cases[] = {
      {missing_dir, "does not exist", false},
      {a_directory, "cannot create the trace file", false},
      {(read_only / "t.h5").string(), "cannot create the trace file", true},
  };
  for (const Case& c : cases) {
    if (c.skip_as_root && geteuid() == 0) continue;  // root writes through permissions
    try {
      TraceWriter w(c.path, TraceMetadata{});
      ADD_FAILURE() << "created " << c.path;
    } catch (const TraceError& e) {
      EXPECT_EQ(e.file(), c.path);
      EXPECT_NE(e.problem().find(c.needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(c.path + ".partial")) << "left " << c.path << ".partial";
  }
  std::filesystem::permissions(read_only, std::filesystem::perms::owner_all);
}

// RLIMIT_FSIZE with SIGXFSZ ignored makes writes past the limit fail with EFBIG, as a full
// disk fails with ENOSPC: the writer must say so, exit cleanly, and keep what it committed.
TEST(TraceWriteFailure, FileSizeLimitGivesAClearErrorAndKeepsCommittedSteps) {
  TempDir dir;
  const std::string path = dir.file("full.h5");
  const WriterShape shape{4, 6, 4096};
  ChildProcess writer(writer_args(path, shape, {"--steps", "1000", "--fsize-limit", "6000000"}),
                      true);
  std::string line;
  std::string output;
  while (writer.read_line(line)) output += line + "\n";
  ASSERT_EQ(writer.wait(), 2) << "expected a clean exit with code 2, not a crash:\n" << output;
  const std::size_t at = output.find("committed ");
  ASSERT_NE(at, std::string::npos) << output;
  const std::int64_t committed = std::stoll(output.substr(at + 10));
  EXPECT_GE(committed, 2) << output;
  EXPECT_NE(output.find(path), std::string::npos) << "the message names the file:\n" << output;
  EXPECT_NE(output.find("File too large"), std::string::npos) << output;

  const TraceReader r(path);
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.committed_steps(), committed);
  EXPECT_EQ(check_writer_trace(r, shape, committed), committed);
}

}  // namespace
}  // namespace tapdiff
