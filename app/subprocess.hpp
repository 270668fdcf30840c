// Child processes for the commands that drive other programs (`bisect` drives git). Each
// child runs in its own process group; while an InterruptGuard lives, SIGINT and SIGTERM are
// forwarded to the running child's group instead of killing tapdiff, so the caller can clean
// up before exiting. A group that outlives the signal by 5 s is killed (SIGKILL).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tapdiff {

struct ProcessResult {
  int status = 0;      // exit code, or 128 + signal when the child was killed
  std::string output;  // stdout, when captured
};

enum class ChildStdout {
  to_stderr,          // the child's stdout goes to our stderr (keeps our stdout for results)
  capture,            // returned in ProcessResult::output; stderr passes through
  capture_and_echo,   // both: captured, and echoed to our stderr as it arrives
};

// Runs argv (argv[0] searched on PATH) in `cwd` and waits. Throws std::runtime_error when the
// process cannot be created (a program that cannot be executed exits 127).
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd,
                          ChildStdout out = ChildStdout::to_stderr);

// The signal (SIGINT, SIGTERM) that interrupted a child; the CLI exits 128 + signal.
class Interrupted : public std::runtime_error {
public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }

private:
  int signal_;
};

// Throws Interrupted when an InterruptGuard caught a signal. Cleanup code runs children
// without calling it.
void throw_if_interrupted();

// Installs the forwarding handlers; restores the previous ones when destroyed.
class InterruptGuard {
public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// Quotes text for a POSIX shell command line.
std::string shell_quote(const std::string& text);

}  // namespace tapdiff
