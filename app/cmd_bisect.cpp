// `tapdiff bisect --good REV --bad REV [--build CMD] [--check ARGS... | --repro DIR]`: finds the
// commit that broke the numbers with `git bisect run` in a temporary worktree (app/bisect.hpp),
// then prints it, its subject, and the divergence report of that commit against its parent (with
// --repro: the replay's output there). Exit 0: a
// commit was named and reported; 125: no single commit could be named (skipped commits) or no
// report could be made; 2: bad input; 128 + signal when interrupted (the worktree is removed).
#include <fmt/format.h>

#include "app/bisect.hpp"
#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/report_output.hpp"
#include "app/subprocess.hpp"

namespace tapdiff {
namespace {

void print_outcome(const BisectOutcome& out) {
  if (!out.first_bad.empty()) {
    fmt::print("first bad commit: {} {}\n", out.first_bad, out.first_bad_subject);
    fmt::print("parent:           {} {}\n", out.parent, out.parent_subject);
  } else {
    fmt::print("no single first bad commit: only skipped commits are left; it is one of\n");
    for (const auto& c : out.candidates) fmt::print("  {}\n", c);
  }
  fmt::print("tested:\n");
  for (const auto& s : out.steps) fmt::print("  {:.12} {:<4}  {}\n", s.commit, s.verdict, s.subject);
  if (!out.no_report_reason.empty()) fmt::print("no divergence report: {}\n", out.no_report_reason);
  if (!out.replay_first_bad.empty()) fmt::print("\nreplay at {:.12}:\n{}", out.first_bad, out.replay_first_bad);
  if (out.divergence) fmt::print("\ndivergence of {:.12} against its parent {:.12}:\n", out.first_bad, out.parent);
  std::fflush(stdout);
}

}  // namespace

void add_bisect_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand(
      "bisect", "Find the commit that broke the numbers: git bisect run (build + check) in a temporary worktree");
  struct Options {
    BisectOptions bisect;
    ReportOutput report;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--good", o->bisect.good, "A revision whose numbers are right")->required();
  cmd->add_option("--bad", o->bisect.bad, "A revision whose numbers are wrong")->required();
  cmd->add_option("--build", o->bisect.build,
                  "Shell command that builds a commit (run in the worktree; failure skips the commit)");
  cmd->add_option("--tapdiff", o->bisect.tapdiff,
                  "The tapdiff that runs the check: relative to the worktree (e.g. build/app/tapdiff, "
                  "what --build made) or absolute; default: this one");
  cmd->add_option("-C,--repo", o->bisect.repo, "The git repository")->capture_default_str();
  cmd->add_option("--repro", o->bisect.repro,
                  "A repro directory (`tapdiff repro`): each step replays it instead of running a check");
  add_report_options(*cmd, o->report);
  // --check takes every argument after it: they are `tapdiff check`'s, options included.
  cmd->prefix_command();
  cmd->footer("  --check ARGS...   Arguments of `tapdiff check`, run at every commit in the worktree;\n"
              "                    everything after --check belongs to it, so it comes last");

  cmd->callback([o, cmd, set_exit] {
    auto rest = cmd->remaining();
    if (!rest.empty()) {
      if (rest.front() != "--check")
        throw std::invalid_argument(fmt::format("bisect: unexpected argument \"{}\" (options come before --check)",
                                                rest.front()));
      o->bisect.check_args.assign(rest.begin() + 1, rest.end());
    }
    try {
      const BisectOutcome out = bisect(o->bisect);
      print_outcome(out);
      if (!o->bisect.repro.empty() && !out.first_bad.empty()) {
        set_exit(kExitPass);
        return;
      }
      if (!out.divergence) {
        set_exit(kExitCannotTest);
        return;
      }
      write_reports(*out.divergence, o->report);
      set_exit(kExitPass);
    } catch (const Interrupted& e) {
      fmt::print(stderr, "tapdiff: bisect {}; the temporary worktree was removed\n", e.what());
      set_exit(128 + e.signal());
    }
  });
}

}  // namespace tapdiff
