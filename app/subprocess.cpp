#include "app/subprocess.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace tapdiff {
namespace {

// A child group still running this long after the forwarded signal (a build that traps or
// ignores SIGINT, a tool that keeps going) is killed, so that an interrupt always returns.
constexpr unsigned kKillAfterSeconds = 5;

// Signal handlers can reach only globals: the running child's process group and the signal.
volatile std::sig_atomic_t g_child_group = 0;
volatile std::sig_atomic_t g_signal = 0;

void forward_signal(int signal) {
  g_signal = signal;
  if (g_child_group > 0) kill(-pid_t(g_child_group), signal);
  alarm(kKillAfterSeconds);
}

void kill_child_group(int) {
  if (g_child_group > 0) kill(-pid_t(g_child_group), SIGKILL);
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const std::string& cwd, int stdout_fd) {
  setpgid(0, 0);
  if (dup2(stdout_fd, STDOUT_FILENO) < 0) _exit(127);
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
    fmt::print(stderr, "tapdiff: cannot enter {}: {}\n", cwd, std::strerror(errno));
    _exit(127);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fmt::print(stderr, "tapdiff: cannot run {}: {}\n", argv[0], std::strerror(errno));
  _exit(127);
}

}  // namespace

Interrupted::Interrupted(int signal)
    : std::runtime_error(fmt::format("interrupted by {}", strsignal(signal))), signal_(signal) {}

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd, ChildStdout out) {
  if (argv.empty()) throw std::runtime_error("run_process: empty command");
  int pipe_fds[2] = {-1, -1};
  const bool capture = out != ChildStdout::to_stderr;
  if (capture && pipe2(pipe_fds, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("cannot start {}: {}", argv[0], std::strerror(errno)));
  if (pid == 0) exec_child(argv, cwd, capture ? pipe_fds[1] : STDERR_FILENO);
  setpgid(pid, pid);  // also in the parent: no window in which a forwarded signal misses the child
  g_child_group = pid;

  ProcessResult result;
  if (capture) {
    close(pipe_fds[1]);
    char buffer[4096];
    for (;;) {
      const ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      result.output.append(buffer, std::size_t(n));
      if (out == ChildStdout::capture_and_echo) {
        std::fwrite(buffer, 1, std::size_t(n), stderr);
        std::fflush(stderr);
      }
    }
    close(pipe_fds[0]);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child_group = 0;
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

void throw_if_interrupted() {
  if (g_signal != 0) throw Interrupted(g_signal);
}

namespace {
struct sigaction g_previous_int, g_previous_term, g_previous_alarm;
}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
  action.sa_handler = kill_child_group;
  sigaction(SIGALRM, &action, &g_previous_alarm);
}

InterruptGuard::~InterruptGuard() {
  alarm(0);
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGALRM, &g_previous_alarm, nullptr);
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace tapdiff
