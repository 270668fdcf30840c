// The deterministic tap values the test writer records and the tests (C++ and Python,
// tests/tracer/test_python_interop.py) check: exact in float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tapdiff::test {

inline float tap_value(int tap, int layer, std::int64_t position, std::int64_t i) {
  const std::int64_t k = (tap * 131 + (layer + 1) * 17 + position * 7 + i) % 1000;
  return static_cast<float>(k) / 8.0f - 60.0f;
}

// (width,) row of tap `tap` at (layer, position).
inline std::vector<float> tap_row(int tap, int layer, std::int64_t position, std::int64_t width) {
  std::vector<float> row(static_cast<std::size_t>(width));
  for (std::int64_t i = 0; i < width; ++i) {
    row[static_cast<std::size_t>(i)] = tap_value(tap, layer, position, i);
  }
  return row;
}

inline std::int32_t token_at(std::int64_t position) {
  return static_cast<std::int32_t>(1000 + position);
}

}  // namespace tapdiff::test
