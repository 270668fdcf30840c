// A helper program run by a test: its stdout read line by line, its stdin written, killable.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tapdiff::test {

class ChildProcess {
public:
  // merge_stderr: the child's stderr goes to the same pipe as its stdout.
  explicit ChildProcess(const std::vector<std::string>& argv, bool merge_stderr = false);
  ~ChildProcess();  // kills and reaps the child if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The next stdout line without '\n'; false at end of output.
  bool read_line(std::string& line);
  void write_line(const std::string& line);
  void kill_hard();  // SIGKILL
  // Waits for exit: the exit code, or -signal when killed by a signal.
  int wait();
  std::string read_stderr();  // what the child wrote to stderr (after wait)

private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string buffer_;
  int status_ = 0;
  bool reaped_ = false;
};

// Runs argv to completion: exit code (or -signal) and combined stdout.
int run_program(const std::vector<std::string>& argv, std::string* output = nullptr);

}  // namespace tapdiff::test
