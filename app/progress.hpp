// A one-line progress display for long work, shown only when stderr is a terminal.
#pragma once

#include <chrono>
#include <string>

namespace tapdiff {

class Progress {
public:
  // enabled: false silences it even on a terminal.
  explicit Progress(std::string label, bool enabled = true);
  // Redraws at most every 100 ms (and always on the last step).
  void update(int done, int total, const std::string& detail = {});
  void finish();  // clears the line

private:
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tapdiff
