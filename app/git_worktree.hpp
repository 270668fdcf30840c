// A detached git worktree in a fresh temporary folder, for work that must never touch the
// user's working tree, index or branch. The folder (worktree and scratch files) and the
// worktree's registration in the repository are removed when the object is destroyed.
#pragma once

#include <string>
#include <vector>

#include "app/subprocess.hpp"

namespace tapdiff {

// `git -C repo ARGS...` with stdout captured. Throws std::invalid_argument with git's message
// when git fails (what callers report as bad input: not a repository, an unknown revision).
std::string git_output(const std::string& repo, const std::vector<std::string>& args);

class TempWorktree {
public:
  // `git worktree add --detach <tmp>/worktree <commit>`; <tmp> = $TMPDIR/tapdiff-<what>-XXXXXX.
  TempWorktree(const std::string& repo, const std::string& commit, const std::string& what);
  ~TempWorktree();
  TempWorktree(const TempWorktree&) = delete;
  TempWorktree& operator=(const TempWorktree&) = delete;

  const std::string& path() const { return worktree_; }  // the checkout
  const std::string& scratch() const { return scratch_; }  // the temporary folder holding it

  // Runs `git ARGS...` inside the worktree (capturing stdout, echoed to stderr when `echo`).
  ProcessResult git(const std::vector<std::string>& args, bool echo = false) const;

private:
  std::string repo_, scratch_, worktree_;
};

}  // namespace tapdiff
