#include "app/progress.hpp"

#include <cstdio>
#include <fmt/format.h>
#include <unistd.h>

namespace tapdiff {

Progress::Progress(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::update(int done, int total, const std::string& detail) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  fmt::print(stderr, "\r\033[K{} {}/{} steps, {:.1f} steps/s{}{}", label_, done, total,
             seconds > 0 ? done / seconds : 0.0, detail.empty() ? "" : "  ", detail);
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_) fmt::print(stderr, "\r\033[K");
}

}  // namespace tapdiff
