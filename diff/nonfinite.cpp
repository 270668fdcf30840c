#include "diff/nonfinite.hpp"

#include <cmath>
#include <fmt/format.h>

namespace tapdiff::diff {

std::optional<StructuralFinding> first_nonfinite_origin(const std::vector<TapComparison>& taps) {
  for (const TapComparison& t : taps) {
    for (const RowMetrics& row : t.rows) {
      if (row.nonfinite == 0 && row.nonfinite_expected == 0) continue;
      const char* where = row.nonfinite == 0           ? "the expected trace only"
                          : row.nonfinite_expected == 0 ? "the actual trace only"
                                                        : "both traces";
      std::int64_t row_size = 1;
      for (const std::int64_t d : t.row_shape) row_size *= d;
      return StructuralFinding{
          "non-finite", t.full_name,
          fmt::format("non-finite values in {} from {}, position {}: {} of {} elements in the "
                      "expected trace, {} in the actual",
                      where, t.full_name, row.position, row.nonfinite_expected, row_size,
                      row.nonfinite)};
    }
  }
  return std::nullopt;
}

std::optional<std::vector<std::size_t>> masked_to_minus_infinity(const std::vector<float>& expected,
                                                                 const std::vector<float>& actual, double tolerance) {
  if (expected.empty() || expected.size() != actual.size()) return std::nullopt;
  std::vector<std::size_t> masked;
  double error = 0, size = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(expected[i])) return std::nullopt;
    if (std::isinf(actual[i]) && actual[i] < 0) {
      masked.push_back(i);
    } else if (!std::isfinite(actual[i])) {
      return std::nullopt;
    } else {
      error += (double(actual[i]) - expected[i]) * (double(actual[i]) - expected[i]);
      size += double(expected[i]) * expected[i];
    }
  }
  if (masked.empty() || !(error <= tolerance * size)) return std::nullopt;
  return masked;
}

}  // namespace tapdiff::diff
