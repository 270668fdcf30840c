// Helpers of the per-op tests: deterministic test data and a comparison that reports the
// worst element and the first mismatches with their indices.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tapdiff::engine::test {

// Values in [-scale, scale), from a fixed LCG: the same on every machine.
inline std::vector<float> test_values(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (float((s >> 40) & 0xffffff) / 8388608.0f - 1.0f);
  }
  return v;
}

// |actual - expected| <= atol + rtol·|expected| everywhere.
inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<double>& expected, double atol,
                                            double rtol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  std::ostringstream first;
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(double(actual[i]) - expected[i]);
    const double excess = err - (atol + rtol * std::abs(expected[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
    if (excess > 0 || std::isnan(actual[i]) != std::isnan(expected[i])) {
      if (bad < 5) first << "\n  [" << i << "] " << actual[i] << " vs " << expected[i];
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements outside atol " << atol << " + rtol "
         << rtol << "; worst [" << worst << "] " << actual[worst] << " vs " << expected[worst]
         << first.str();
}

// The same float32 bits everywhere, a NaN standing for any NaN: which of two NaN operands
// an addition returns is the compiler's choice.
inline ::testing::AssertionResult same_floats(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const bool nans = std::isnan(actual[i]) && std::isnan(expected[i]);
    if (!nans && std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "[" << i << "] " << actual[i] << " vs " << expected[i] << " (of "
                                           << actual.size() << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tapdiff::engine::test
