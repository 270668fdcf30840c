#include "app/bisect.hpp"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "app/git_worktree.hpp"
#include "app/subprocess.hpp"
#include "diff/compare.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {
namespace {
namespace fs = std::filesystem;

std::string resolve_commit(const std::string& repo, const std::string& rev, const std::string& option) {
  try {
    return git_output(repo, {"rev-parse", "--verify", "--quiet", rev + "^{commit}"});
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(fmt::format("{} {}: not a commit in {}", option, rev, repo));
  }
}

std::string this_executable() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error(fmt::format("cannot locate the tapdiff executable: {}", error.message()));
  return self.string();
}

// The `git bisect run` step: exit 0 good, 1 bad, 125 skip. Traces land in <traces>/<commit>;
// a replay's output in <traces>/<commit>.replay.
std::string step_script(const BisectOptions& o, const std::string& traces) {
  const std::string tapdiff = shell_quote(o.tapdiff.empty() ? this_executable() : o.tapdiff);
  std::string check = tapdiff + " check";
  for (const auto& a : o.check_args) check += " " + shell_quote(a);
  if (!o.repro.empty())
    check = fmt::format("mkdir -p {0} && {1} replay {2} >{0}/\"$commit\".replay 2>&1", shell_quote(traces), tapdiff,
                        shell_quote(fs::absolute(o.repro).string()));
  std::string s =
      "#!/bin/sh\n"
      "# One `git bisect run` step, written by tapdiff bisect: build (failure: 125, git skips the\n"
      "# commit), then check (0 good, 1 bad, anything else 125: cannot test).\n"
      "commit=$(git rev-parse HEAD) || exit 128\n";
  if (!o.build.empty())
    s += fmt::format("/bin/sh -c {} || {{ echo \"tapdiff bisect: build failed at $commit: skipped\" >&2; exit 125; }}\n",
                     shell_quote(o.build));
  s += o.repro.empty() ? fmt::format("{} --keep-traces {}/\"$commit\"\n", check, shell_quote(traces)) : check + "\n";
  s += "code=$?\n"
       "case $code in 0|1) exit $code ;; esac\n"
       "echo \"tapdiff bisect: check exited $code at $commit: cannot test, skipped\" >&2\n"
       "exit 125\n";
  return s;
}

std::string subject_of(const TempWorktree& wt, const std::string& commit) {
  return git_output(wt.path(), {"log", "-1", "--format=%s", commit});
}

// Runs the step at `commit` unless the bisection already did; returns the engine trace or ""
// (with the reason) when the step did not produce one.
std::string engine_trace_at(const TempWorktree& wt, const std::string& script, const std::string& traces,
                            const std::string& commit, int expected_status, std::string& reason) {
  const fs::path trace = fs::path(traces) / commit / "engine.h5";
  if (fs::exists(trace)) return trace.string();
  if (wt.git({"checkout", "--quiet", "--detach", commit}).status != 0) {
    reason = fmt::format("cannot check out {}", commit);
    return "";
  }
  const int status = run_process({"/bin/sh", script}, wt.path()).status;
  throw_if_interrupted();
  if (status != expected_status || !fs::exists(trace)) {
    reason = status == 0 ? fmt::format("the check passes at {}: was --bad right?", commit)
                         : fmt::format("the step at {} exited {} without the expected verdict", commit, status);
    return "";
  }
  return trace.string();
}

}  // namespace

void parse_bisect_log(const std::string& log, BisectOutcome& out) {
  static const std::regex marked(R"(^# (good|bad|skip): \[([0-9a-f]+)\] ?(.*)$)");
  static const std::regex first(R"(^# first bad commit: \[([0-9a-f]+)\] ?(.*)$)");
  static const std::regex possible(R"(^# possible first bad commit: \[([0-9a-f]+)\] ?(.*)$)");
  std::istringstream lines(log);
  std::string line;
  bool started = false;  // the marks before `git bisect start` are the --good/--bad revisions
  std::smatch m;
  while (std::getline(lines, line)) {
    if (line.rfind("git bisect start", 0) == 0) started = true;
    else if (started && std::regex_match(line, m, marked)) out.steps.push_back({m[2], m[1], m[3]});
    else if (std::regex_match(line, m, first)) {
      out.first_bad = m[1];
      out.first_bad_subject = m[2];
    } else if (std::regex_match(line, m, possible)) {
      out.candidates.push_back(fmt::format("{} {}", std::string(m[1]), std::string(m[2])));
    }
  }
}

BisectOutcome bisect(const BisectOptions& o) {
  if (!o.repro.empty() && !o.check_args.empty())
    throw std::invalid_argument("--repro: the steps replay the repro; drop --check");
  if (!o.repro.empty() && !fs::exists(fs::path(o.repro) / "repro.json"))
    throw std::invalid_argument(fmt::format("--repro {}: no repro.json there (write one with `tapdiff repro`)", o.repro));
  for (const auto& a : o.check_args)
    if (a == "--keep-traces" || a.rfind("--keep-traces=", 0) == 0)
      throw std::invalid_argument("--check: --keep-traces is set by bisect itself (it keeps each commit's traces)");
  InterruptGuard interrupts;
  const std::string repo = git_output(o.repo, {"rev-parse", "--show-toplevel"});
  const std::string good = resolve_commit(repo, o.good, "--good");
  const std::string bad = resolve_commit(repo, o.bad, "--bad");

  const TempWorktree wt(repo, bad, "bisect");
  const std::string traces = (fs::path(wt.scratch()) / "traces").string();
  const std::string script = (fs::path(wt.scratch()) / "step.sh").string();
  {
    std::ofstream file(script);
    if (!(file << step_script(o, traces)).flush()) throw std::runtime_error(fmt::format("cannot write {}", script));
  }

  BisectOutcome out;
  const ProcessResult started = wt.git({"bisect", "start", bad, good}, true);
  throw_if_interrupted();
  if (started.status != 0)
    throw std::invalid_argument(fmt::format("{}: `git bisect start {} {}` failed (exit {})", repo, o.bad, o.good,
                                            started.status));
  const ProcessResult run = wt.git({"bisect", "run", "/bin/sh", script}, true);
  throw_if_interrupted();
  parse_bisect_log(wt.git({"bisect", "log"}).output, out);
  wt.git({"bisect", "reset"});
  if (out.first_bad.empty()) {
    if (out.candidates.empty())
      throw std::runtime_error(fmt::format("`git bisect run` ended without a result (exit {})", run.status));
    out.no_report_reason = "only skipped commits are left: the first bad commit is one of the candidates";
    return out;
  }
  out.parent = git_output(wt.path(), {"rev-parse", out.first_bad + "^"});
  out.parent_subject = subject_of(wt, out.parent);
  if (!o.repro.empty()) {
    std::ifstream replay(fs::path(traces) / (out.first_bad + ".replay"));
    std::ostringstream text;
    text << replay.rdbuf();
    out.replay_first_bad = text.str();
    return out;
  }

  const std::string before = engine_trace_at(wt, script, traces, out.parent, 0, out.no_report_reason);
  if (before.empty()) return out;
  const std::string after = engine_trace_at(wt, script, traces, out.first_bad, 1, out.no_report_reason);
  if (after.empty()) return out;
  diff::DiffOptions options;
  // A relative model path in the trace is relative to the worktree, where the check ran.
  const fs::path model = TraceReader(after).metadata().model_path;
  options.model_path = model.is_relative() ? (fs::path(wt.path()) / model).string() : model.string();
  out.divergence = diff::diff_traces(before, after, options);
  return out;
}

}  // namespace tapdiff
