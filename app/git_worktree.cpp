#include "app/git_worktree.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <stdexcept>

namespace tapdiff {
namespace fs = std::filesystem;

std::string git_output(const std::string& repo, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"git", "-C", repo};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult r = run_process(argv, "", ChildStdout::capture);
  if (r.status != 0) {
    std::string command = "git";
    for (const auto& a : args) command += " " + a;
    throw std::invalid_argument(fmt::format("{}: `{}` failed (exit {})", repo, command, r.status));
  }
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

TempWorktree::TempWorktree(const std::string& repo, const std::string& commit, const std::string& what)
    : repo_(repo) {
  std::string pattern = (fs::temp_directory_path() / fmt::format("tapdiff-{}-XXXXXX", what)).string();
  if (mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error(fmt::format("cannot create a temporary folder {}: {}", pattern, std::strerror(errno)));
  scratch_ = pattern;
  worktree_ = (fs::path(scratch_) / "worktree").string();
  const ProcessResult r =
      run_process({"git", "-C", repo_, "worktree", "add", "--quiet", "--detach", worktree_, commit}, "");
  if (r.status != 0) {
    fs::remove_all(scratch_);
    throw std::runtime_error(fmt::format("{}: `git worktree add --detach {} {}` failed (exit {})", repo_,
                                         worktree_, commit, r.status));
  }
}

TempWorktree::~TempWorktree() {
  // Best effort, also after an error or an interrupt (a second Ctrl-C reaches these children).
  try {
    run_process({"git", "-C", repo_, "worktree", "remove", "--force", "--force", worktree_}, "");
    std::error_code ignored;
    fs::remove_all(scratch_, ignored);
    run_process({"git", "-C", repo_, "worktree", "prune"}, "");
  } catch (const std::exception& e) {
    fmt::print(stderr, "tapdiff: cannot remove the temporary worktree {}: {}\n", worktree_, e.what());
  }
}

ProcessResult TempWorktree::git(const std::vector<std::string>& args, bool echo) const {
  std::vector<std::string> argv{"git"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, worktree_, echo ? ChildStdout::capture_and_echo : ChildStdout::capture);
}

}  // namespace tapdiff
