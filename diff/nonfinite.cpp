#include "diff/nonfinite.hpp"

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

}  // namespace tapdiff::diff
