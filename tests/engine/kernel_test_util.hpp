// Helpers of the per-op tests: deterministic test data and a comparison that reports the
// worst element and the first mismatches with their indices.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/ggml_type.hpp"
#include "model/quant_blocks.hpp"

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

// Arbitrary bytes of `elems` elements of type t: every bit pattern, or (finite) with the top exponent
// bit of every float field cleared (the values, or the blocks' scales d and m), so that rows
// sum subnormals, zeros and large values rather than NaNs.
inline std::vector<std::uint8_t> arbitrary_bytes(const GgmlTypeTraits& t, std::int64_t elems, bool finite) {
  std::vector<std::uint8_t> bytes(std::size_t(elems / t.block_elems * t.block_bytes));
  std::uint64_t state = 63;
  for (std::uint8_t& b : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = std::uint8_t(state >> 56);
  }
  if (!finite) return bytes;
  std::vector<std::size_t> top_bytes;  // in each block (a plain type: each element)
  switch (t.type) {
    case GgmlType::F32: top_bytes = {3}; break;
    case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: top_bytes = {1}; break;
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: top_bytes = {1, 3}; break;
    case GgmlType::Q6_K: top_bytes = {offsetof(BlockQ6_K, d) + 1}; break;
  }
  // Bit 6 of the top byte: bit 30 of a float32, bit 14 of a 16-bit float.
  for (std::size_t b = 0; b < bytes.size(); b += std::size_t(t.block_bytes))
    for (std::size_t i : top_bytes) bytes[b + i] &= 0xbf;
  return bytes;
}

}  // namespace tapdiff::engine::test
