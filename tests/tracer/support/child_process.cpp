#include "child_process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace tapdiff::test {
namespace {

void make_pipe(int fds[2]) {
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, bool merge_stderr) {
  int in[2];
  int out[2];
  int err[2];
  make_pipe(in);
  make_pipe(out);
  make_pipe(err);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(merge_stderr ? out[1] : err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
  stderr_fd_ = err[0];
}

ChildProcess::~ChildProcess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  for (int fd : {stdin_fd_, stdout_fd_, stderr_fd_}) {
    if (fd >= 0) close(fd);
  }
}

bool ChildProcess::read_line(std::string& line) {
  while (true) {
    const std::size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return true;
    }
    char chunk[256];
    const ssize_t n = read(stdout_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void ChildProcess::write_line(const std::string& line) {
  const std::string text = line + "\n";
  if (write(stdin_fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    throw std::runtime_error("write to child failed");
  }
}

void ChildProcess::kill_hard() { ::kill(pid_, SIGKILL); }

int ChildProcess::wait() {
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  if (WIFSIGNALED(status_)) return -WTERMSIG(status_);
  return WEXITSTATUS(status_);
}

std::string ChildProcess::read_stderr() {
  std::string text;
  char chunk[256];
  ssize_t n = 0;
  while ((n = read(stderr_fd_, chunk, sizeof chunk)) > 0)
    text.append(chunk, static_cast<std::size_t>(n));
  return text;
}

int run_program(const std::vector<std::string>& argv, std::string* output) {
  ChildProcess child(argv, true);
  std::string line;
  std::string text;
  while (child.read_line(line)) text += line + "\n";
  const int code = child.wait();
  text += child.read_stderr();
  if (output != nullptr) *output = text;
  return code;
}

}  // namespace tapdiff::test
