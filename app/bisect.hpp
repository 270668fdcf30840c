// `git bisect run` for numerical regressions, in a temporary detached worktree so the user's
// working tree, index and branch are never touched. Each step builds the commit (a failed
// build exits 125: git skips the commit) and runs `tapdiff check` (0 good, 1 bad, anything
// else 125). At the end, the check's engine traces of the first bad commit and of its parent
// are diffed: what that commit changed in the numbers. With a repro directory, each step runs
// `tapdiff replay DIR` instead (milliseconds, no model), and its output at the first bad commit
// is the report.
//
// This lives in app/ because it drives the tapdiff CLI itself (each step runs `tapdiff check`
// as a child process); no library module below app/ may run CLI commands.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff {

struct BisectOptions {
  std::string repo = ".";
  std::string good, bad;                // revisions
  std::string build;                    // shell command run in the worktree; "" = nothing to build
  std::string tapdiff;                  // the tapdiff that checks: absolute, or relative to the worktree
  std::vector<std::string> check_args;  // arguments of `tapdiff check`
  std::string repro;                    // a repro directory (`tapdiff repro`): replayed instead of check
};

struct BisectStep {
  std::string commit;
  std::string verdict;  // good | bad | skip
  std::string subject;
};

struct BisectOutcome {
  std::vector<BisectStep> steps;               // the commits git tested, in order
  std::string first_bad, first_bad_subject;    // empty when git could not name one commit
  std::vector<std::string> candidates;         // "sha subject", when only skipped commits are left
  std::string parent, parent_subject;
  std::optional<diff::DiffResult> divergence;  // engine trace at the parent vs at the first bad commit
  std::string replay_first_bad;                // with a repro: `tapdiff replay` at the first bad commit
  std::string no_report_reason;                // why there is no divergence report
};

// Throws std::invalid_argument for bad options (not a repository, unknown revisions),
// Interrupted when SIGINT/SIGTERM arrived; the worktree is removed in every case.
BisectOutcome bisect(const BisectOptions& options);

// The steps and the result of a `git bisect log`.
void parse_bisect_log(const std::string& log, BisectOutcome& outcome);

}  // namespace tapdiff
