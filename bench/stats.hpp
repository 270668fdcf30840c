// Summaries of a benchmark's repeated timings.
#pragma once

#include <algorithm>
#include <vector>

namespace tapdiff::bench {

// The middle value; the mean of the two middle values of an even count.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace tapdiff::bench
